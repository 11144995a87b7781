"""Fixtures of the export tests: the digits cnn trained once through the real training task (shorter than the
quant tests' run: parity needs a trained network, not a good one) and quantized once at W8A8, both through the
real runner in one workspace."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_helpers import export, run

DIGITS_TRAIN = {
    "dataset": {"name": "digits", "test_fraction": 0.25},
    "model": {"name": "cnn"},
    "epochs": 3,
    "batch_size": 32,
    "lr": 2e-2,
    "scheduler": "onecycle",
    "keep_best": False,
}


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> tuple[Path, str]:
    """(workspace, run id) of the trained digits cnn."""
    workspace = tmp_path_factory.mktemp("export-workspace")
    result = run("train.classifier", DIGITS_TRAIN, workspace)
    assert result["status"] == "done", result.get("error")
    assert result["final"]["test_accuracy"] >= 0.9, result["final"]
    return workspace, Path(result["run_dir"]).name


@pytest.fixture(scope="session")
def quant_run(digits_run) -> tuple[Path, dict]:
    """(workspace, result) of quant.analyze at W8A8 (per-channel symmetric weights) on the trained run."""
    workspace, run_id = digits_run
    result = run(
        "quant.analyze", {"source": {"run": run_id}, "calibration": {"samples": 128, "seed": 0}}, workspace
    )
    assert result["status"] == "done", result.get("error")
    return workspace, result


@pytest.fixture(scope="session")
def exported(digits_run):
    """exported(format, **spec) -> (result, logs), each combination exported once per session."""
    workspace, run_id = digits_run
    cache: dict = {}

    def get(fmt: str, **parts):
        key = (fmt, repr(sorted(parts.items())))
        if key not in cache:
            cache[key] = export(workspace, {"source": {"run": run_id}, "format": fmt, **parts})
        return cache[key]

    return get
