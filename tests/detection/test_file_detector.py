"""A user's own `file:` detector that follows torchvision's detection API (train mode: losses dict; eval:
boxes, labels, scores per image) trains through the detection route on a user's `file:` Dataset, is handed
num_classes = K + 1, and its test mAP is pycocotools' on the files the run saves; cancel stops it in
training and in evaluation."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import pytest
from coco_check import pycocotools_map

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

pytestmark = pytest.mark.slow

DATA = """
import torch
from torch.utils.data import Dataset


class Boxes(Dataset):
    classes = ["bright square"]

    def __len__(self):
        return 16

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, 64, 64, generator=g) * 0.3
        x, y = (int(v) for v in torch.randint(0, 40, (2,), generator=g))
        image[:, y : y + 20, x : x + 20] = 1.0
        box = torch.tensor([[x, y, x + 20, y + 20]], dtype=torch.float32)
        return image, {"boxes": box, "labels": torch.tensor([1])}
"""

# A tiny Faster R-CNN: two convolutions as its backbone, one anchor size; torchvision's API as is.
MODEL = """
import torch
from torch import nn
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator

SEEN = {}


def tiny(num_classes):
    SEEN["num_classes"] = num_classes
    backbone = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.ReLU()
    )
    backbone.out_channels = 8
    anchors = AnchorGenerator(sizes=((16, 32),), aspect_ratios=((1.0,),))
    return FasterRCNN(
        backbone, num_classes=num_classes, rpn_anchor_generator=anchors, min_size=64, max_size=64,
        box_detections_per_img=10, rpn_pre_nms_top_n_test=50, rpn_post_nms_top_n_test=20,
    )
