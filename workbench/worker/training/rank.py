"""Building one DDP rank's Trainer from the spec its parent task sent: the same data, seed and model.

Its own module so that session.py (which launches ranks through distributed.py) and distributed.py (whose rank
entrypoint builds the Trainer) import it, and not each other. Worker side; never imports Qt.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.specs import TrainSpec
from workbench.worker.data import load_dataset
from workbench.worker.models import build_model
from workbench.worker.objectives.of_run import first_input
from workbench.worker.training.loop import Reporter, Trainer, TrainSetup
from workbench.worker.training.reproducibility import seed_everything
from workbench.worker.training.state import LAST, load_last


def build_for_rank(
    spec: TrainSpec,
    *,
    device: torch.device,
    workspace: str,
    checkpoints_dir: str,
    artifacts_dir: str,
    resuming: bool,
    report: Reporter,
    rank: int,
    world: int,
    stop_check,
) -> Trainer:
    """A DDP rank's Trainer: the same data, seed and model as the parent task built."""
    dataset = load_dataset(spec.dataset, workspace=workspace or None)
    resume = load_last(Path(checkpoints_dir) / LAST) if resuming else None
    seed_everything(spec.seed)
    model = build_model(
        spec.model,
        input_shape=dataset.sample_shape,
        pretrained=resume is None,
        checkpoint=resume is None,
        task=spec.task,
        example=first_input(dataset),
    )
    return Trainer(
        TrainSetup(
            spec=spec,
            dataset=dataset,
            model=model,
            device=device,
            checkpoints_dir=Path(checkpoints_dir),
            artifacts_dir=Path(artifacts_dir),
            report=report,
            rank=rank,
            world=world,
            resume=resume,
            stop_check=stop_check,
            workspace=Path(workspace) if workspace else None,
        )
    )
