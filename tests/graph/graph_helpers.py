"""Helpers for the graph engine tests: run `graph.build` through the real runner, and read what it wrote."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

CONTRACT_KEYS = {"run_dir", "status", "graph_json", "nodes", "params_total", "params_trainable", "flops", "modules",
                 "capture", "capture_reason"}

# A model neither torch.export mode can capture: which layer runs depends on the data.
BRANCHY = '''
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.a = nn.Linear(4 * 8 * 8, num_classes)
        self.b = nn.Linear(4 * 8 * 8, num_classes)

    def forward(self, x):
        h = self.conv(x).flatten(1)
        if h.sum() > 0:
            return self.a(h)
        return self.b(h)
'''


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


def stored_training_run(workspace: Path, seed: int = 7) -> str:
    """The id of a finished training run of the digits cnn as the store keeps one (its spec and a last.pt of seeded
    weights), without training: quantize and graph read nothing else of it."""
    import torch

    from workbench.runs import RunStore
    from workbench.specs import TrainSpec
    from workbench.worker.checkpoints import save_state_dict
    from workbench.worker.models import build_model

    spec = TrainSpec.from_dict({"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "epochs": 1})
    run = RunStore(workspace).create_run("train", spec.to_dict(), task="train.classifier")
    torch.manual_seed(seed)
    save_state_dict(build_model(spec.model, input_shape=(1, 8, 8)).state_dict(), run.checkpoints_dir / "last.pt")
    run.set_status("done")
    run.close()
    return run.id


def quantize(workspace: Path, spec: dict) -> dict:
    """quant.analyze through the real runner, kept small: 64 calibration and 64 held-out samples."""
    spec = {"calibration": {"samples": 64, "seed": 0}, "eval_samples": 64, **spec}
    return run_task(get_task("quant.analyze"), spec, emit=lambda *args: None, workspace=workspace)
