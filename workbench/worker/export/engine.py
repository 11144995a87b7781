"""`run_export`: an ExportSpec to an exported file in the run's artifacts (or `output`), its parity against eager
PyTorch and, for onnx_qdq, its accuracy in onnxruntime; returns the result contract
{artifact, format, size_bytes, parity, exporter?, fallback_reason?, accuracy?, ...} (the runner adds run_dir and
status). Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.specs import ExportSpec
from workbench.worker.export import formats, parity
from workbench.worker.export.common import file_size, output_path, reason, staged_output
from workbench.worker.models import logits_of
from workbench.worker.training.devices import resolve_device

STEPS = 4  # load, export, parity, done
FILE_NAMES = {"torchscript": ("model.pt", (".pt", ".pth", ".ts")), "exported_program": ("model.pt2", (".pt2",)),
              "onnx": ("model.onnx", (".onnx",)), "onnx_qdq": ("model_qdq.onnx", (".onnx",)),
              "tensorrt": ("model_tensorrt.pt2", (".pt2", ".ep"))}
EVAL_BATCH = 256


@contextlib.contextmanager
def exact_float32(device: torch.device) -> Iterator[None]:
    """No TF32 on CUDA while outputs are compared: it rounds matmul inputs to 10 bits, far past the tolerance."""
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


def _parity_inputs(spec: ExportSpec, shape: tuple[int, ...], dataset_spec, ctx,
                   loaded=None) -> tuple[list, list[int], int, int]:
    """(inputs, random batch sizes, real samples, extra random samples): random batches of 1 and 7 (1 only for
    a fixed batch), and up to parity_samples real test samples (random ones where there is no data). `loaded` is
    the dataset already loaded from dataset_spec, if any."""
    batches = list(parity.RANDOM_BATCHES) if spec.dynamic_batch else [1]
    inputs = parity.random_inputs(shape, batches)
    group = 7 if spec.dynamic_batch else 1
    real = (_real_samples(dataset_spec, shape, spec.parity_samples, group, ctx, loaded)
            if dataset_spec is not None else [])
    samples = sum(len(x) for _, x in real)
    extra = 0
    if not real:
        generator = torch.Generator().manual_seed(parity.SEED + 1)
        count = spec.parity_samples
        flat = torch.randn(count, *shape, generator=generator)
        real = [(f"random samples {i}..{i + len(c) - 1}", c) for i, c in
                ((i, flat[i:i + group]) for i in range(0, count, group))]
        extra = count
    return inputs + real, batches, samples, extra


def _real_samples(dataset_spec, shape, limit: int, group: int, ctx, loaded=None) -> list:
    from workbench.worker.data import load_dataset
    from workbench.worker.quant.data import held_out_batches

    try:
        dataset = loaded if loaded is not None else load_dataset(dataset_spec, ctx=ctx)
        if tuple(dataset.sample_shape) != tuple(shape):
            ctx.log(f"dataset {dataset_spec.name} gives samples of shape {','.join(map(str, dataset.sample_shape))}, "
                    f"not the model's {','.join(map(str, shape))}: parity runs on random inputs only", "warning")
            return []
        batches = held_out_batches(dataset, limit, batch_size=max(group, 64), device=torch.device("cpu"))
        return parity.sample_inputs(batches, limit, group)
    except JobError as exc:
        ctx.log(f"no real samples for the parity check ({exc}); random inputs only", "warning")
        return []


def _eager(model, device):
    def run(x: torch.Tensor) -> torch.Tensor:
        return logits_of(model(x.to(device)))
    return run


def _skipped() -> dict:
    return {"skipped": True, "passed": None, "reason": "verify=false"}


def run_export(spec: ExportSpec, ctx) -> dict:
    """The `export.model` task."""
    if spec.format == "onnx_qdq":
        return _run_qdq(spec, ctx)
    from workbench.worker.export.source import resolve_source

    device = _device(spec, ctx)
    if spec.precision != "fp32" and spec.format != "tensorrt":
        ctx.log(f"precision={spec.precision} applies to format=tensorrt only; {spec.format} keeps the model's float32",
                "warning")
    ctx.progress(0, STEPS, "loading the model", force=True)
    source = resolve_source(spec, ctx)
    name, suffixes = FILE_NAMES[spec.format]
    out = output_path(spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, name, suffixes)
    if source.example is not None:
        return _run_multi(spec, source, out, device, ctx)
    model = source.model.to(device).eval()
    shape = source.input_shape
    example = torch.randn(formats.example_batch(spec.dynamic_batch), *shape,
                          generator=torch.Generator().manual_seed(0)).to(device)
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
                info = formats.write_onnx(model, example, staged, opset=spec.opset, dynamic_batch=spec.dynamic_batch,
                                          log=ctx.log, output_names=["output"] if single else None)
        else:
            info, compiled = formats.write_tensorrt(model, example, staged, precision=spec.precision,
                                                    dynamic_batch=spec.dynamic_batch, device=device)
    export_s = time.perf_counter() - started
    ctx.artifact(f"{spec.format} model", out, kind=spec.format)
    ctx.log(f"wrote {out} ({file_size(out):,} bytes) in {export_s:.1f} s" +
            (f" with the {info['exporter']} exporter" if spec.format == "onnx" else ""))
    result = {"artifact": str(out), "format": spec.format, "size_bytes": file_size(out), **info,
              "source": source.describe(), "input_shape": list(shape), "input_names": ["input"],
              "dynamic_batch": spec.dynamic_batch, "device": str(device), "export_s": round(export_s, 3)}
    if spec.format != "onnx":
        result.pop("fallback_reason", None)
    data_file = out.with_name(out.name + ".data")
    if spec.format == "onnx" and data_file.is_file():
        result["external_data"] = str(data_file)  # a model over 2 GB keeps its weights beside the .onnx
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with eager PyTorch", force=True)
    if not spec.verify:
        result["parity"] = _skipped()
    else:
        tolerance = parity.FP16 if spec.format == "tensorrt" and spec.precision == "fp16" else parity.FP32
        inputs, batches, samples, extra = _parity_inputs(spec, shape, source.dataset, ctx, source.loaded)
        with exact_float32(device):
            exported, locate = _exported(spec.format, out, device, compiled, model, tolerance)
            checked = parity.check(_eager(model, device), exported, inputs, tolerance)
            if not checked["passed"]:
                located = _search(locate, checked["failing_input"])
            else:
                located = {"first_divergent_layer": None, "first_divergent_layer_reason": "parity passed"}
        result["parity"] = {**parity.finish(checked, batches, samples, extra), **located}
        _log_parity(ctx, result["parity"])
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _run_multi(spec: ExportSpec, source, out: Path, device: torch.device, ctx) -> dict:
    """A model with several inputs (a tuple or dict input): named inputs, parity on every one."""
    from workbench.worker.export import multi

    ctx.check_stop()
    ctx.progress(1, STEPS, f"exporting to {spec.format}", force=True)
    started = time.perf_counter()
    with staged_output(out) as staged:
        info, named, model, samples = multi.export(spec, source, source.example, staged, ctx, device)
    export_s = time.perf_counter() - started
    ctx.artifact(f"{spec.format} model", out, kind=spec.format)
    ctx.log(f"wrote {out} ({file_size(out):,} bytes) in {export_s:.1f} s with inputs {', '.join(named['input_names'])}")
    result = {"artifact": str(out), "format": spec.format, "size_bytes": file_size(out), **info,
              "source": source.describe(), **named, "dynamic_batch": spec.dynamic_batch, "device": str(device),
              "export_s": round(export_s, 3)}
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with eager PyTorch", force=True)
    if not spec.verify:
        result["parity"] = _skipped()
    else:
        result["parity"] = multi.check_parity(spec, source, model, samples, out, device, ctx)
        _log_parity(ctx, result["parity"])
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _search(locate, x: torch.Tensor) -> dict:
    """The first divergent layer, or why it could not be found (the export may not even run on that input)."""
    try:
        return locate(x)
    except Exception as exc:  # the search runs the export once more, with every output exposed
        return {"first_divergent_layer": None, "first_divergent_layer_reason": f"the layer search failed: "
                                                                               f"{reason(exc)}"}


def _exported(fmt: str, path: Path, device: torch.device, compiled, model, tolerance):
    """(the exported model as a callable on CPU tensors, a function that finds its first divergent layer)."""
    if fmt == "torchscript":
        module = formats.load_torchscript(path, device)
        return (lambda x: module(x.to(device))), (lambda x: {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": "TorchScript modules do not run forward hooks; export format=onnx or "
                                            "exported_program of the same model to find the layer"})
    if fmt == "exported_program":
        from workbench.worker.graph.sources import load_exported_program

        program = load_exported_program(path)
        module = program.module()
        return (lambda x: module(x.to(device))), (lambda x: parity.locate_program(program, model, x.to(device),
                                                                                  tolerance))
    if fmt == "onnx":
        session = formats.onnx_session(path, device)
        return formats.onnx_runner(session), (lambda x: parity.locate_onnx(path, model, x, lambda name: tolerance))
    return (lambda x: compiled(x.to(device))), (lambda x: {
        "first_divergent_layer": None,
        "first_divergent_layer_reason": "TensorRT fuses layers into engine kernels, so their outputs cannot be "
                                        "observed; export format=onnx of the same model to find the layer"})


def _log_parity(ctx, result: dict) -> None:
    worst = result["max_abs_diff"]
    worst_text = "inf" if worst is None else f"{worst:.3g}"
    if result["passed"]:
        samples = (f"{result['samples']} test samples" if result["samples"]
                   else f"{result.get('random_samples', 0)} random samples (no data)")
        ctx.log(f"parity: max |diff| {worst_text} within {result['tolerance']:.3g} on random batches of "
                f"{' and '.join(map(str, result['batches']))} and {samples}")
        return
    layer = result.get("first_divergent_layer")
    ctx.log(f"parity FAILED: max |diff| {worst_text} exceeds {result['tolerance']:.3g}"
            + (f"; first divergent layer: {layer}" if layer else
               f"; {result.get('first_divergent_layer_reason', '')}"), "warning")


# --- onnx_qdq ---------------------------------------------------------------------------------------------------


def _run_qdq(spec: ExportSpec, ctx) -> dict:
    from workbench.worker.data import load_dataset
    from workbench.worker.export import onnx_qdq
    from workbench.worker.quant.source import merge_dataset

    device = resolve_device(spec.device)
    ctx.progress(0, STEPS, "loading the quantize run", force=True)
    run = onnx_qdq.read_quant_run(spec.source.run, ctx.workspace, say=ctx.log)
    data = merge_dataset(run.dataset, spec.dataset)
    dataset = None
    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError as exc:
        ctx.log(f"dataset {data.name} cannot be read ({exc}): no accuracy, random parity inputs only", "warning")
    shape = tuple(spec.model.input_shape or run.model.input_shape) or (
        tuple(dataset.sample_shape) if dataset is not None else None)
    if not shape:
        raise JobError(f"model.input_shape is empty and dataset {data.name} cannot be read to take it from; set "
                       "model.input_shape, e.g. 3,32,32")
    warnings: list[str] = []

    def say(text: str, level: str = "info") -> None:
        if level != "info":
            warnings.append(text)
        ctx.log(text, level)

    build = onnx_qdq.build_qdq(run, say=say, input_shape=shape)
    name, suffixes = FILE_NAMES["onnx_qdq"]
    out = output_path(spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, name, suffixes)
    ctx.check_stop()
    ctx.progress(1, STEPS, "exporting to ONNX with QuantizeLinear/DequantizeLinear", force=True)
    started = time.perf_counter()
    info = onnx_qdq.export_qdq(build, out, opset=spec.opset, dynamic_batch=spec.dynamic_batch, say=say)
    export_s = time.perf_counter() - started
    ctx.artifact("onnx_qdq model", out, kind="onnx_qdq")
    described = onnx_qdq.describe(build, out, info, spec.dynamic_batch, warnings)
    ctx.log(f"wrote {out} ({described['size_bytes']:,} bytes, {info['nodes']['QuantizeLinear']} QuantizeLinear, "
            f"{info['nodes']['DequantizeLinear']} DequantizeLinear) in {export_s:.1f} s with the {info['exporter']} "
            "exporter")
    result = {"artifact": str(out), "format": "onnx_qdq", "size_bytes": described["size_bytes"],
              "exporter": info["exporter"], "fallback_reason": info["fallback_reason"], "opset": info["opset"],
              "quant_run": run.id, "source": {"run": str(run.dir), "training_run": str(run.train_dir)
                                              if run.train_dir else None, "model": run.model.name},
              "input_shape": list(shape), "dynamic_batch": spec.dynamic_batch, "device": str(device),
              "layers": build.layers, "nodes": info["nodes"], "output_scale": described["output_scale"],
              "warnings": warnings, "export_s": round(export_s, 3)}
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with the simulated quantized model", force=True)
    # Parity runs the graph as written (onnxruntime's graph optimizations off: QuantizeLinear, float kernels,
    # DequantizeLinear), which is the arithmetic the quantize run simulated, so one step of the output is the whole
    # tolerance. Deployment fuses Q/DQ into int8 kernels that requantize with their own rounding; that difference is
    # reported beside it (`optimized`), and the accuracy is measured the deployed way.
    literal = formats.onnx_runner(formats.onnx_session(out, device, optimize=False))
    deployed = formats.onnx_runner(formats.onnx_session(out, device))
    sim = build.sim

    def simulated(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return logits_of(sim(x.cpu()))

    if not spec.verify:
        result["parity"] = _skipped()
    else:
        tolerance = _qdq_tolerance(build)
        real_spec = data if dataset is not None else None
        inputs, batches, samples, extra = _parity_inputs(spec, shape, real_spec, ctx)
        checked = parity.check(simulated, literal, inputs, tolerance)
        located: dict = {"first_divergent_layer": None, "first_divergent_layer_reason": "parity passed"}
        if not checked["passed"]:
            # Which layer, at the granularity of the quantizers: each activation point held to its own step.
            points = {path: module.point for path, module in sim.gm.named_modules()
                      if getattr(module, "is_quantizer", False)}
            steps = {path: parity.quant_step(float(sim.points[p].module.qp.scale)) for path, p in points.items()
                     if sim.points[p].module.qp is not None}
            located = _search(lambda x: parity.locate_onnx(out, sim.gm, x, steps.get, optimize=False,
                                                           display=lambda path: points.get(path, path)),
                              checked["failing_input"])
        optimized = parity.check(simulated, deployed, inputs, tolerance)
        result["parity"] = {**parity.finish(checked, batches, samples, extra), **located,
                            "optimized": {"max_abs_diff": parity.finite(optimized["max_abs_diff"]),
                                          "max_rel_diff": parity.finite(optimized["max_rel_diff"]),
                                          "within_tolerance": optimized["passed"],
                                          "note": "onnxruntime with its graph optimizations (fused int8 kernels)"}}
        _log_parity(ctx, result["parity"])
        ctx.log(f"with onnxruntime's int8 kernels: max |diff| {optimized['max_abs_diff']:.3g} from the simulated "
                "model")
    if dataset is not None and spec.verify:
        ctx.check_stop()
        ctx.progress(3, STEPS, "measuring accuracy in onnxruntime", force=True)
        result["accuracy"] = _qdq_accuracy(run, dataset, deployed, ctx)
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _qdq_tolerance(build) -> parity.Tolerance:
    """One step of the output's quantizer: 8-bit, or the 16-bit grid of an output layer kept float (its Clip
    saturates like the grid, and rounding to the grid moves a value by half a step at most)."""
    sim = build.sim
    kept = set(build.layers["activations"]["float"])
    for name, point in sim.structure.points.items():
        qp = sim.points[name].module.qp
        if point.logits and qp is not None and sim.points[name].module.enabled:
            step = parity.quant_step(float(qp.scale))
            if name in kept:
                return parity.Tolerance(step.atol, 0.0, f"max |diff| <= one step ({float(qp.scale):.6g}) of the "
                                                        f"output's {qp.grid.bits}-bit grid, kept float in the ONNX "
                                                        "file, against the quantize run's simulated model")
            return step
    return parity.Tolerance(1e-4, 1e-5, "max |diff| <= 1e-4 + 1e-5 * max |simulated| (the output is not quantized)")


def _qdq_accuracy(run, dataset, run_onnx, ctx) -> dict:
    """Accuracy of the ONNX QDQ model in onnxruntime on the samples the quantize run measured (its eval_samples of
    the test split, else validation), beside the simulated accuracy that run reported."""
    from workbench.worker.quant.data import held_out_batches

    batches = held_out_batches(dataset, run.spec.eval_samples, batch_size=EVAL_BATCH, device=torch.device("cpu"))
    if run.train is not None and (run.report.get("metric") or {}).get("name"):
        return _qdq_monitor(run, dataset, batches, run_onnx, ctx)
    correct = total = 0
    for x, y in batches:
        ctx.check_stop()
        predicted = run_onnx(x).argmax(dim=1)
        correct += int((predicted == y.cpu()).sum())
        total += int(y.numel())
    measured = correct / total if total else None
    simulated = (run.report.get("quantized") or {}).get("accuracy")
    ctx.log(f"accuracy in onnxruntime {measured:.2%} on {total:,} samples of the {batches.what}"
            + (f" (the quantize run simulated {simulated:.2%})" if isinstance(simulated, (int, float)) else ""))
    return {"onnxruntime": measured, "simulated": simulated, "samples": total, "split": batches.what}


def _qdq_monitor(run, dataset, batches, run_onnx, ctx) -> dict:
    """A run of another task (segmentation, regression, ...): its monitor metric in onnxruntime, as quantize
    measured it, under the same keys ("accuracy" holds the monitor), with the metric named."""
    from workbench.worker.quant.data import evaluate
    from workbench.worker.training.task import objective_for

    metric = run.report["metric"]
    measured = evaluate(run_onnx, batches, ctx.check_stop, objective=objective_for(run.train, dataset))
    simulated = (run.report.get("quantized") or {}).get("accuracy")
    total = int(measured["logits"].shape[0])
    ctx.log(f"{metric.get('label', metric['name'])} in onnxruntime {measured['accuracy']:.4g} on {total:,} samples "
            f"of the {batches.what}" + (f" (the quantize run simulated {simulated:.4g})"
                                        if isinstance(simulated, (int, float)) else ""))
    return {"onnxruntime": measured["accuracy"], "simulated": simulated, "samples": total, "split": batches.what,
            "metric": metric}
