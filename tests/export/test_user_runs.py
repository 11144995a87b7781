"""A run of a user's own Dataset and model (issue #20) downstream: export checks parity on the run's real samples
(read through the user's Dataset), bench times it, and quantize measures the task's monitor (MAE here)."""

from __future__ import annotations

import textwrap

import pytest

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

PROJECT = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Rows(Dataset):
    def __init__(self, size=120):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 6, generator=g)
        self.y = self.x.sum(dim=1, keepdim=True)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def net(num_classes=1):
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, num_classes))
'''


def _run(name: str, spec: dict, workspace) -> dict:
    return run_task(get_task(name), spec, emit=lambda *a: None, workspace=workspace)


@pytest.fixture(scope="module")
def regression_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "project.py").write_text(textwrap.dedent(PROJECT))
    workspace = root / "ws"
    result = _run("train.classifier", {
        "dataset": {"name": f"file:{root / 'project.py'}:Rows", "num_workers": 0},
        "model": {"name": f"file:{root / 'project.py'}:net"}, "epochs": 1, "batch_size": 16}, workspace)
    assert result["status"] == "done", result.get("error")
    assert result["task"] == "regression"
    return result, workspace


def test_export_checks_parity_on_the_runs_own_samples(regression_run):
    result, workspace = regression_run
    exported = _run("export.model", {"source": {"run": result["run_dir"]}, "format": "onnx"}, workspace)
    assert exported["status"] == "done", exported.get("error")
    parity = exported["parity"]
    assert parity["passed"]
    assert any(check["input"].startswith("samples ") for check in parity["checks"])  # real rows, not only random


def test_bench_times_the_run(regression_run):
    result, workspace = regression_run
    bench = _run("bench.latency", {"source": {"run": result["run_dir"]}, "backends": ["eager"], "iters": 5,
                                   "warmup": 1}, workspace)
    assert bench["status"] == "done", bench.get("error")
    assert bench["results"][0]["status"] == "ok"


def test_quantize_measures_the_runs_own_monitor(regression_run):
    result, workspace = regression_run
    quantized = _run("quant.analyze", {"source": {"run": result["run_dir"]}, "calibration": {"samples": 32}},
                     workspace)
    assert quantized["status"] == "done", quantized.get("error")
    assert quantized["metric"] == {"name": "mae", "label": "val MAE", "higher_is_better": False}
