"""`workbench train` (one real subprocess each) on a Lightning project that detects: a small torchvision
FasterRCNN in a LightningModule, a DataModule of (images, targets of boxes and labels) batches. task=detection
and task=auto end with the test mAP pycocotools computes again from the two COCO files of the run; a batch
that is not such a pair, or whose boxes or labels are the wrong shape, fails with one line that says what."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "detection"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from cli_helpers import TRACEBACK, expect, one_json, wb  # noqa: E402
from coco_check import pycocotools_map  # noqa: E402
from lightning_helpers import DETECTION_PROJECT  # noqa: E402
from training_helpers import metrics  # noqa: E402

pytest.importorskip("lightning")
pytest.importorskip("pycocotools")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("detection")
    (folder / "project.py").write_text(DETECTION_PROJECT)
    return folder


def _train(project: Path, data: str = "Rectangles", *settings: str):
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return wb(
        project,
        "train",
        "--set",
        "model.name=lightning:project.py:Detector",
        "--set",
        f"dataset.name=lightning:project.py:{data}",
        *sets,
        "--json",
        workspace=project / f"ws-{data}-{len(list(project.glob('ws-*')))}",
        timeout=300,
    )


def test_task_detection_reports_the_test_map_pycocotools_computes_from_the_run_files(project):
    (project / "train.toml").write_text(
        'task = "detection"\nepochs = 2\nlog_every_steps = 1\n'
        '[model]\nname = "lightning:project.py:Detector"\n'
        '[dataset]\nname = "lightning:project.py:Rectangles"\n'
    )
    proc = wb(project, "train", "train.toml", "--json", workspace=project / "ws-toml", timeout=300)
    expect(proc, 0)
    assert TRACEBACK not in proc.stdout + proc.stderr
    result = one_json(proc)
    assert result["status"] == "done" and result["task"] == "detection", result
    folder = Path(result["run_dir"]) / "artifacts"
    assert (folder / "predictions_test.json").is_file() and (folder / "ground_truth_test.json").is_file()
    truth = json.loads((folder / "ground_truth_test.json").read_text())
    assert len(truth["images"]) == 6  # the test batches, not the validation ones
    assert [c["name"] for c in truth["categories"]] == ["red", "green"]
    expected = pycocotools_map(folder)
    test_metrics = result["final"]["test_metrics"]
    assert set(test_metrics) >= {"map", "map_50", "map_75", "mar_100"}
    assert test_metrics["map"] == pytest.approx(expected, abs=1e-3)
    assert result["metrics"]["test_map"] == pytest.approx(expected, abs=1e-3)
    assert result["monitor"]["name"] == "map" and result["monitor"]["test"] == pytest.approx(
        expected, abs=1e-3
    )
    evaluation = json.loads(Path(result["evaluation"]).read_text())
    assert evaluation["task"] == "detection" and evaluation["metrics"]["map"] == test_metrics["map"]
    assert [row["class"] for row in evaluation["per_class"]] == ["red", "green"]
    assert all(0.0 <= row["ap"] <= 1.0 for row in evaluation["per_class"])
    # the module's own logged losses stay its training curves
    assert {"train_loss", "loss_classifier", "loss_rpn_box_reg"} <= set(metrics(result["run_dir"]))
