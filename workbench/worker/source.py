"""The one source resolver: where a job's model comes from (`source.run`, a training run: its model spec, its
checkpoint and its dataset; or `model.*` with its own weights), the model built with those weights, and its
example inputs taken from the run's real samples (inputs.py). Graph, quantize, export, bench, predict and the
TensorBoard graph all resolve their model here. Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import JobError, SpecError, WorkbenchError
from workbench.runs import RunStore
from workbench.specs import DataSpec, ModelSpec, SourceSpec, TrainSpec
from workbench.trust import check_run_code
from workbench.worker import inputs
from workbench.worker.inputs import Example

# Best, else the final model, else the last epoch's state: the checkpoint every later job of a run loads.
CHECKPOINTS = ("best.pt", "model.pt", "last.pt")
EXAMPLE_SAMPLES = 2  # real samples an example batch holds: a batch of two shows a batch dimension to a tracer


def read_training_run(ref: str, workspace: str | Path | None, *, refusal: str) -> tuple[Path, TrainSpec]:
    """The folder and spec of the training run `ref` names (id, id prefix or folder). `refusal` ends the
    message for a run of another kind: what this job needs instead."""
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
        spec = TrainSpec.from_dict(data)
    except SpecError as exc:
        raise JobError(
            f"source.run: the spec of {run_dir.name} no longer reads as a training spec ({exc})"
        ) from None
    check_run_code(run_dir, data)  # every later job of a run comes here before it imports the run's code
    return run_dir, spec


def first_checkpoint(run_dir: Path, order: tuple[str, ...] = CHECKPOINTS) -> Path | None:
    """The first of `order` that the run's checkpoints/ folder holds, or None."""
    folder = run_dir / "checkpoints"
    return next((folder / name for name in order if (folder / name).is_file()), None)


def run_checkpoint(run_dir: Path, order: tuple[str, ...] = CHECKPOINTS) -> Path:
    """The checkpoint a job of the run loads; a JobError when the run has none yet."""
    checkpoint = first_checkpoint(run_dir, order)
    if checkpoint is None:
        raise JobError(
            f"source.run: {run_dir.name} has no checkpoint yet (none of {', '.join(order)} in "
            f"{run_dir / 'checkpoints'}); let it train at least one epoch, or resume it"
        )
    return checkpoint


def merge_dataset(base: DataSpec, override: DataSpec) -> DataSpec:
    """`base` with every field that `override` sets to something other than its default."""
    default = DataSpec()
    changes = {
        f.name: getattr(override, f.name)
        for f in dataclasses.fields(DataSpec)
        if getattr(override, f.name) != getattr(default, f.name)
    }
    return (
        DataSpec.from_dict({**base.to_dict(), **DataSpec.from_dict(changes).to_dict()}) if changes else base
    )


def dataset_class_count(data, ctx) -> int | None:
    """The dataset's class count for model.num_classes = 0 (auto), the same in every verb that builds a
    `model.*` network; None when the data cannot be read (the model is then built with the default head, and
    says so)."""
    from workbench.worker.data import load_dataset

    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError:
        return None
    try:
        return len(dataset.classes)
    finally:
        dataset.release()


