"""A LightningModule that detects, through the Lightning route: a small torchvision FasterRCNN wrapped in a
LightningModule, a DataModule of (images, targets of boxes and labels) batches, `task = auto` picks detection
from the batches, and the run's test mAP is what pycocotools computes again from the two COCO files it saves.
Real Lightning, torchvision and pycocotools; a project the test writes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "detection"))
from coco_check import pycocotools_map  # noqa: E402
from lightning_helpers import DETECTION_PROJECT  # noqa: E402
from training_helpers import done, failed, train  # noqa: E402

pytest.importorskip("lightning")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    folder = tmp_path_factory.mktemp("detector")
    path = folder / "project.py"
    path.write_text(DETECTION_PROJECT)
    return path


def _spec(path: Path, module: str = "Detector", **changes) -> dict:
    spec = {
        "model": {"name": f"lightning:{path}:{module}"},
        "dataset": {"name": f"lightning:{path}:Rectangles"},
        "epochs": 2,
        "log_every_steps": 1,
    }
    spec.update(changes)
    return spec


@pytest.fixture(scope="module")
def trained(project, tmp_path_factory):
    return done(train(tmp_path_factory.mktemp("ws"), _spec(project)))


def test_a_detecting_lightning_module_reports_the_map_pycocotools_computes_from_its_files(trained):
    result = trained
    assert result["task"] == "detection"  # task auto, picked from the (images, targets) batches
    assert result["monitor"]["name"] == "map" and result["monitor"]["label"] == "mAP"
    folder = Path(result["run_dir"]) / "artifacts"
    truth = json.loads((folder / "ground_truth_test.json").read_text())
    assert len(truth["images"]) == 6 and [c["name"] for c in truth["categories"]] == ["red", "green"]
    assert result["monitor"]["test"] == pytest.approx(pycocotools_map(folder), abs=1e-3)
    assert set(result["final"]["test_metrics"]) >= {"map", "map_50", "map_75", "mar_100"}
    evaluation = json.loads(Path(result["evaluation"]).read_text())
    assert evaluation["task"] == "detection" and [r["class"] for r in evaluation["per_class"]] == [
        "red",
        "green",
    ]
    assert 'task = "detection"' in (Path(result["run_dir"]) / "spec.toml").read_text()
    assert (Path(result["run_dir"]) / "checkpoints" / "model.pt").is_file()


def test_a_module_that_does_not_answer_with_boxes_is_told_what_to_return(project, tmp_path):
    message = failed(train(tmp_path / "ws", _spec(project, "Classifies", task="detection", epochs=1)))
    assert "must return one {boxes, labels, scores} dict per image" in message, message


def test_its_run_quantizes_exports_and_answers_try_it_as_a_detection_run_does(trained):
    """The jobs after training read the DataModule's batches as a detection set's splits and the module as the
    detector: quantize by mAP, the QDQ export with parity box by box, Try it with FP32 beside INT8 boxes."""
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    workspace = Path(trained["run_dir"]).parents[1]

    def job(task: str, spec: dict) -> dict:
        return done(run_task(get_task(task), spec, emit=lambda *a: None, workspace=workspace))

    quantized = job("quant.analyze", {"source": {"run": trained["run_dir"]}})
    assert quantized["task"] == "detection" and quantized["metric"]["name"] == "map"
    assert quantized["fp32"]["accuracy"] == pytest.approx(trained["monitor"]["test"], abs=1e-6)
    exported = job("export.model", {"source": {"run": quantized["run_dir"]}, "format": "onnx_qdq"})
    assert exported["task"] == "detection" and exported["parity"]["passed"], exported["parity"]
    assert all("why" in box for row in exported["parity"]["images"] for box in row["extra"])
    answer = job(
        "predict.model", {"source": {"run": quantized["run_dir"]}, "sample": {"split": "test", "index": 0}}
    )
    assert answer["run_kind"] == "quantize" and answer["fp32"] and answer["quantized"]
    assert {row["label"] for row in answer["fp32"]} <= {"red", "green"}  # the DataModule's class names
