"""Where a detection job's detector comes from: a detection training run (its spec says task = "detection"),
the detector rebuilt from that spec with the checkpoint its later jobs load, and the run's data. Quantize,
export, bench and Try it take a detector here, as every other model comes through source.py. Worker side;
never imports Qt."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.errors import WorkbenchError
from workbench.runs import RunStore
from workbench.specs import TrainSpec
from workbench.task_ids import is_training
from workbench.worker.checkpoints import load_state_dict


@dataclass
class DetectionSource:
    run_dir: Path
    trained: TrainSpec
    model: torch.nn.Module  # in eval mode, on the job's device, with the run's checkpoint
    dataset: object
    checkpoint: Path


def detection_run(ref: str, workspace) -> tuple[Path, TrainSpec] | None:
    """(folder, spec) of training run `ref` when it trained a detector; None for any other run, or for a ref
    that names none (the job's usual source resolution then says what it is)."""
    from workbench.worker.source import read_training_run
    from workbench.workspace import default_workspace

    if not ref:
        return None
    try:
        with RunStore(workspace if workspace is not None else default_workspace()).open_run(ref) as run:
            task, data = run.task, run.read_spec()
    except WorkbenchError:
        return None
    if not is_training(task) or data.get("task") != "detection":
        return None
    return read_training_run(ref, workspace, refusal="")  # its user code checked as for every later job


def build_detection_model(spec: TrainSpec, dataset, log) -> torch.nn.Module:
    """The detector the spec names, with K + 1 classes (the background counted) when num_classes is auto;
    its checkpoint loaded when it names one."""
    from workbench.worker.models.registry import get_model

    model = get_model(
        spec.model.name,
        num_classes=spec.model.num_classes or len(dataset.classes) + 1,
        input_shape=tuple(dataset.sample_shape),
        weights=spec.model.weights,
        log=log,
        args=spec.model.args,
    )
    if spec.model.checkpoint:
        model.load_state_dict(load_state_dict(spec.model.checkpoint))
    return model


def load_detection_run(run_dir: Path, trained: TrainSpec, ctx, device="cpu") -> DetectionSource:
    """The run's data and its detector with the checkpoint later jobs load (best.pt, else model.pt), in eval
    mode on `device`."""
    from workbench.worker.data.loader import load_dataset
    from workbench.worker.source import run_checkpoint

    dataset = load_dataset(trained.dataset, ctx=ctx)
    model = build_detection_model(trained, dataset, ctx.log)
    checkpoint = run_checkpoint(run_dir)
    model.load_state_dict(load_state_dict(checkpoint))
    return DetectionSource(run_dir, trained, model.eval().to(device), dataset, checkpoint)
