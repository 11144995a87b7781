"""One rule sizes a `model.*` network's head in every verb (issue #19, 5.13): model.num_classes = 0 takes the
dataset's class count in graph, quantize, export and bench alike, so a 5-class checkpoint loads everywhere."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from workbench.specs import ModelSpec
from workbench.worker.models import build_model
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task


def _spec(checkpoint: Path, **extra) -> dict:
    spec: dict = {
        "model": {"name": "cnn", "checkpoint": str(checkpoint)},
        "dataset": {"name": "fake", "num_classes": 5, "size": 40, "image_size": [8]},
    }
    for key, value in extra.items():
        spec[key] = value
    return spec


@pytest.fixture
def five_class_checkpoint(tmp_path: Path) -> Path:
    model = build_model(ModelSpec(name="cnn", num_classes=5), input_shape=(3, 8, 8))
    path = tmp_path / "five.pt"
    torch.save(model.state_dict(), path)
    return path


def _run(task: str, spec: dict, workspace: Path) -> tuple[dict, list[str]]:
    logs: list[str] = []
    result = run_task(
        get_task(task),
        spec,
        workspace=workspace,
        emit=lambda kind, content, buffers: logs.append(content.get("text", "")) if kind == "log" else None,
    )
    return result, logs


@pytest.mark.parametrize(
    "task, extra",
    [
        ("export.model", {"format": "torchscript"}),
        (
            "bench.latency",
            {"backends": ["eager"], "batch_sizes": [1], "iters": 2, "warmup": 1, "min_time_s": 0},
        ),
        ("graph.build", {}),
    ],
)
def test_model_num_classes_auto_counts_the_dataset_in_every_verb(
    tmp_path, five_class_checkpoint, task, extra
):
    result, logs = _run(task, _spec(five_class_checkpoint, **extra), tmp_path / "ws")
    assert result["status"] == "done", result.get("error")
    assert any("model.num_classes: auto, 5 (the dataset's classes)" in line for line in logs), logs
