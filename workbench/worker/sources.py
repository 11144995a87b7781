"""`source.run` read once for every job that takes a training run's model (graph, quantize, export, bench): the run's
folder and its TrainSpec, with messages that name source.run and say what is wrong; and the one rule for sizing a
`model.*` network's head without a run."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import JobError, SpecError, WorkbenchError
from workbench.runs import RunStore
from workbench.specs import TrainSpec


def read_training_run(ref: str, workspace: str | Path | None, *, refusal: str) -> tuple[Path, TrainSpec]:
    """The folder and spec of the training run `ref` names (id, id prefix or folder). `refusal` ends the message
    for a run of another kind: what this job needs instead."""
    from workbench.workspace import default_workspace

    store = RunStore(workspace if workspace is not None else default_workspace())
    try:
        with store.open_run(ref) as run:  # read-only: a job reading its source never writes to it
            task, run_dir, data = run.task, run.dir, run.read_spec()
    except WorkbenchError as exc:
        raise JobError(f"source.run: {exc}") from None
    if not task.startswith("train."):
        raise JobError(f"source.run: {run_dir.name} is a {task or 'unknown'} run; {refusal}")
    try:
        return run_dir, TrainSpec.from_dict(data)
    except SpecError as exc:
        raise JobError(f"source.run: the spec of {run_dir.name} no longer reads as a training spec ({exc})") from None


def first_checkpoint(run_dir: Path, order: tuple[str, ...]) -> Path | None:
    """The first of `order` that the run's checkpoints/ folder holds, or None."""
    folder = run_dir / "checkpoints"
    return next((folder / name for name in order if (folder / name).is_file()), None)


def dataset_class_count(data, ctx) -> int | None:
    """The dataset's class count for model.num_classes = 0 (auto), the same in every verb that builds a `model.*`
    network; None when the data cannot be read (the model is then built with the default head, and says so)."""
    from workbench.worker.data import load_dataset

    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError:
        return None
    try:
        return len(dataset.classes)
    finally:
        dataset.release()
