"""Quantizing runs of tasks other than classification (issue #20): a regression run and a segmentation run,
each a user's own Dataset and model written here, trained one epoch and quantized W8A8 through the real
runner. The ladder, the sensitivity sweep and the mixed-precision proposal measure the task's monitor (MAE,
mIoU), say its name and direction, and a lower-is-better monitor's "drop" is its rise."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest
from event_recorder import Events

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

PROJECT = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Wave(Dataset):
    """y = a weighted sum of 8 features plus a little noise: a scalar float target (regression)."""

    def __init__(self, size=240):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 8, generator=g)
        self.y = self.x @ torch.linspace(-1, 1, 8) + 0.05 * torch.randn(size, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class Squares(Dataset):
    """A bright 6x6 square on a dark 12x12 image; the mask is 1 inside it (segmentation)."""

    def __len__(self):
        return 96

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        top, left = (int(v) for v in torch.randint(0, 6, (2,), generator=g))
        mask = torch.zeros(12, 12, dtype=torch.int64)
        mask[top:top + 6, left:left + 6] = 1
        return 0.1 * torch.randn(1, 12, 12, generator=g) + mask.float()[None], mask


def regressor(num_classes=1):
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, num_classes))


def segmenter(num_classes=2):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, num_classes, 1))
'''


def _run(name: str, spec: dict, workspace: Path, events: Events | None = None) -> dict:
    result = run_task(get_task(name), spec, emit=events or Events(), workspace=workspace)
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("quant-tasks")
    (root / "project.py").write_text(textwrap.dedent(PROJECT))
    return root / "project.py", root / "ws"


def _train(project, dataset: str, model: str, num_classes: int = 0) -> dict:
    path, workspace = project
    # keep_best off: the run's checkpoint is the model its test evaluation measured.
    return _run(
        "train.classifier",
        {
            "dataset": {"name": f"file:{path}:{dataset}", "num_workers": 0},
            "model": {"name": f"file:{path}:{model}", "num_classes": num_classes},
            "epochs": 1,
            "batch_size": 16,
            "lr": 0.05,
            "keep_best": False,
        },
        workspace,
    )


def _test_monitor(trained: dict) -> float:
    return json.loads(Path(trained["evaluation"]).read_text())["monitor"]["value"]


@pytest.fixture(scope="module")
def regression(project) -> tuple[dict, dict, Events]:
    """(training result, quantize result, quantize events) of the regression run, with both sweeps."""
    trained = _train(project, "Wave", "regressor")
    assert trained["task"] == "regression"
    events = Events()
    # A rise of 0 in MAE cannot be met by keeping layers at 8 bits alone only by chance; target_drop > 0 asks
    # for the search, and a tiny one makes it go through the layers.
    quantized = _run(
        "quant.analyze",
        {
            "source": {"run": trained["run_dir"]},
            "weights": {"bits": 8},
            "activations": {"bits": 8},
            "calibration": {"samples": 64},
            "sensitivity": True,
            "mixed_precision": {"target_drop": 1e-6},
        },
        project[1],
        events,
    )
    return trained, quantized, events


def test_regression_ladder_measures_mae_and_says_lower_is_better(regression):
    trained, result, events = regression
    assert result["metric"] == {
        "name": "mae",
        "label": "test MAE",
        "split": "test",
        "higher_is_better": False,
    }
    # The first rung is the trained model on the held-out (test) split: the MAE the run's own test evaluation
    # gave.
    assert result["held_out"]["split"] == "test split"
    assert result["steps"][0]["step"] == "fp32"
    assert result["steps"][0]["accuracy"] == pytest.approx(_test_monitor(trained), rel=1e-5)
    assert result["fp32"]["accuracy"] == result["steps"][0]["accuracy"]
    assert result["fp32"]["metrics"]["mae"] == result["fp32"]["accuracy"]
    assert set(result["quantized"]["metrics"]) >= {"mae", "rmse", "r2"}
    for step in result["steps"]:
        assert math.isfinite(step["accuracy"]) and step["accuracy"] > 0  # an MAE, not a fraction correct
    lines = [e["text"] for e in events.of("log")]
    assert any("test MAE" in line and "lower is better" in line for line in lines)
    rungs = [line for line in lines if line.startswith("step ")]
    assert len(rungs) == len(result["steps"]) and all(
        "test MAE" in line and "accuracy" not in line for line in rungs
    )
    assert events.arrays("quant/ladder")[-1]["metric"]["label"] == "test MAE"


def test_regression_sensitivity_and_proposal_turn_the_direction_round(regression):
    _, result, _ = regression
    rows = result["sensitivity"]
    assert [r["layer"] for r in rows] and all(r["only_this"] > 0 and r["all_but_this"] > 0 for r in rows)
    proposal = result["mixed_precision"]
    fp32 = result["fp32"]["accuracy"]
    # Lower is better: the goal is at most FP32 + target_drop, and "met" says whether the proposal reaches it.
    assert proposal["met"] == (proposal["accuracy"] <= fp32 + proposal["target_drop"])
    if proposal["met"]:
        assert proposal["accuracy"] <= fp32 + 1e-6
    # Every point's value is the MAE of that configuration; the first is the fully quantized model's.
    assert proposal["points"][0]["accuracy"] == result["quantized"]["accuracy"]


def test_segmentation_ladder_measures_miou(project):
    trained = _train(project, "Squares", "segmenter", num_classes=2)
    assert trained["task"] == "segmentation"
    result = _run(
        "quant.analyze", {"source": {"run": trained["run_dir"]}, "calibration": {"samples": 32}}, project[1]
    )
    assert result["metric"] == {
        "name": "miou",
        "label": "test mIoU",
        "split": "test",
        "higher_is_better": True,
    }
    assert result["steps"][0]["accuracy"] == pytest.approx(_test_monitor(trained), rel=1e-6)
    assert [s["step"] for s in result["steps"]][-1] == "activation_ranges"
    for step in result["steps"]:
        assert 0.0 <= step["accuracy"] <= 1.0
    assert "pixel_acc" in result["quantized"]["metrics"]
    assert result["quantized"]["logit_sqnr_db"] is not None


def test_the_model_report_names_the_metric_and_its_direction(regression, project):
    from workbench.report import build_report

    trained, result, _ = regression
    page = build_report(project[1], trained["run_dir"])
    assert ">test MAE ↓ ladder</text>" in page and "Accuracy ladder" not in page
    assert "Best quantized test MAE ↓" in page
    assert f"{result['quantized']['accuracy']:.4g}" in page
    assert f"{result['quantized']['accuracy'] * 100:.2f} %" not in page  # an MAE is not a percentage