"""


def _tiny_spec(tmp_path, **changes) -> dict:
    (tmp_path / "data.py").write_text(textwrap.dedent(DATA))
    (tmp_path / "net.py").write_text(textwrap.dedent(MODEL))
    return {
        "epochs": 1,
        "batch_size": 4,
        "optimizer": "sgd",
        "lr": 0.01,
        "momentum": 0.9,
        "dataset": {"name": f"file:{tmp_path / 'data.py'}:Boxes", "test_fraction": 0.25, "num_workers": 0},
        "model": {"name": f"file:{tmp_path / 'net.py'}:tiny"},
        **changes,
    }


def test_a_users_file_detector_trains_and_its_map_is_pycocotools(tmp_path):
    spec = _tiny_spec(tmp_path, epochs=2)
    logs: list = []
    result = run_task(
        get_task("train.model"), spec, emit=lambda *a: logs.append(a), workspace=tmp_path / "ws"
    )
    assert result["status"] == "done", result.get("error")
    assert result["task"] == "detection" and result["monitor"]["name"] == "map"
    run = Path(result["run_dir"])
    assert "num_classes = 2" in (run / "spec.toml").read_text()  # one class and the background
    assert (run / "checkpoints" / "model.pt").is_file() and (run / "checkpoints" / "best.pt").is_file()
    folder = run / "artifacts"
    truth = json.loads((folder / "ground_truth_test.json").read_text())
    assert len(truth["images"]) == 4 and truth["categories"] == [{"id": 1, "name": "bright square"}]
    predictions = json.loads((folder / "predictions_test.json").read_text())
    if predictions:  # two epochs of a tiny net may find nothing; then both sides say 0
        assert result["monitor"]["test"] == pytest.approx(pycocotools_map(folder), abs=1e-3)
    else:
        assert result["monitor"]["test"] == pytest.approx(0.0, abs=1e-3)
    evaluation = json.loads((folder / "evaluation.json").read_text())
    assert evaluation["task"] == "detection" and [r["class"] for r in evaluation["per_class"]] == [
        "bright square"
    ]


@pytest.mark.parametrize("during", ["epoch 1/", "validating"])
def test_cancel_stops_a_detection_run_in_training_and_in_evaluation(tmp_path, during):
    (tmp_path / "data.py").write_text(textwrap.dedent(DATA))
    (tmp_path / "net.py").write_text(textwrap.dedent(MODEL))
    spec = {
        "epochs": 3,
        "batch_size": 2,
        "optimizer": "sgd",
        "lr": 0.01,
        "dataset": {"name": f"file:{tmp_path / 'data.py'}:Boxes", "val_fraction": 0.25, "num_workers": 0},
        "model": {"name": f"file:{tmp_path / 'net.py'}:tiny"},
    }
    stop = threading.Event()
    seen: list[str] = []

    def emit(kind, payload, *rest):
        if kind == "progress" and str(payload.get("text", "")).startswith(during):
            seen.append(payload["text"])
            stop.set()

    result = run_task(get_task("train.model"), spec, emit=emit, stop_event=stop, workspace=tmp_path / "ws")
    assert seen and result["status"] == "cancelled", result


def test_a_detection_run_resumes_after_its_last_epoch(tmp_path):
    """last.pt at each epoch's end: a resume with more epochs goes on from there (the step count and the
    weights carried on), and one asking for no more epochs than were done says so and trains nothing."""
    logs: list = []
    first = run_task(
        get_task("train.model"), _tiny_spec(tmp_path), emit=lambda *a: None, workspace=tmp_path / "ws"
    )
    assert first["status"] == "done", first.get("error")
    run = Path(first["run_dir"])
    assert (run / "checkpoints" / "last.pt").is_file()
    weights = (run / "checkpoints" / "model.pt").read_bytes()
    refused = run_task(
        get_task("train.model"),
        {**_tiny_spec(tmp_path), "epochs": 1},
        emit=lambda *a: None,
        workspace=tmp_path / "ws",
        resume=run,
    )
    assert refused["status"] == "failed"
    assert refused["error"]["message"].startswith("epochs: 1 is not above the 1 epoch(s) this run has done")
    assert (run / "checkpoints" / "model.pt").read_bytes() == weights  # nothing trained, nothing lost
    again = run_task(
        get_task("train.model"),
        {**_tiny_spec(tmp_path), "epochs": 3},
        emit=lambda *a: logs.append(a),
        workspace=tmp_path / "ws",
        resume=run,
    )
    assert again["status"] == "done", again.get("error")
    assert again["epochs_completed"] == 3 and again["run_dir"] == str(run)
    assert again["global_steps"] == 3 * first["global_steps"]  # the first epoch's steps counted, not redone
    assert any("resuming after epoch 1" in str(event) for event in logs)


def test_early_stop_patience_ends_a_detection_run_when_val_map_stops_improving(tmp_path):
    spec = _tiny_spec(tmp_path, epochs=6, early_stop_patience=1, lr=1e-12)  # val mAP cannot improve
    result = run_task(get_task("train.model"), spec, emit=lambda *a: None, workspace=tmp_path / "ws")
    assert result["status"] == "done", result.get("error")
    assert result["early_stopped"] and result["epochs_completed"] == 2 and result["best_epoch"] == 1


def test_a_resume_asking_for_no_more_epochs_is_refused_before_the_run_is_touched(tmp_path):
    """`workbench train --resume` of a detection run with epochs not above those done: exit 2, one line, and
    the run still reads done."""
    import os

    from cli_runner import run_cli

    from workbench.runs import Run

    first = run_task(
        get_task("train.model"), _tiny_spec(tmp_path), emit=lambda *a: None, workspace=tmp_path / "ws"
    )
    assert first["status"] == "done", first.get("error")
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    argv = ["train", "--resume", first["run_dir"], "--workspace", str(tmp_path / "ws"), "--trust", "--json"]
    done = run_cli(argv, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    message = json.loads(done.stdout)["error"]["message"]
    assert message.startswith("epochs: 1 is not above the 1 epoch(s) this run has done"), message
    with Run(first["run_dir"], readonly=True) as run:
        assert run.summary()["status"] == "done"
