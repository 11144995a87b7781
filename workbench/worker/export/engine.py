"""`run_export`: an ExportSpec to an exported file in the run's artifacts (or `output`), its parity against
eager PyTorch and, for onnx_qdq, its accuracy in onnxruntime; returns the result contract {artifact, format,
size_bytes, parity, exporter?, fallback_reason?, accuracy?, ...} (the runner adds run_dir and status). Worker
side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.specs import ExportSpec
from workbench.worker.devices import resolve_device
from workbench.worker.export import formats, parity
from workbench.worker.export.checks import FILE_NAMES, STEPS, log_parity, parity_inputs, skipped
from workbench.worker.export.common import file_size, output_path, reason, staged_output
from workbench.worker.models import logits_of


@contextlib.contextmanager
def exact_float32(device: torch.device) -> Iterator[None]:
    """No TF32 on CUDA while outputs are compared: it rounds matmul inputs to 10 bits, far past the
    tolerance."""
    if device.type != "cuda":
        yield
        return
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _device(spec: ExportSpec, ctx) -> torch.device:
    if spec.format != "tensorrt":
        return resolve_device(spec.device)
    device = torch.device("cuda") if spec.device in ("cpu", "auto") and torch.cuda.is_available() else None
    if device is None:
        try:
            device = resolve_device(spec.device)
        except JobError as exc:
            raise JobError(f"TensorRT is not available here: {exc}; try format=onnx") from None
    available, why = formats.tensorrt_status(device)
    if not available:
        raise JobError(f"TensorRT is not available here: {why}; try format=onnx")
    if spec.device != str(device) and spec.device in ("cpu", "auto"):
        ctx.log(f"TensorRT builds CUDA engines: using {device} (device is {spec.device})")
    return device


def _eager(model, device):
    def run(x: torch.Tensor) -> torch.Tensor:
        return logits_of(model(x.to(device)))

    return run


def run_export(spec: ExportSpec, ctx) -> dict:
    """The `export.model` task."""
    if spec.format == "onnx_qdq":
        from workbench.worker.export.qdq_job import run_qdq

        return run_qdq(spec, ctx)
    from workbench.worker.detection_source import detection_run
    from workbench.worker.export.detection import run_detection_export
    from workbench.worker.models.torchvision_models import is_detector

    detection = detection_run(spec.source.run, ctx.workspace)
    if detection is not None or (not spec.source.run and is_detector(spec.model.name)):
        return run_detection_export(spec, ctx, detection)  # images in, boxes out: matched box by box
    from workbench.worker.export.source import resolve_source

    device = _device(spec, ctx)
    if spec.precision != "fp32" and spec.format != "tensorrt":
        ctx.log(
            f"precision={spec.precision} applies to format=tensorrt only; {spec.format} keeps the model's "
            "float32",
            "warning",
        )
    ctx.progress(0, STEPS, "loading the model", force=True)
    source = resolve_source(spec, ctx)
    name, suffixes = FILE_NAMES[spec.format]
    out = output_path(spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, name, suffixes)
    if source.example is not None:
        return _run_multi(spec, source, out, device, ctx)
    model = source.model.to(device).eval()
    shape = source.input_shape
    example = torch.randn(
        formats.example_batch(spec.dynamic_batch), *shape, generator=torch.Generator().manual_seed(0)
    ).to(device)
    with torch.no_grad():
        single = isinstance(model(example), torch.Tensor)
    ctx.check_stop()
    ctx.progress(1, STEPS, f"exporting to {spec.format}", force=True)
    started = time.perf_counter()
    compiled = None
    with staged_output(out) as staged:
        if spec.format == "torchscript":
            info = formats.write_torchscript(model, example, staged, script=spec.script)
        elif spec.format == "exported_program":
            info = formats.write_exported_program(model, example, staged, dynamic_batch=spec.dynamic_batch)
        elif spec.format == "onnx":
            with torch.no_grad():
                info = formats.write_onnx(
                    model,
                    example,
                    staged,
                    opset=spec.opset,
                    dynamic_batch=spec.dynamic_batch,
                    log=ctx.log,
                    output_names=["output"] if single else None,
                )
        else:
            info, compiled = formats.write_tensorrt(
                model,
                example,
                staged,
                precision=spec.precision,
                dynamic_batch=spec.dynamic_batch,
                device=device,
            )
    export_s = time.perf_counter() - started
    ctx.artifact(f"{spec.format} model", out, kind=spec.format)
    ctx.log(
        f"wrote {out} ({file_size(out):,} bytes) in {export_s:.1f} s"
        + (f" with the {info['exporter']} exporter" if spec.format == "onnx" else "")
    )
    result = {
        "artifact": str(out),
        "format": spec.format,
        "size_bytes": file_size(out),
        **info,
        "source": source.describe(),
        "input_shape": list(shape),
        "input_names": ["input"],
        "dynamic_batch": spec.dynamic_batch,
        "device": str(device),
        "export_s": round(export_s, 3),
    }
    _note_frozen(result, info, ctx)
    if spec.format != "onnx":
        result.pop("fallback_reason", None)
    data_file = out.with_name(out.name + ".data")
    if spec.format == "onnx" and data_file.is_file():
        result["external_data"] = str(data_file)  # a model over 2 GB keeps its weights beside the .onnx
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with eager PyTorch", force=True)
    if not spec.verify:
        result["parity"] = skipped()
    else:
        tolerance = parity.FP16 if spec.format == "tensorrt" and spec.precision == "fp16" else parity.FP32
        inputs, batches, samples, extra = parity_inputs(spec, shape, source.dataset, ctx, source.loaded)
        with exact_float32(device):
            exported, locate = _exported(spec.format, out, device, compiled, model, tolerance)
            checked = parity.check(_eager(model, device), exported, inputs, tolerance)
            if not checked["passed"]:
                located = _search(locate, checked["failing_input"])
            else:
                located = {"first_divergent_layer": None, "first_divergent_layer_reason": "parity passed"}
        result["parity"] = {**parity.finish(checked, batches, samples, extra), **located}
        log_parity(ctx, result["parity"])
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _note_frozen(result: dict, info: dict, ctx) -> None:
    """Say where a tracing exporter froze Python control flow on tensor values
    (result["frozen_control_flow"])."""
    frozen = parity.traced_note(info.get("exporter", ""), info.get("fallback_reason"))
    if frozen:
        result["frozen_control_flow"] = frozen
        # A fallback the user did not choose is a warning; format=torchscript with script=false traces as
        # asked.
        ctx.log(frozen, "warning" if info.get("exporter") == "torchscript" else "info")


def _run_multi(spec: ExportSpec, source, out: Path, device: torch.device, ctx) -> dict:
    """A model whose inputs are not one float tensor (token ids, a tuple or dict input): named and typed
    inputs, parity on every one."""
    from workbench.worker.export import multi

    ctx.check_stop()
    ctx.progress(1, STEPS, f"exporting to {spec.format}", force=True)
    started = time.perf_counter()
    with staged_output(out) as staged:
        info, named, model, example = multi.export(spec, source, source.example, staged, ctx, device)
    export_s = time.perf_counter() - started
    ctx.artifact(f"{spec.format} model", out, kind=spec.format)
    ctx.log(
        f"wrote {out} ({file_size(out):,} bytes) in {export_s:.1f} s with inputs "
        f"{', '.join(named['input_names'])}"
    )
    result = {
        "artifact": str(out),
        "format": spec.format,
        "size_bytes": file_size(out),
        **info,
        "source": source.describe(),
        **named,
        "dynamic_batch": spec.dynamic_batch,
        "device": str(device),
        "export_s": round(export_s, 3),
    }
    _note_frozen(result, info, ctx)
    if spec.format != "onnx":
        result.pop("fallback_reason", None)
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with eager PyTorch", force=True)
    if not spec.verify:
        result["parity"] = skipped()
    else:
        result["parity"] = multi.check_parity(spec, source, model, example, out, device, ctx)
        log_parity(ctx, result["parity"])
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _search(locate, x: torch.Tensor) -> dict:
    """The first divergent layer, or why it could not be found (the export may not even run on that input)."""
    try:
        return locate(x)
    except Exception as exc:  # the search runs the export once more, with every output exposed
        return {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": f"the layer search failed: {reason(exc)}",
        }


def _exported(fmt: str, path: Path, device: torch.device, compiled, model, tolerance):
    """(the exported model as a callable on CPU tensors, a function that finds its first divergent layer)."""
    if fmt == "torchscript":
        module = formats.load_torchscript(path, device)
        return (lambda x: module(x.to(device))), (
            lambda x: {
                "first_divergent_layer": None,
                "first_divergent_layer_reason": "TorchScript modules do not run forward hooks; export "
                "format=onnx or exported_program of the same model to find the layer",
            }
        )
    if fmt == "exported_program":
        from workbench.worker.graph.sources import load_exported_program

        program = load_exported_program(path)
        module = program.module()
        return (lambda x: module(x.to(device))), (
            lambda x: parity.locate_program(program, model, x.to(device), tolerance)
        )
    if fmt == "onnx":
        session = formats.onnx_session(path, device)
        return formats.onnx_runner(session), (
            lambda x: parity.locate_onnx(path, model, x, lambda name: tolerance)
        )
    return (lambda x: compiled(x.to(device))), (
        lambda x: {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": "TensorRT fuses layers into engine kernels, so their outputs "
            "cannot be observed; export format=onnx of the same model to find the layer",
        }
    )
