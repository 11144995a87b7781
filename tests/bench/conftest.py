"""Fixtures of the benchmark tests: a stored training run of the digits cnn (spec and seeded weights, no
training), a quantize run of it, tiny ONNX files, and `bench(...)`, which runs `bench.latency` through the
real runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import stored_training_run

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> tuple[Path, str, str]:
    """(workspace, training run id, quantize run id): the digits cnn, and quant.analyze of it (kept small)."""
    workspace = tmp_path_factory.mktemp("bench-workspace")
    train_id = stored_training_run(workspace)
    spec = {
        "source": {"run": train_id},
        "calibration": {"samples": 64, "seed": 0},
        "eval_samples": 64,
        "device": "cpu",
    }
    result = run_task(get_task("quant.analyze"), spec, emit=lambda *args: None, workspace=workspace)
    assert result["status"] == "done", result.get("error")
    return workspace, train_id, Path(result["run_dir"]).name
