"""One exporter per format: TorchScript, torch.export (.pt2), ONNX (the torch.export-based exporter, else the
TorchScript-based one; onnx.checker must pass) and TensorRT (torch_tensorrt). A failure is a JobError naming
the operator or module and the next format to try. Worker side; never imports Qt; onnx and torch_tensorrt load
lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from unittest import mock

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.export.common import failed_operator, modules_calling, quiet, reason

MAX_BATCH = 2**20  # the upper bound of the dynamic batch dimension: large enough for any real batch
# protobuf caps one file at 2 GB: larger models keep their weights beside it
EXTERNAL_DATA_BYTES = 1_800_000_000
TORCHSCRIPT_EXPORTER_MAX_OPSET = 20
NEXT_FORMAT = {
    "onnx": "exported_program or torchscript",
    "onnx_qdq": "onnx (float) or tensorrt",
    "exported_program": "torchscript (with script=true for data-dependent control flow)",
    "torchscript": "exported_program",
    "tensorrt": "onnx",
}


def example_batch(dynamic_batch: bool) -> int:
    # torch.export specialises a dimension of size 1 (or 0) to a constant, so a dynamic batch is traced at 2.
    return 2 if dynamic_batch else 1


def batch_dim():
    return torch.export.Dim("batch", min=1, max=MAX_BATCH)


def export_failure(fmt: str, what: str, exc: BaseException, program=None, hint: str = "") -> JobError:
    operator = failed_operator(exc)
    modules = modules_calling(program, operator) if operator else []
    where = ""
    if operator:
        where = f" at operator {operator}" + (f" (in module {', '.join(modules[:3])})" if modules else "")
    return JobError(f"format={fmt}: {what} failed{where}: {reason(exc)}. {hint}Try format={NEXT_FORMAT[fmt]}")


# --- TorchScript --------------------------------------------------------------------------------------------


def write_torchscript(model: nn.Module, example: torch.Tensor, path: Path, *, script: bool) -> dict:
    """torch.jit.trace (or torch.jit.script) and torch.jit.save."""
    what = "torch.jit.script" if script else "torch.jit.trace"
    try:
        with quiet(), torch.no_grad():
            module = (
                torch.jit.script(model) if script else torch.jit.trace(model, (example,), check_trace=False)
            )
            torch.jit.save(module, str(path))
    except Exception as exc:  # the user's model code, and TorchScript's many refusals, raise anything
        hint = (
            (
                "torch.jit.script compiles forward()'s Python source and accepts only TorchScript's subset "
                "of Python; script=false traces it instead. "
            )
            if script
            else ""
        )
        raise export_failure("torchscript", what, exc, hint=hint) from None
    return {"exporter": "script" if script else "trace"}


def load_torchscript(path: Path, device: torch.device) -> Callable:
    # Our own file, just written: torch.jit.load runs no pickled Python code (TorchScript archives hold code
    # that TorchScript compiles, and only torch's own classes).
    with quiet():  # torch.jit.load warns that TorchScript is deprecated: the user chose the format
        module = torch.jit.load(str(path), map_location=device)
    return module.eval()


# --- torch.export -------------------------------------------------------------------------------------------


def export_program(
    model: nn.Module, example: torch.Tensor, *, dynamic_batch: bool, fmt: str = "exported_program"
):
    """torch.export.export with the batch dimension dynamic; a failure names the operator or the
    constraint."""
    shapes = ({0: batch_dim()},) if dynamic_batch else None
    try:
        with quiet():
            return torch.export.export(model, (example,), dynamic_shapes=shapes)
    except Exception as exc:
        text = str(exc)
        hint = ""
        if dynamic_batch and ("Constraints violated" in text or "specializ" in text or "batch" in text):
            hint = (
                "The model fixes its batch size somewhere (a reshape to a literal size, say); set "
                "dynamic_batch=false to export it for batch size 1. "
            )
        raise export_failure(fmt, "torch.export", exc, hint=hint) from None


def write_exported_program(
    model: nn.Module, example: torch.Tensor, path: Path, *, dynamic_batch: bool
) -> dict:
    program = export_program(model, example, dynamic_batch=dynamic_batch)
    try:
        with quiet():
            torch.export.save(program, str(path))
    except Exception as exc:
        raise export_failure("exported_program", "torch.export.save", exc) from None
    return {"exporter": "torch.export"}


def load_exported_program(path: Path) -> Callable:
    from workbench.worker.graph.sources import load_exported_program as safe_load

    return safe_load(path).module()


# --- ONNX ---------------------------------------------------------------------------------------------------


def _param_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


def check_onnx(path: Path) -> None:
    import onnx

    onnx.checker.check_model(str(path))  # by path: a model with external data is checked with it


def _opset_of(path: Path) -> int:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def write_onnx(
    model: nn.Module,
    example: torch.Tensor | tuple[torch.Tensor, ...],
    path: Path,
    *,
    opset: int,
    dynamic_batch: bool,
    log,
    output_names: list[str] | None = None,
    translations: dict | None = None,
    register_symbolics: Callable[[], None] | None = None,
    fmt: str = "onnx",
    input_names: list[str] | None = None,
    dynamic_shapes=None,
    sequence_inputs: list[str] | None = None,
) -> dict:
    """torch.onnx.export with the torch.export-based exporter (dynamo=True); where it fails, the
    TorchScript-based one, with the reason logged and reported. The file must pass onnx.checker either way.
    `example` is one input tensor, or a tuple of them (a model with several inputs, named by `input_names`;
    `dynamic_shapes` then gives torch.export their batch dimension as the model's signature takes them;
    `sequence_inputs` names the inputs whose second dimension varies too, token ids and masks)."""
    args = example if isinstance(example, tuple) else (example,)
    inputs = list(input_names or ["input"])
    names = {"input_names": inputs, "output_names": output_names}
    external = _param_bytes(model) > EXTERNAL_DATA_BYTES
    program = None
    try:
        with quiet():
            if dynamic_batch and dynamic_shapes is None:
                dynamic_shapes = ({0: batch_dim()},)
            dynamic = dynamic_batch or bool(sequence_inputs)
            program = torch.export.export(model, args, dynamic_shapes=dynamic_shapes if dynamic else None)
            torch.onnx.export(
                program,
                args,
                str(path),
                dynamo=True,
                opset_version=opset,
                verbose=False,
                external_data=external,
                custom_translation_table=translations or None,
                **names,
            )
        check_onnx(path)
        written = _opset_of(path)
        if written == opset:
            return {"exporter": "dynamo", "fallback_reason": None, "opset": opset}
        first: BaseException | None = None
        why = (
            f"it writes opset {written} and could not convert the model to opset {opset}; the "
            "TorchScript-based exporter writes older opsets"
        )
    except Exception as exc:  # any failure of the new exporter is a reason to try the old one
        first = exc
        why = reason(first)
        if "Constraints violated" in str(first):
            why += (
                " (the model fixes its batch size somewhere; dynamic_batch=false exports it for batch size 1)"
            )
        operator = failed_operator(first)
        if operator:
            modules = modules_calling(program, operator)
            why = (
                f"operator {operator}"
                + (f" in module {', '.join(modules[:3])}" if modules else "")
                + f": {why}"
            )
    log(
        f"the torch.export-based ONNX exporter failed ({why}); trying the TorchScript-based exporter",
        "warning",
    )
    for leftover in (path, path.with_name(path.name + ".data")):
        leftover.unlink(missing_ok=True)
    legacy_opset = min(opset, TORCHSCRIPT_EXPORTER_MAX_OPSET)
    if legacy_opset != opset:
        log(
            f"the TorchScript-based exporter writes opset {TORCHSCRIPT_EXPORTER_MAX_OPSET} at most; using it",
            "warning",
        )
    axes = {name: {0: "batch"} for name in inputs} if dynamic_batch else {}
    for name in sequence_inputs or []:
        axes.setdefault(name, {})[1] = "sequence"
    if dynamic_batch and output_names:
        axes.update({name: {0: "batch"} for name in output_names})
    axes = axes or None
    try:
        if register_symbolics is not None:
            register_symbolics()
        # The TorchScript exporter turns its C++ log on (a bug: it tests the function, not its result) and
        # prints the whole graph on stderr when a symbolic fails; the failure's message says enough.
        with quiet(), torch.no_grad(), mock.patch.object(torch._C, "_jit_onnx_log", lambda *args: None):
            torch.onnx.export(
                model,
                args,
                str(path),
                dynamo=False,
                opset_version=legacy_opset,
                verbose=False,
                dynamic_axes=axes,
                do_constant_folding=True,
                **names,
            )
        check_onnx(path)
    except Exception as exc:
        second = exc
        operator = failed_operator(second) or (failed_operator(first) if first is not None else None)
        modules = modules_calling(program, operator) if operator else []
        where = ""
        if operator:
            where = f" at operator {operator}" + (f" (in module {', '.join(modules[:3])})" if modules else "")
        raise JobError(
            f"format={fmt}: both ONNX exporters failed{where}. torch.export-based: "
            f"{reason(first) if first is not None else why}; TorchScript-based: {reason(second)}. "
            f"Try format={NEXT_FORMAT[fmt]}"
        ) from None
    return {"exporter": "torchscript", "fallback_reason": why, "opset": legacy_opset}


def onnx_session(path: Path, device: torch.device, *, optimize: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    # its errors come back as exceptions, reported per input; its warnings are noise
    options.log_severity_level = 4
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    providers = ["CPUExecutionProvider"]
    if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": device.index or 0}))
    return ort.InferenceSession(str(path), sess_options=options, providers=providers)


def onnx_runner(session) -> Callable:
    """A callable torch tensor -> torch tensor (the first output) over an onnxruntime session."""
    name = session.get_inputs()[0].name

    def run(x: torch.Tensor) -> torch.Tensor:
        x = x.detach().cpu()
        # ids stay int64
        out = session.run(None, {name: (x.float() if x.is_floating_point() else x).numpy()})[0]
        return torch.from_numpy(out)

    return run


# --- TensorRT -----------------------------------------------------------------------------------------------


def tensorrt_status(device: torch.device) -> tuple[bool, str]:
    """Whether torch_tensorrt can build an engine on `device`, and why not (the reasons devices.list
    gives)."""
    from workbench.worker.devices import tensorrt_availability

    status = tensorrt_availability(torch.cuda.is_available())
    if status["available"] and device.type != "cuda":
        return False, f"TensorRT builds CUDA engines, and device is {device}; set device=cuda"
    return bool(status["available"]), status["reason"]


TRT_PRECISIONS = {"fp32": (torch.float32,), "fp16": (torch.float32, torch.float16)}


def write_tensorrt(
    model: nn.Module,
    example: torch.Tensor,
    path: Path,
    *,
    precision: str,
    dynamic_batch: bool,
    device: torch.device,
    opt_batch: int = 8,
) -> tuple[dict, Callable]:
    """torch_tensorrt.compile (dynamo) of the model for a batch range, saved as an ExportedProgram (.pt2) that
    torch.export.load reads where torch_tensorrt is installed. Returns the report and the compiled module."""
    import torch_tensorrt

    if precision == "int8":
        raise JobError(
            "precision: int8 TensorRT engines need the model's quantization scales (Q/DQ nodes); export "
            "a quantize run with format=onnx_qdq and build the engine from it (trtexec --onnx=... "
            "--int8), or use precision=fp16 here"
        )
    shape = tuple(example.shape[1:])
    if dynamic_batch:
        spec = torch_tensorrt.Input(
            min_shape=(1, *shape),
            opt_shape=(opt_batch, *shape),
            max_shape=(max(opt_batch, 64), *shape),
            dtype=torch.float32,
        )
    else:
        spec = torch_tensorrt.Input(shape=(1, *shape), dtype=torch.float32)
    try:
        with quiet():
            compiled = torch_tensorrt.compile(
                model.to(device).eval(),
                ir="dynamo",
                inputs=[spec],
                enabled_precisions=set(TRT_PRECISIONS[precision]),
            )
    except Exception as exc:
        raise export_failure("tensorrt", "torch_tensorrt.compile", exc) from None
    try:
        with quiet():
            torch_tensorrt.save(compiled, str(path), output_format="exported_program", arg_inputs=[spec])
    except Exception as exc:
        raise export_failure("tensorrt", "torch_tensorrt.save", exc) from None
    info = {
        "exporter": "torch_tensorrt",
        "tensorrt_version": getattr(torch_tensorrt, "__version__", None),
        "precision": precision,
        "batch_range": [1, max(opt_batch, 64)] if dynamic_batch else [1, 1],
    }
    return info, compiled
