"""Training any task through the real runner (issue #20): a user's own Dataset file and model file, written
here, trained for regression, multi-label and segmentation; task=auto says what it chose and why; a target or
an output the task cannot use fails with a clear message; classification on the built-in sets keeps its
results."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
from training_helpers import QUICK, Recorder, done, failed, merge, metrics, train

DATASETS = '''
import math
import torch
from torch.utils.data import Dataset


class Wave(Dataset):
    """Regression: y = a weighted sum of 8 features plus a little noise (a scalar float target)."""

    def __init__(self, size=400):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 8, generator=g)
        self.y = self.x @ torch.linspace(-1, 1, 8) + 0.05 * torch.randn(size, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Tags(Dataset):
    """Multi-label: 3 labels, label k is on when feature k is positive (a 0/1 float vector target)."""

    def __init__(self, size=400):
        g = torch.Generator().manual_seed(1)
        self.x = torch.randn(size, 6, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": self.x[i], "target": (self.x[i, :3] > 0).float()}


class Squares(Dataset):
    """Segmentation: a bright square on a dark 16x16 image; the mask is 1 inside the square."""

    def __init__(self, size=160):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        top, left = (int(v) for v in torch.randint(0, 10, (2,), generator=g))
        mask = torch.zeros(16, 16, dtype=torch.int64)
        mask[top:top + 6, left:left + 6] = 1
        image = 0.1 * torch.randn(1, 16, 16, generator=g) + mask.float()[None]
        return image, mask


class Labels(Dataset):
    """Integer labels, for a task that does not fit them."""

    def __len__(self):
        return 50

    def __getitem__(self, i):
        return torch.full((4,), float(i % 3)), i % 3
'''

MODELS = """
import torch
from torch import nn


def linear(num_classes=1):
    return nn.Linear(8, num_classes)


def tagger(num_classes=3):
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, num_classes))


def segmenter(num_classes=2):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, num_classes, 1))


def three_outputs(num_classes=1):
    return nn.Linear(8, 3)
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "data.py").write_text(textwrap.dedent(DATASETS))
    (root / "nets.py").write_text(textwrap.dedent(MODELS))
    return root


def spec_for(project: Path, dataset: str, net: str, **changes) -> dict:
    base = {
        "dataset": {"name": f"file:{project / 'data.py'}:{dataset}", "num_workers": 0},
        "model": {"name": f"file:{project / 'nets.py'}:{net}"},
        "epochs": 3,
        "batch_size": 32,
        "lr": 0.05,
        "log_every_steps": 5,
    }
    return merge(base, **changes)


def logs(recorder: Recorder) -> str:
    return "\n".join(event["text"] for event in recorder.of("log"))


def evaluation(result: dict) -> dict:
    return json.loads(Path(result["evaluation"]).read_text())


def test_regression_trains_reports_its_monitor_and_writes_a_scatter(tmp_path, project):
    recorder = Recorder()
    result = done(train(tmp_path, spec_for(project, "Wave", "linear"), recorder=recorder))
    assert "task: regression (task=auto: " in logs(recorder)
    assert result["task"] == "regression"
    monitor = result["monitor"]
    assert monitor["name"] == "mae" and monitor["higher_is_better"] is False
    assert monitor["best_val"] is not None and monitor["test"] is not None and monitor["test"] < 0.3
    assert result["final"]["test_accuracy"] is None and result["best_val_accuracy"] is None
    assert {"val_mae", "val_rmse", "val_r2"} <= set(result["final"])
    view = evaluation(result)
    assert view["task"] == "regression" and view["scatter"] and view["worst"]
    series = metrics(result["run_dir"])
    assert "val/mae" in series and "train/mae" in series and "val/acc" not in series
    first, last = series["epoch/train_loss"][1][0], series["epoch/train_loss"][1][-1]
    assert last < first  # it learns
    spec_text = (Path(result["run_dir"]) / "spec.toml").read_text()
    assert 'task = "regression"' in spec_text and "num_classes = 1" in spec_text  # recorded for later jobs


