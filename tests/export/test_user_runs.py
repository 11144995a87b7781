"""A run of a user's own Dataset and model (issue #20) downstream: export checks parity on the run's real
samples (read through the user's Dataset), bench times it, and quantize measures the task's monitor (MAE
here)."""

from __future__ import annotations

import pytest
from export_helpers import run, train_project

PROJECT = """
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset


class Rows(Dataset):
    def __init__(self, size=120):
        with open(Path(__file__).with_name("inits.log"), "a") as log:  # each construction, counted by a test
            log.write("init\\n")
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 6, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def net(num_classes=1):
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, num_classes))
"""


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    result, workspace = train_project(tmp_path_factory.mktemp("project"), PROJECT, "Rows", batch_size=16)
    assert result["task"] == "regression"
    return result, workspace


def inits(workspace) -> int:
    return len((workspace.parent / "inits.log").read_text().splitlines())


def test_export_checks_parity_on_the_runs_own_samples(regression_run):
    result, workspace = regression_run
    before = inits(workspace)
    exported = run("export.model", {"source": {"run": result["run_dir"]}, "format": "onnx"}, workspace)
    assert exported["status"] == "done", exported.get("error")
    assert inits(workspace) - before == 1  # the user's Dataset is built once per export, not once per step
    parity = exported["parity"]
    assert parity["passed"]
    # real rows, not only random
    assert any(check["input"].startswith("samples ") for check in parity["checks"])


def test_bench_times_the_run(regression_run):
    result, workspace = regression_run
    bench = run(
        "bench.latency",
        {"source": {"run": result["run_dir"]}, "backends": ["eager"], "iters": 5, "warmup": 1},
        workspace,
    )
    assert bench["status"] == "done", bench.get("error")
    assert bench["results"][0]["status"] == "ok"


def test_quantize_measures_the_runs_own_monitor(regression_run):
    result, workspace = regression_run
    quantized = run(
        "quant.analyze", {"source": {"run": result["run_dir"]}, "calibration": {"samples": 32}}, workspace
    )
    assert quantized["status"] == "done", quantized.get("error")
    assert quantized["metric"] == {
        "name": "mae",
        "label": "test MAE",
        "split": "test",
        "higher_is_better": False,
    }


SEGMENTATION = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Blobs(Dataset):
    """A bright 3x3 square on a dark 8x8 image; the mask is 1 inside it."""

    classes = ["background", "blob"]  # names the mask's values: num_classes 2 without setting it

    def __init__(self, size=40):
        self.size = size

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        x = torch.zeros(1, 8, 8)
        mask = torch.zeros(8, 8, dtype=torch.long)
        r, c = i % 5, (i // 5) % 5
        x[:, r:r + 3, c:c + 3] = 1.0
        mask[r:r + 3, c:c + 3] = 1
        return x, mask


def net(num_classes=2):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, num_classes, 1))
'''


@pytest.fixture(scope="module")
def segmentation_run(tmp_path_factory):
    result, workspace = train_project(tmp_path_factory.mktemp("seg"), SEGMENTATION, "Blobs", batch_size=8)
    assert result["task"] == "segmentation"
    return result, workspace


def test_a_segmentation_run_exports_with_parity_and_benches(segmentation_run):
    """A run's model is rebuilt for its own task: a (batch, classes, H, W) output is right for
    segmentation."""
    trained, workspace = segmentation_run
    exported = run("export.model", {"source": {"run": trained["run_dir"]}, "format": "onnx"}, workspace)
    assert exported["status"] == "done", exported.get("error")
    assert exported["parity"]["passed"]
    bench = run(
        "bench.latency",
        {"source": {"run": trained["run_dir"]}, "backends": ["eager"], "iters": 5, "warmup": 1},
        workspace,
    )
    assert bench["status"] == "done", bench.get("error")
    assert bench["results"][0]["status"] == "ok"


def test_a_segmentation_runs_int8_model_exports_and_is_measured_in_its_monitor(segmentation_run):
    """The QDQ export rebuilds the quantize run's model for any task's output, and measures the task's monitor
    (mIoU here) in onnxruntime beside the simulated one, not argmax accuracy."""
    trained, workspace = segmentation_run
    quantized = run(
        "quant.analyze", {"source": {"run": trained["run_dir"]}, "calibration": {"samples": 16}}, workspace
    )
    assert quantized["status"] == "done", quantized.get("error")
    qdq = run("export.model", {"source": {"run": quantized["run_dir"]}, "format": "onnx_qdq"}, workspace)
    assert qdq["status"] == "done", qdq.get("error")
    measured = qdq["accuracy"]
    assert measured["metric"]["name"] == "miou"
    assert 0 <= measured["onnxruntime"] <= 1 and measured["simulated"] == quantized["quantized"]["accuracy"]
