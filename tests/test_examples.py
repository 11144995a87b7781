"""The bundled examples (resources/examples) load as specs from any folder and train one short epoch through
the real runner, each choosing the task it is written for (issue #20)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workbench.specs import TrainSpec
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

EXAMPLES = Path(__file__).resolve().parents[1] / "workbench" / "resources" / "examples"
QUICK_DATA = {"shapes_segmentation": {"size": 96}, "names_transformer": {"size": 800}}  # one short epoch each


@pytest.mark.parametrize(
    "name,task,monitor",
    [
        ("shapes_segmentation", "segmentation", "miou"),
        ("diabetes_regression", "regression", "mae"),
        ("digit_attributes", "multilabel", "map"),
        ("names_transformer", "classification", "acc"),
    ],
)
def test_an_example_trains_its_task(name, task, monitor, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the spec's relative file: paths are found beside it
    spec = TrainSpec.load(EXAMPLES / name / "train.toml")
    assert spec.dataset.name.startswith(f"file:{EXAMPLES / name}")
    data = dataclasses.replace(spec.dataset, num_workers=0, args=QUICK_DATA.get(name, {}))
    spec = dataclasses.replace(spec, epochs=1, dataset=data)
    result = run_task(
        get_task("train.classifier"), spec.to_dict(), emit=lambda *a: None, workspace=tmp_path / "ws"
    )
    assert result["status"] == "done", result.get("error")
    assert result["task"] == task and result["monitor"]["name"] == monitor
    assert result["monitor"]["test"] is not None


def test_the_lightning_example_trains_with_lightnings_trainer(tmp_path, monkeypatch):
    pytest.importorskip("lightning")
    monkeypatch.chdir(tmp_path)  # the spec's relative lightning: paths are found beside it
    spec = TrainSpec.load(EXAMPLES / "digits_lightning" / "train.toml")
    assert spec.model.name == f"lightning:{EXAMPLES / 'digits_lightning' / 'model.py'}:DigitsClassifier"
    spec = dataclasses.replace(spec, epochs=1)
    result = run_task(
        get_task("train.classifier"), spec.to_dict(), emit=lambda *a: None, workspace=tmp_path / "ws"
    )
    assert result["status"] == "done", result.get("error")
    assert result["monitor"]["name"] == "val_acc" and result["monitor"]["higher_is_better"] is True
    assert result["monitor"]["test"] is not None


def test_the_detection_example_trains_and_reports_map(tmp_path, monkeypatch):
    """The bundled detection example writes its synthetic COCO set at first use into the workspace's data
    folder and trains torchvision's Faster R-CNN on it (one short epoch here)."""
    monkeypatch.chdir(tmp_path)
    spec = TrainSpec.load(EXAMPLES / "shapes_detection" / "train.toml")
    assert spec.dataset.name == "shapes_detection" and spec.task == "detection"
    spec = dataclasses.replace(spec, epochs=1, dataset=dataclasses.replace(spec.dataset, size=24))
    result = run_task(
        get_task("train.model"), spec.to_dict(), emit=lambda *a: None, workspace=tmp_path / "ws"
    )
    assert result["status"] == "done", result.get("error")
    assert result["task"] == "detection" and result["monitor"]["name"] == "map"
    assert result["monitor"]["test"] is not None
    assert (tmp_path / "ws" / "data" / "shapes_detection" / "24" / "instances.json").is_file()