def test_multilabel_is_detected_from_a_zero_one_vector_and_monitors_mean_ap(tmp_path, project):
    recorder = Recorder()
    result = done(train(tmp_path, spec_for(project, "Tags", "tagger", epochs=4), recorder=recorder))
    assert result["task"] == "multilabel" and result["monitor"]["name"] == "map"
    assert result["monitor"]["higher_is_better"] is True and result["monitor"]["test"] > 0.8
    assert "0/1" in logs(recorder) or "multi" in logs(recorder)
    assert len(evaluation(result)["per_label"]) == 3


def test_segmentation_is_detected_from_a_mask_and_monitors_miou(tmp_path, project):
    recorder = Recorder()
    result = done(
        train(
            tmp_path, spec_for(project, "Squares", "segmenter", model={"num_classes": 2}), recorder=recorder
        )
    )
    assert result["task"] == "segmentation" and result["monitor"]["name"] == "miou"
    assert result["monitor"]["test"] > 0.6
    view = evaluation(result)
    assert len(view["per_class"]) == 2 and view["worst"]
    assert "val/miou" in metrics(result["run_dir"])


def test_a_target_that_does_not_fit_the_task_names_the_task_that_would(tmp_path, project):
    message = failed(train(tmp_path, spec_for(project, "Labels", "linear", task="regression")))
    assert "task=regression" in message and "classification" in message


def test_an_output_the_task_cannot_use_is_refused_before_training(tmp_path, project):
    message = failed(train(tmp_path, spec_for(project, "Wave", "three_outputs")))
    assert "for task regression" in message and "(batch, 1) values" in message


def test_a_built_in_set_is_classification_and_refuses_another_task(tmp_path):
    message = failed(train(tmp_path, merge(QUICK, task="segmentation")))
    assert "task: segmentation" in message and "classification" in message
    result = done(train(tmp_path, merge(QUICK, epochs=1)))
    assert result["task"] == "classification" and result["monitor"]["name"] == "acc"
    assert result["monitor"]["best_val"] == result["best_val_accuracy"]
    assert set(result["final"]) == {"train_loss", "val_loss", "val_accuracy", "test_accuracy"}
    assert math.isclose(result["monitor"]["test"], result["final"]["test_accuracy"])
    view = evaluation(result)
    assert {"classes", "confusion_matrix", "per_class_accuracy", "test_accuracy", "worst"} <= set(view)


SEGMENTERS = """
from torch import nn


def fixed_head():
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 2, 1))


def required(num_classes):
    return nn.Conv2d(1, num_classes, 1)
"""


def test_segmentation_with_auto_classes_takes_the_count_from_the_model(tmp_path, project):
    # Squares has no `classes`: the constructor's num_classes default says 2.
    recorder = Recorder()
    result = done(train(tmp_path, spec_for(project, "Squares", "segmenter", epochs=1), recorder=recorder))
    assert result["task"] == "segmentation"
    assert "model.num_classes: auto, 2 (the num_classes default of segmenter: " in logs(recorder)
    # A model that takes no num_classes: its output channels on the trial batch.
    (tmp_path / "segmenters.py").write_text(SEGMENTERS)
    recorder = Recorder()
    spec = spec_for(
        project,
        "Squares",
        "segmenter",
        epochs=1,
        model={"name": f"file:{tmp_path / 'segmenters.py'}:fixed_head"},
    )
    done(train(tmp_path, spec, recorder=recorder))
    assert "model.num_classes: auto, 2 (the output channels of fixed_head on the trial batch" in logs(
        recorder
    )
    # One that needs num_classes and has no default cannot say: the refusal names why.
    spec["model"]["name"] = f"file:{tmp_path / 'segmenters.py'}:required"
    message = failed(train(tmp_path, spec))
    assert "required takes num_classes with no default" in message and "set model.num_classes" in message
