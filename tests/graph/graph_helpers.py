"""Helpers for the graph engine tests: run `graph.build` through the real runner, and read what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from stored_models import BRANCHY, stored_training_run  # noqa: F401 (re-exported for the graph tests)

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

CONTRACT_KEYS = {
    "run_dir",
    "status",
    "graph_json",
    "nodes",
    "params_total",
    "params_trainable",
    "flops",
    "modules",
    "capture",
    "capture_reason",
}


def build(workspace: Path, spec: dict, logs: list | None = None) -> dict:
    def emit(msg_type, content, buffers):
        if logs is not None and msg_type == "log":
            logs.append(content["text"])

    return run_task(get_task("graph.build"), spec, emit=emit, workspace=workspace)


def done(result: dict) -> dict:
    assert result["status"] == "done", result.get("error") or result
    return result


def load_json(path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def graph_nodes(result: dict) -> list[dict]:
    return load_json(result["graph_json"])["graphs"][0]["nodes"]


def modules(result: dict) -> dict[str, dict]:
    return {row["name"]: row for row in result["modules"]}


def quantize(workspace: Path, spec: dict) -> dict:
    """quant.analyze through the real runner, kept small: 64 calibration and 64 held-out samples."""
    spec = {"calibration": {"samples": 64, "seed": 0}, "eval_samples": 64, **spec}
    return run_task(get_task("quant.analyze"), spec, emit=lambda *args: None, workspace=workspace)
