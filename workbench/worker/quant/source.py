"""Resolving where a job's model comes from (the shared `source` spec part): a training run's model spec, its
best-else-last checkpoint and its dataset, or a model spec with its own checkpoint file.

Written for any job that takes a SourceSpec (quantize now; graph, export and bench can call it too).
Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import JobError
from workbench.specs import DataSpec, ModelSpec, TrainSpec
from workbench.worker.sources import first_checkpoint, read_training_run

CHECKPOINTS = ("best.pt", "model.pt", "last.pt")  # best, else the final model, else the last epoch's state


@dataclass
class Source:
    model: ModelSpec  # with checkpoint set to the weights file to load
    dataset: DataSpec
    checkpoint: Path
    run_dir: Path | None = None
    # The run's training spec: its task and output count decide what quantize measures (pipeline.choose_objective),
    # and quantization-aware training starts from it.
    train: TrainSpec | None = None

    def describe(self) -> dict:
        return {"run": str(self.run_dir) if self.run_dir else None, "checkpoint": str(self.checkpoint),
                "model": self.model.name}


def merge_dataset(base: DataSpec, override: DataSpec) -> DataSpec:
    """`base` with every field that `override` sets to something other than its default."""
    default = DataSpec()
    changes = {f.name: getattr(override, f.name) for f in dataclasses.fields(DataSpec)
               if getattr(override, f.name) != getattr(default, f.name)}
    return DataSpec.from_dict({**base.to_dict(), **DataSpec.from_dict(changes).to_dict()}) if changes else base


def run_checkpoint(run_dir: Path) -> Path:
    checkpoint = first_checkpoint(run_dir, CHECKPOINTS)
    if checkpoint is None:
        raise JobError(f"source.run: {run_dir.name} has no checkpoint yet (none of {', '.join(CHECKPOINTS)} in "
                       f"{run_dir / 'checkpoints'}); let it train at least one epoch, or resume it")
    return checkpoint


def resolve(source_run: str, model: ModelSpec, dataset: DataSpec, workspace: Path) -> Source:
    """The model to load: from `source_run` when given, else `model` with its checkpoint."""
    if not source_run:
        if not model.checkpoint:
            raise JobError("nothing to quantize: set source.run=<run id> (a training run of this workspace), or "
                           "model.name and model.checkpoint=<weights file>")
        path = Path(model.checkpoint).expanduser()
        if not path.is_file():
            raise JobError(f"model.checkpoint: {path} does not exist")
        return Source(model, dataset, path)
    run_dir, trained = read_training_run(source_run, workspace,
                                         refusal="quantize takes a training run (train.classifier)")
    checkpoint = run_checkpoint(run_dir)
    # The run's checkpoint holds every weight: no pretrained download, no starting checkpoint, no freezing.
    spec = dataclasses.replace(trained.model, checkpoint=str(checkpoint), weights="", freeze=[])
    return Source(spec, merge_dataset(trained.dataset, dataset), checkpoint, run_dir, trained)
