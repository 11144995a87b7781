"""The model an export job writes, from the one resolver (workbench/worker/source.py): a training run's model
with its checkpoint (`source.run`), or `model.*` with its own weights; its example inputs (the run's real
samples, typed and named as the model takes them) and the data its parity check takes real samples from.
Worker side.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from workbench.errors import JobError
from workbench.specs import DataSpec, ExportSpec, ModelSpec
from workbench.worker.inputs import Example


@dataclass
class ExportSource:
    model: nn.Module  # eval mode, on the CPU
    input_shape: tuple[int, ...]  # the first input's, per sample
    label: str
    dataset: DataSpec | None  # where real parity samples come from; None: random inputs only
    checkpoint: Path | None = None
    run_dir: Path | None = None
    inputs: Example | None = None  # the model's example inputs; single float tensors take the image path
    loaded: object = None  # the run's dataset, loaded once here and reused for parity's real samples

    @property
    def example(self):
        """The example's inputs when they are not one float tensor (token ids, several inputs): the export
        then names, types and checks each one; None for the image path."""
        return None if self.inputs is None or self.inputs.single else self.inputs

    def describe(self) -> dict:
        return {
            "run": str(self.run_dir) if self.run_dir else None,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "model": self.label,
        }


def _ignored_model_fields(spec: ExportSpec) -> list[str]:
    default = ModelSpec()
    return [
        f.name
        for f in dataclasses.fields(ModelSpec)
        if f.name not in ("input_shape", "input_spec")
        and getattr(spec.model, f.name) != getattr(default, f.name)
    ]


def resolve_source(spec: ExportSpec, ctx) -> ExportSource:
    """The model to export, built on the CPU in eval mode with its weights loaded."""
    from workbench.worker.source import resolve

    if spec.source.file:
        raise JobError(
            f"source.file: {spec.source.file} is already an exported model; export takes a PyTorch model "
            "(source.run=<training run> or model.*). To measure that file use `workbench bench --set "
            f"source.file={spec.source.file}`"
        )
    if spec.source.run:
        ignored = _ignored_model_fields(spec)
        if ignored:
            ctx.log(f"model.{', model.'.join(ignored)} ignored: source.run gives the model", "warning")
    source = resolve(
        spec.source,
        spec.model,
        spec.dataset,
        ctx,
        job=f"format={spec.format} exports a training run's model: name a training run (train.model) (for a "
        "quantize run's int8 model use format=onnx_qdq)",
    )
    model = source.build(ctx)
    example = source.example(ctx)
    if source.run_dir is not None:
        ctx.log(
            f"exporting {source.model.name} of run {source.run_dir.name} with "
            f"{source.checkpoint.relative_to(source.run_dir)}"
        )
    elif not spec.model.checkpoint and not spec.model.weights:
        ctx.log(
            f"{spec.model.name} has no weights to load (neither model.checkpoint nor model.weights is set): "
            "exporting freshly initialised weights",
            "warning",
        )
    ctx.log(f"example inputs: {example.describe()} ({example.origin})")
    return ExportSource(
        model,
        example.sample_shape,
        source.label,
        source.dataset,
        source.checkpoint,
        source.run_dir,
        example,
        source.loaded(ctx),
    )
