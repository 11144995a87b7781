"""What a benchmark measures, resolved once from a BenchSpec: the PyTorch model (from a training run, from a
quantize run's own source, or from model.*), an exported file (source.file or artifact) and, for
onnxruntime_int8, the quantize run whose scales give the QDQ model. Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import JobError, SpecError, WorkbenchError
from workbench.runs import RunStore, effective_status
from workbench.specs import MAX_SAMPLE_VALUES, BenchSpec, DataSpec, ModelSpec, QuantSpec, TrainSpec
from workbench.task_ids import QUANT_TASK
from workbench.worker.inputs import Example, Positional, named_for, values_in
from workbench.worker.source import Source
from workbench.worker.source import resolve as resolve_model

FILE_KINDS = {
    ".onnx": "onnx",
    ".pt2": "exported_program",
    ".pt": "torchscript",
    ".pth": "torchscript",
    ".ts": "torchscript",
    ".jit": "torchscript",
}
CHECKPOINTS = ("best.pt", "model.pt", "last.pt")  # as quantize reads a run: best, else final, else last epoch


@dataclass
class QuantRunInfo:
    """A quantize run as a source of the QDQ model: its folder, and why it cannot give one ("" when it
    can)."""

    dir: Path
    id: str
    problem: str = ""


@dataclass
class BenchSource:
    model: object | None  # torch.nn.Module in eval mode on the CPU in float32, or None (a file alone)
    input_shape: tuple[int, ...] | None  # one sample, no batch dimension
    label: str
    file: Path | None = None  # source.file or artifact
    file_kind: str | None = None  # onnx, exported_program or torchscript
    quant_run: QuantRunInfo | None = None
    notes: list[str] = field(default_factory=list)
    # The example inputs of a model whose inputs are not one float tensor (token ids, several inputs): each
    # row feeds them batched, real samples repeated, and `model` takes them positionally in `example.names`
    # order. None for a model with one float input (random values of input_shape).
    example: Example | None = None

    @property
    def input_names(self) -> list[str] | None:
        return list(self.example.names) if self.example is not None else None

    def describe(self) -> dict:
        described = {
            "model": self.label,
            "file": str(self.file) if self.file else None,
            "file_kind": self.file_kind,
            "quant_run": str(self.quant_run.dir) if self.quant_run else None,
            "input_shape": list(self.input_shape) if self.input_shape else None,
        }
        return {**described, **self.named_inputs()}

    def named_inputs(self) -> dict:
        """{input_names, input_shapes, input_dtypes, inputs_from} of a model whose inputs are named and typed
        (as export reports them); {} for one float input."""
        return self.example.summary() if self.example is not None else {}

    def shapes_text(self) -> str:
        if self.example is None:
            return "x".join(map(str, self.input_shape))
        return self.example.describe()


def check_file(path_text: str, field_name: str) -> tuple[Path, str]:
    path = Path(path_text).expanduser()
    kind = FILE_KINDS.get(path.suffix.lower())
    if kind is None:
        raise JobError(
            f"{field_name}: {path} is not an ONNX file (.onnx), a saved ExportedProgram (.pt2) or a "
            "TorchScript archive (.pt)"
        )
    if not path.is_file():
        raise JobError(f"{field_name}: {path} does not exist")
    return path.absolute(), kind


def _open_run(ref: str, workspace) -> tuple[str, Path, dict, str, str]:
    """(task, folder, spec data, effective status, message) of the run `ref` names, read-only."""
    from workbench.workspace import default_workspace

    store = RunStore(workspace if workspace is not None else default_workspace())
    try:
        with store.open_run(ref) as run:  # read-only: measuring a run's model never writes to it
            status, message = effective_status(run.dir, run.status, run.message, run.task)
            return run.task, run.dir, run.read_spec(), status, message
    except WorkbenchError as exc:
        raise JobError(f"source.run: {exc}") from None


def _training_model(run_dir: Path, trained: TrainSpec, ctx) -> tuple[ModelSpec, DataSpec, Path | None]:
    from workbench.worker.source import first_checkpoint

    checkpoint = first_checkpoint(run_dir, CHECKPOINTS)
    if checkpoint is None:
        # Latency does not depend on the weights' values: measure the architecture, and say so.
        ctx.log(
            f"run {run_dir.name} has no checkpoint yet: measuring its model with fresh weights", "warning"
        )
    return trained.model, trained.dataset, checkpoint


def _from_quant_run(run_dir: Path, data: dict, status: str, message: str, workspace, ctx):
    """(model spec, dataset, checkpoint, label, QuantRunInfo) of a quantize run: the FP32 model it
    quantized."""
    try:
        quant = QuantSpec.from_dict(data)
    except SpecError as exc:
        raise JobError(
            f"source.run: the spec of {run_dir.name} no longer reads as a quantize spec ({exc})"
        ) from None
    problem = ""
    if status != "done":
        said = f": {message}" if message else ""
        problem = (
            f"quantize run {run_dir.name} has not finished ({status}{said}); its scales are saved when it "
            "is done"
        )
    info = QuantRunInfo(run_dir, run_dir.name, problem)
    if quant.source.run:
        # Its id (or folder) in the quantize run's own workspace, wherever that workspace is now.
        sibling = run_dir.parent / Path(quant.source.run).name
        ref = str(sibling) if sibling.is_dir() else quant.source.run
        task, train_dir, train_data, _, _ = _open_run(ref, workspace)
        if not task.startswith("train."):
            raise JobError(
                f"source.run: quantize run {run_dir.name} names {train_dir.name}, a {task} run, as its "
                "model; it should be a training run"
            )
        trained = TrainSpec.from_dict(train_data)
        model, dataset, checkpoint = _training_model(train_dir, trained, ctx)
        from workbench.worker.source import merge_dataset

        return (
            model,
            merge_dataset(dataset, quant.dataset),
            checkpoint,
            f"{model.name} (run {train_dir.name}, quantized in {run_dir.name})",
            info,
        )
    checkpoint = Path(quant.model.checkpoint).expanduser() if quant.model.checkpoint else None
    if checkpoint is not None and not checkpoint.is_file():
        raise JobError(
            f"source.run: quantize run {run_dir.name} quantized {checkpoint}, which no longer exists"
        )
    return (
        dataclasses.replace(quant.model, checkpoint=""),
        quant.dataset,
        checkpoint,
        f"{quant.model.name} (quantized in {run_dir.name})",
        info,
    )


def _onnx_inputs(path: Path) -> list:
    """The graph inputs an ONNX file is fed (its initializers left out)."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: a damaged or foreign file
        first = (str(exc).splitlines() or [""])[0][:200]
        raise JobError(
            f"source.file: {path} cannot be read as ONNX ({type(exc).__name__}: {first})"
        ) from None
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def _onnx_sample_shape(value_info) -> tuple[int, ...] | None:
    dims = value_info.type.tensor_type.shape.dim
    shape = tuple(d.dim_value if d.HasField("dim_value") else 0 for d in dims)[1:]
    return shape if all(d > 0 for d in shape) else None