@dataclass
class Source:
    """A job's model, resolved: what to build, which weights, which data its inputs come from."""

    # to build without pretrained weights or a starting checkpoint where a run gives the weights
    model: ModelSpec
    # where example inputs and real samples come from; None: no data (input spec/shape)
    dataset: DataSpec | None
    checkpoint: Path | None
    label: str
    run_dir: Path | None = None
    train: TrainSpec | None = None  # the run's training spec: its task decides which outputs are right
    task: str = "classification"
    shape_override: tuple[int, ...] = ()  # model.input_shape the job was given (a single float input)
    pretrained: bool = True  # model.*: its own weights/checkpoint; a run's checkpoint replaces them
    _loaded: object = field(default=None, repr=False)
    _load_error: str = field(default="", repr=False)
    _example: Example | None = field(default=None, repr=False)

    def describe(self, *, label: bool = True) -> dict:
        """{run, checkpoint, model}: the model by its label ("cnn (run …)"), or by its name alone."""
        return {
            "run": str(self.run_dir) if self.run_dir else None,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "model": self.label if label else self.model.name,
        }

    def with_weights(self) -> ModelSpec:
        """The model spec whose checkpoint is the weights this source loads (what a quantize run saves)."""
        return (
            dataclasses.replace(self.model, checkpoint=str(self.checkpoint))
            if self.checkpoint
            else self.model
        )

    # -- the data --------------------------------------------------------------------------------------------
    def loaded(self, ctx):
        """The dataset, loaded once and kept for every step of the job; None when there is none or it cannot
        be read (`load_error` says why)."""
        if self._loaded is None and self.dataset is not None and not self._load_error:
            from workbench.worker.data import load_dataset

            try:
                self._loaded = load_dataset(self.dataset, ctx=ctx)
            except JobError as exc:
                self._load_error = str(exc)
        return self._loaded

    @property
    def load_error(self) -> str:
        return self._load_error

    def release(self) -> None:
        if self._loaded is not None and hasattr(self._loaded, "release"):
            self._loaded.release()

    def example(self, ctx) -> Example:
        """The model's example inputs: model.input_spec where set, else the dataset's first samples (each
        input's dtype, shape, structure and name kept), else random floats of model.input_shape."""
        if self._example is None:
            self._example = self._find_example(ctx)
        return self._example

    def _find_example(self, ctx) -> Example:
        if self.model.input_spec:
            return inputs.from_input_spec(self.model.input_spec, EXAMPLE_SAMPLES)
        shape = self.shape_override or tuple(self.model.input_shape)
        if shape and not _user_code(self.dataset):
            # A built-in image set with the model's own input size: random images of that size, as the model
            # declares them (the data's may be smaller), without decoding the set.
            return inputs.from_shape(shape, EXAMPLE_SAMPLES)
        loaded = self.loaded(ctx)
        if loaded is not None:
            example = inputs.from_dataset(loaded, count=EXAMPLE_SAMPLES)
            if shape and example.single and example.sample_shape != shape:
                return inputs.from_shape(shape, EXAMPLE_SAMPLES)  # measured at another size
            return example
        if shape:
            return inputs.from_shape(shape, EXAMPLE_SAMPLES)
        why = f" ({self._load_error})" if self._load_error else ""
        raise JobError(
            f"no example inputs for {self.label}: the dataset cannot be read{why}; set model.input_spec "
            '(e.g. {ids = {shape = [1, 48], dtype = "int64", low = 0, high = 200}}) or model.input_shape '
            "(e.g. 3,224,224)"
        )

    # -- the model -------------------------------------------------------------------------------------------
    def build(self, ctx, *, check: bool = True):
        """The model on the CPU in eval mode with its weights loaded; `check=False` skips the trial forward
        pass (a caller that runs the model at once and words its own failure)."""
        from workbench.worker.models import build_model
        from workbench.worker.models.surgery import load_checkpoint

        example = self.example(ctx)
        classes = None
        if self.run_dir is None and not self.model.num_classes and self.dataset is not None:
            loaded = self.loaded(ctx)
            classes = len(loaded.classes) if loaded is not None and hasattr(loaded, "classes") else None
        model = build_model(
            self.model,
            input_shape=example.sample_shape,
            log=ctx.log,
            classes=classes,
            pretrained=self.pretrained,
            checkpoint=self.pretrained,
            task=self.task,
            example=example.sample(0),
            check=check,
        )
        # the run's weights, in place of the spec's own
        if not self.pretrained and self.checkpoint is not None:
            load_checkpoint(model, self.checkpoint, what="source.run")
        return model.eval()


def _user_code(dataset: DataSpec | None) -> bool:
    """A dataset of the user's own code (file:, lightning:), whose samples alone say what the model takes."""
    from workbench.worker.data.registry import is_user_dataset

    return dataset is not None and is_user_dataset(dataset.name)


def resolve(
    source: SourceSpec,
    model: ModelSpec,
    dataset: DataSpec,
    ctx,
    *,
    job: str,
    need_checkpoint: bool = True,
    order: tuple[str, ...] = CHECKPOINTS,
) -> Source:
    """The model a job names: `source.run` (a training run) when given, else `model.*`. `job` words the
    refusal of a run of another kind ("quantize takes a training run"); `need_checkpoint=False` lets a run
    that has not written one yet be shown with fresh weights (graph, bench), saying so."""
    override = tuple(model.input_shape)
    if source.run:
        run_dir, trained = read_training_run(source.run, ctx.workspace, refusal=job)
        checkpoint = run_checkpoint(run_dir, order) if need_checkpoint else first_checkpoint(run_dir, order)
        if checkpoint is None:
            ctx.log(
                f"run {run_dir.name} has no checkpoint yet: its model is used with fresh weights", "warning"
            )
        # The run's checkpoint holds every weight: no pretrained download, no starting checkpoint, no
        # freezing; a job's own model.input_spec (the model's inputs described) still applies.
        spec = dataclasses.replace(
            trained.model,
            checkpoint="",
            weights="",
            freeze=[],
            input_spec=model.input_spec or trained.model.input_spec,
        )
        return Source(
            spec,
            merge_dataset(trained.dataset, dataset),
            checkpoint,
            f"{spec.name} (run {run_dir.name})",
            run_dir,
            trained,
            trained.task,
            override if override != tuple(trained.model.input_shape) else (),
            pretrained=False,
        )
    # model.*: its own weights (checkpoint or pretrained), else freshly initialised ones. Real samples only
    # from data the user named (or that the input shape would come from): the default digits would not fit a
    # model given its own input shape or input spec.
    named_data = dataset != DataSpec()
    data = dataset if named_data or not (model.input_shape or model.input_spec) else None
    checkpoint = Path(model.checkpoint).expanduser() if model.checkpoint else None
    return Source(model, data, checkpoint, model.name, shape_override=override)


def trained_source(
    source: SourceSpec, model: ModelSpec, dataset: DataSpec, ctx, *, job: str, nothing: str
) -> Source:
    """The source of a job that needs trained weights (quantize): a training run's checkpoint, or model.* with
    model.checkpoint naming an existing file; `nothing` is the message when neither is given."""
    if not source.run:
        if not model.checkpoint:
            raise JobError(nothing)
        path = Path(model.checkpoint).expanduser()
        if not path.is_file():
            raise JobError(f"model.checkpoint: {path} does not exist")
    return resolve(source, model, dataset, ctx, job=job)
