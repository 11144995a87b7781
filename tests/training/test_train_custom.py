"""task=custom through the real runner, in process (issue #20): the user's loss and metrics functions from a
file the test writes, their metrics in the run's database and result, the monitor and its direction choosing
the best checkpoint, the test split in evaluation.json, and a bad metrics function failing with a clear
message."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
from training_helpers import QUICK, Recorder, done, failed, merge, metrics, train

PROJECT = """
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

CALLS = [0]


class Wave(Dataset):
    def __init__(self, size=240):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 8, generator=g)
        self.y = self.x @ torch.linspace(-1, 1, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def net(num_classes=1):
    return nn.Linear(8, 1)


def half_mse(outputs, target):
    return 0.5 * F.mse_loss(outputs.squeeze(1), target)


def scores(outputs, target):
    CALLS[0] += 1  # grows with every batch: each epoch's mean is higher than the last
    error = (outputs.squeeze(1) - target).abs()
    return {"mae": error.mean(), "calls": float(CALLS[0])}


def chatty(outputs, target):
    return {"mae": 1.0, "verdict": "good"}


def ce(outputs, target):
    return F.cross_entropy(outputs, target)


def accuracy(outputs, target):
    return {"acc": (outputs.argmax(1) == target).float().mean()}
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("custom_project") / "project.py"
    path.write_text(textwrap.dedent(PROJECT))
    return path


def spec_for(project: Path, **changes) -> dict:
    base = {
        "dataset": {"name": f"file:{project}:Wave", "num_workers": 0},
        "model": {"name": f"file:{project}:net"},
        "loss": f"file:{project}:half_mse",
        "metrics": f"file:{project}:scores",
        "epochs": 3,
        "batch_size": 32,
        "lr": 0.05,
        "log_every_steps": 2,
    }
    return merge(base, **changes)


def test_custom_metrics_reach_the_database_and_result_and_the_monitor_picks_best(tmp_path, project):
    recorder = Recorder()
    result = done(train(tmp_path, spec_for(project, monitor="calls", monitor_mode="min"), recorder=recorder))
    text = "\n".join(event["text"] for event in recorder.of("log"))
    assert "task: custom (set in the spec); custom: loss half_mse from" in text and "your permissions" in text
    assert result["task"] == "custom"
    series = metrics(result["run_dir"])
    for name in ("train/mae", "train/calls", "epoch/train_mae", "val/mae", "val/calls", "val/loss"):
        assert name in series, sorted(series)
    val_calls = series["val/calls"][1]
    assert len(val_calls) == 3 and val_calls == sorted(val_calls)  # rising: min keeps the first epoch
    monitor = result["monitor"]
    assert monitor["name"] == "calls" and monitor["label"] == "calls" and monitor["higher_is_better"] is False
    assert result["best_epoch"] == 1 and monitor["best_val"] == val_calls[0]
    assert {"val_mae", "val_calls"} <= set(result["final"])
    assert set(result["final"]["test_metrics"]) == {"loss", "mae", "calls"}
    first, last = series["epoch/train_loss"][1][0], series["epoch/train_loss"][1][-1]
    assert last < first  # the user's loss trains the model
    view = json.loads(Path(result["evaluation"]).read_text())
    assert view["task"] == "custom" and view["split"] == "test" and view["samples"] > 0
    assert view["monitor"]["name"] == "calls" and math.isclose(monitor["test"], view["monitor"]["value"])
    assert math.isclose(view["metrics"]["mae"], result["final"]["test_metrics"]["mae"])
    spec_text = (Path(result["run_dir"]) / "spec.toml").read_text()
    assert 'task = "custom"' in spec_text and 'monitor_mode = "min"' in spec_text  # task=auto became custom

    # The same metric with max: the last (highest) epoch is the best one.
    result = done(train(tmp_path, spec_for(project, monitor="calls", monitor_mode="max")))
    val_calls = metrics(result["run_dir"])["val/calls"][1]
    assert result["best_epoch"] == 3 and result["monitor"]["best_val"] == val_calls[-1]
    assert result["monitor"]["higher_is_better"] is True and Path(result["best_checkpoint"]).is_file()


def test_custom_on_a_built_in_set_with_the_loss_as_monitor(tmp_path, project):
    spec = merge(
        QUICK,
        epochs=1,
        model={"name": "mlp"},
        task="custom",
        loss=f"file:{project}:ce",
        metrics=f"file:{project}:accuracy",
    )
    result = done(train(tmp_path, spec))
    assert result["task"] == "custom" and result["monitor"]["name"] == "loss"
    assert result["monitor"]["higher_is_better"] is False
    assert math.isclose(result["monitor"]["best_val"], result["final"]["val_loss"], rel_tol=1e-6)
    assert result["final"]["test_metrics"]["acc"] > 0.5
    assert "val/acc" in metrics(result["run_dir"])


def test_a_metric_that_is_not_a_number_fails_naming_its_key(tmp_path, project):
    message = failed(train(tmp_path, spec_for(project, metrics=f"file:{project}:chatty", epochs=1)))
    assert "chatty from" in message and "str 'good' for the key 'verdict'" in message


def test_an_unknown_monitor_fails_listing_the_metrics(tmp_path, project):
    message = failed(train(tmp_path, spec_for(project, monitor="r2", monitor_mode="max", epochs=1)))
    assert "monitor: 'r2' is not one of the metrics" in message and "mae, calls (or loss)" in message


def test_custom_without_a_file_loss_is_refused(tmp_path, project):
    message = failed(train(tmp_path, spec_for(project, task="custom", loss="mse")))
    assert "loss: task=custom needs loss=file:<path.py>:<fn>" in message