def _onnx_example(path: Path, inputs: list) -> Example:
    """Inputs typed as an ONNX file with several (or integer) inputs declares them: a float input fed random
    values, an integer one zeros (a valid index in any embedding)."""
    import numpy as np
    import onnx
    import torch

    tensors = []
    for value_info in inputs:
        shape = _onnx_sample_shape(value_info)
        if shape is None:
            raise JobError(
                f"source.file: {path.name}'s input {value_info.name} has no fixed shape past the batch "
                "dimension; bench the training run it came from (source.run, with the file as artifact)"
            )
        np_type = onnx.helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)
        tensors.append(torch.from_numpy(np.zeros((1, *shape), dtype=np_type)))
    ranges = [None if t.is_floating_point() else (0, 0) for t in tensors]
    return Example(
        tensors,
        [i.name for i in inputs],
        "tuple",
        f"inputs declared by {path.name}",
        real=False,
        ranges=ranges,
    )


def _onnx_is_float(value_info) -> bool:
    import onnx

    return value_info.type.tensor_type.elem_type in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.BFLOAT16,
    )


def _file_input_shape(path: Path, kind: str, onnx_inputs: list | None = None) -> tuple[int, ...] | None:
    """The per-sample input shape a file records, when it records a fixed one (`onnx_inputs`: the ONNX file's
    inputs, when already read)."""
    if kind == "onnx":
        inputs = onnx_inputs if onnx_inputs is not None else _onnx_inputs(path)
        if len(inputs) != 1:
            return None
        return _onnx_sample_shape(inputs[0]) or None  # () too: a per-sample scalar is no shape to feed
    if kind == "exported_program":
        from workbench.worker.graph.sources import load_exported_program

        program = load_exported_program(path)
        for node in program.graph.nodes:
            spec = next(
                (
                    s
                    for s in program.graph_signature.input_specs
                    if s.kind.name == "USER_INPUT" and getattr(s.arg, "name", None) == node.name
                ),
                None,
            )
            if node.op == "placeholder" and spec is not None and "val" in node.meta:
                dims = tuple(node.meta["val"].shape)[1:]
                if all(isinstance(d, int) for d in dims):
                    return tuple(int(d) for d in dims)
                return None
    return None


