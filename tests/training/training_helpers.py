"""Shared helpers of the training tests: run `train.classifier` through the real runner, read its run back."""

from __future__ import annotations

import threading
from pathlib import Path

from workbench.runs import Run
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

# Small and quick on two slow cores: digits (1,437 training samples of 8x8), the mlp or the small cnn.
QUICK = {
    "dataset": {"name": "digits"},
    "model": {"name": "cnn"},
    "epochs": 2,
    "batch_size": 64,
    "lr": 0.01,
    "log_every_steps": 5,
}


class Recorder:
    """An `emit` that keeps every event; `on_progress` (if set) sees each progress event as it happens."""

    def __init__(self, on_progress=None):
        self.events: list[tuple[str, dict]] = []
        self.on_progress = on_progress
        self.lock = threading.Lock()

    def __call__(self, msg_type: str, content: dict, buffers: list) -> None:
        with self.lock:
            self.events.append((msg_type, content))
        if msg_type == "progress" and self.on_progress is not None:
            self.on_progress(content)

    def of(self, msg_type: str) -> list[dict]:
        with self.lock:
            return [content for kind, content in self.events if kind == msg_type]


def merge(base: dict, **changes) -> dict:
    spec = {key: dict(value) if isinstance(value, dict) else value for key, value in base.items()}
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def train(
    workspace,
    spec: dict,
    *,
    recorder: Recorder | None = None,
    stop: threading.Event | None = None,
    resume: str | Path | None = None,
) -> dict:
    return run_task(
        get_task("train.classifier"),
        spec,
        emit=recorder or Recorder(),
        workspace=workspace,
        stop_event=stop,
        resume=resume,
    )


def done(result: dict) -> dict:
    assert result["status"] == "done", result.get("error")
    return result


def failed(result: dict) -> str:
    assert result["status"] == "failed", result
    assert "traceback" not in result, result["traceback"]  # an expected failure: a JobError, no traceback
    return result["error"]["message"]


def metrics(run_dir) -> dict[str, tuple[list[int], list[float]]]:
    with Run(run_dir) as run:
        return run.read_metrics()
