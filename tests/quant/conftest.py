"""Fixtures of the quantization tests: the digits cnn trained once (for every test here) through the real
training task, and a helper that runs `quant.analyze` on it through the real runner."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from event_recorder import Events
from quant_helpers import DIGITS_TRAIN

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> tuple[Path, str]:
    """(workspace, run directory) of the trained digits cnn."""
    workspace = tmp_path_factory.mktemp("quant-workspace")
    result = run_task(get_task("train.classifier"), DIGITS_TRAIN, emit=Events(), workspace=workspace)
    assert result["status"] == "done", result.get("error")
    assert result["final"]["test_accuracy"] >= 0.97, result["final"]
    return workspace, result["run_dir"]


@pytest.fixture(scope="session")
def quantize(digits_run):
    """quantize(**spec parts) -> (result, events): quant.analyze on the trained run, through the runner."""
    workspace, run_dir = digits_run

    def run(
        events: Events | None = None, stop: threading.Event | None = None, **parts
    ) -> tuple[dict, Events]:
        spec = {"source": {"run": run_dir}, "calibration": {"samples": 256, "seed": 0}, **parts}
        events = events or Events()
        return run_task(
            get_task("quant.analyze"), spec, emit=events, workspace=workspace, stop_event=stop
        ), events

    return run
