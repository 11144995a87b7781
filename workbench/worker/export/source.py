"""The model an export job writes: a training run's model with its best (else final, else last) checkpoint
(`source.run`), or `model.*` with its own weights; its per-sample input shape; and the data its parity check takes
real samples from. Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from workbench.errors import JobError
from workbench.specs import DataSpec, ExportSpec, ModelSpec


@dataclass
class ExportSource:
    model: nn.Module  # eval mode, on the CPU
    input_shape: tuple[int, ...]
    label: str
    dataset: DataSpec | None  # where real parity samples come from; None: random inputs only
    checkpoint: Path | None = None
    run_dir: Path | None = None
    example: object = None  # the run's first input when it is a tuple or dict of tensors (several inputs)
    loaded: object = None  # the run's user Dataset, loaded once here and reused for parity's real samples

    def describe(self) -> dict:
        return {"run": str(self.run_dir) if self.run_dir else None,
                "checkpoint": str(self.checkpoint) if self.checkpoint else None, "model": self.label}


def _ignored_model_fields(spec: ExportSpec) -> list[str]:
    default = ModelSpec()
    return [f.name for f in dataclasses.fields(ModelSpec)
            if f.name != "input_shape" and getattr(spec.model, f.name) != getattr(default, f.name)]


def dataset_shape(data: DataSpec, ctx, *, why: str) -> tuple[int, ...]:
    from workbench.worker.data import load_dataset

    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError as exc:
        raise JobError(f"model.input_shape is empty, and {why} comes from dataset {data.name}, which cannot be read "
                       f"({exc}); set model.input_shape, e.g. 3,224,224") from None
    return tuple(dataset.sample_shape)


def resolve_source(spec: ExportSpec, ctx) -> ExportSource:
    """The model to export, built on the CPU in eval mode with its weights loaded."""
    from workbench.worker.models import build_model, load_checkpoint
    from workbench.worker.quant.source import merge_dataset, run_checkpoint
    from workbench.worker.sources import dataset_class_count, read_training_run

    if spec.source.file:
        raise JobError(f"source.file: {spec.source.file} is already an exported model; export takes a PyTorch model "
                       "(source.run=<training run> or model.*). To measure that file use `workbench bench --set "
                       f"source.file={spec.source.file}`")
    if spec.source.run:
        run_dir, trained = read_training_run(
            spec.source.run, ctx.workspace,
            refusal=f"format={spec.format} exports a training run's model: name a train.classifier run (for a "
                    "quantize run's int8 model use format=onnx_qdq)")
        ignored = _ignored_model_fields(spec)
        if ignored:
            ctx.log(f"model.{', model.'.join(ignored)} ignored: source.run gives the model", "warning")
        checkpoint = run_checkpoint(run_dir)
        dataset = merge_dataset(trained.dataset, spec.dataset)
        from workbench.worker.export import multi

        loaded = multi.user_dataset(dataset, ctx)
        example = multi.several_inputs(loaded)
        shape = tuple(spec.model.input_shape or trained.model.input_shape) or (
            tuple(loaded.sample_shape) if loaded is not None
            else dataset_shape(dataset, ctx, why=f"the input shape of run {run_dir.name}"))
        # The run's checkpoint holds every weight: no pretrained download, no starting checkpoint, no freezing.
        model_spec = dataclasses.replace(trained.model, checkpoint="", weights="", freeze=[])
        # The run's task decides which outputs are right (a segmentation model gives a map, a custom one anything).
        model = build_model(model_spec, input_shape=shape, log=ctx.log, pretrained=False, checkpoint=False,
                            task=trained.task, example=example)
        load_checkpoint(model, checkpoint, what="source.run")
        ctx.log(f"exporting {model_spec.name} of run {run_dir.name} with {checkpoint.relative_to(run_dir)}")
        return ExportSource(model.eval(), shape, f"{model_spec.name} (run {run_dir.name})", dataset, checkpoint,
                            run_dir, example, loaded)
    # model.*: its own weights (checkpoint or pretrained), else freshly initialised ones.
    custom_data = spec.dataset != DataSpec()
    shape = tuple(spec.model.input_shape) or dataset_shape(spec.dataset, ctx, why="the input shape")
    classes = None if spec.model.num_classes else dataset_class_count(spec.dataset, ctx)
    model = build_model(spec.model, input_shape=shape, log=ctx.log, classes=classes)
    if not spec.model.checkpoint and not spec.model.weights:
        ctx.log(f"{spec.model.name} has no weights to load (neither model.checkpoint nor model.weights is set): "
                "exporting freshly initialised weights", "warning")
    # Real samples only from data the user named (or took the shape from): the default digits would not fit
    # a model given its own input shape.
    dataset = spec.dataset if custom_data or not spec.model.input_shape else None
    checkpoint = Path(spec.model.checkpoint).expanduser() if spec.model.checkpoint else None
    return ExportSource(model.eval(), shape, spec.model.name, dataset, checkpoint)