def _dataset_shape(dataset: DataSpec, ctx) -> tuple[int, ...]:
    from workbench.worker.data import load_dataset

    try:
        loaded = load_dataset(dataset, ctx=ctx)
    except JobError as exc:
        raise JobError(
            f"model.input_shape is empty and the dataset it would come from cannot be read ({exc}); "
            "set model.input_shape, e.g. 3,224,224"
        ) from None
    try:
        return tuple(loaded.sample_shape)
    finally:
        loaded.release()


def _check_shape(shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    if math.prod(shape) > MAX_SAMPLE_VALUES:
        raise JobError(
            f"{where}: an input of {'x'.join(map(str, shape))} is {math.prod(shape):,} values per sample; "
            f"at most {MAX_SAMPLE_VALUES:,} are measured"
        )
    return shape


def resolve(spec: BenchSpec, ctx) -> BenchSource:
    """The model, input shape, file and quantize run a BenchSpec names; a JobError naming the field
    otherwise."""
    file, kind = None, None
    if spec.source.file or spec.artifact:
        name = "source.file" if spec.source.file else "artifact"
        file, kind = check_file(spec.source.file or spec.artifact, name)
    override = tuple(spec.model.input_shape)

    if spec.source.file:  # a file alone: no PyTorch model to measure beside it
        inputs = _onnx_inputs(file) if kind == "onnx" else None
        if inputs is not None and (len(inputs) > 1 or (inputs and not _onnx_is_float(inputs[0]))):
            example = _onnx_example(file, inputs)
            _check_shape((values_in(example),), "source.file")
            return BenchSource(None, example.sample_shape, file.name, file, kind, example=example)
        shape = override or _file_input_shape(file, kind, inputs)
        if not shape:
            raise JobError(
                f"model.input_shape: {file.name} does not record a fixed input shape; set "
                "model.input_shape (one sample, e.g. 3,224,224)"
            )
        return BenchSource(None, _check_shape(shape, "model.input_shape"), file.name, file, kind)

    quant_info = None
    if spec.source.run:
        task, run_dir, data, status, message = _open_run(spec.source.run, ctx.workspace)
        if task.startswith("train."):
            source = resolve_model(
                spec.source,
                spec.model,
                spec.dataset,
                ctx,
                need_checkpoint=False,
                job="bench takes a training run (its model and checkpoint) or a quantize run (also its "
                "QDQ model)",
            )
        elif task == QUANT_TASK:
            model_spec, dataset, checkpoint, label, quant_info = _from_quant_run(
                run_dir, data, status, message, ctx.workspace, ctx
            )
            # A quantize run's model was checked when its training run trained it, so any output passes
            # ("custom").
            source = Source(
                dataclasses.replace(model_spec, checkpoint="", weights="", freeze=[]),
                dataset,
                checkpoint,
                label,
                task="custom",
                shape_override=override,
                pretrained=False,
            )
        else:
            raise JobError(
                f"source.run: {run_dir.name} is a {task or 'unknown'} run; bench takes a training run "
                "(its model and checkpoint) or a quantize run (also its QDQ model)"
            )
    else:
        source = resolve_model(spec.source, spec.model, spec.dataset, ctx, job="")
    example = source.example(ctx)
    _check_shape(
        (values_in(example),) if not example.single else example.sample_shape,
        "model.input_shape" if example.single else "source.run",
    )
    model = source.build(ctx)
    if source.checkpoint is not None and not source.pretrained:
        ctx.log(f"weights from {source.checkpoint}")
    source.release()
    label = source.label
    if not example.single:  # every backend calls it with the inputs in order, each one batched
        example = named_for(example, model)
        model = Positional(model, example.names, example.kind == "dict")
        return BenchSource(model.eval(), example.sample_shape, label, file, kind, quant_info, example=example)
    shape = example.sample_shape
    return BenchSource(model.eval(), tuple(shape), label, file, kind, quant_info)
