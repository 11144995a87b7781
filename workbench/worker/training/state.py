"""The training state a run's checkpoints/last.pt holds, and writing/reading it (atomically, weights_only).

last.pt: model, optimizer, scheduler, scaler, RNG states, epoch, global step, best metric, early-stop counter.
Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import CheckpointError, JobError
from workbench.worker.checkpoints import load_state_dict, save_state_dict
from workbench.worker.training.reproducibility import rng_state

FORMAT = 1
LAST, BEST, FINAL = "last.pt", "best.pt", "model.pt"


@dataclass
class TrainState:
    epoch: int = 0  # epochs completed
    global_step: int = 0  # optimiser steps taken
    step_in_epoch: int = 0  # optimiser steps into the unfinished epoch (non-zero only after a cancel)
    # best validation monitor value (classification: accuracy); unset while best_epoch is 0
    best_metric: float = -1.0
    best_epoch: int = 0
    bad_epochs: int = 0  # epochs since the validation accuracy last improved (early stopping)
    last_epoch_metrics: dict = field(default_factory=dict)  # epoch/train_loss etc. of the last finished epoch
    # [loss sum, task statistics..., samples] of an unfinished epoch
    partial_epoch_sums: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> TrainState:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def last_checkpoint(*, model, optimizer, optimizer_name: str, scheduler, scaler, state: TrainState) -> dict:
    """What last.pt holds (live tensors: copy them before the next step changes them)."""
    return {
        "format": FORMAT,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "optimizer_name": optimizer_name,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "rng": rng_state(),
        "state": state.to_dict(),
    }


def save_last(path: Path, **parts) -> None:
    """Write last.pt now (the loop uses a CheckpointWriter instead, which does not wait for the disk)."""
    save_state_dict(last_checkpoint(**parts), path)


def load_last(path: Path) -> dict:
    """Read a last.pt for resuming; a missing or foreign file is a JobError that says what to do."""
    if not path.exists():
        raise JobError(
            f"cannot resume: {path} does not exist (the run never finished an epoch or a checkpoint); "
            "start a new run instead"
        )
    try:
        data = load_state_dict(path)
    except CheckpointError as exc:
        raise JobError(f"cannot resume: {exc}") from None
    if data.get("format") != FORMAT or not isinstance(data.get("model"), dict) or "state" not in data:
        raise JobError(f"cannot resume: {path} is not a workbench training checkpoint (format {FORMAT})")
    return data
