"""The `export.model` task for format=onnx_qdq: a quantize run's model as ONNX QDQ, its parity with the run's
simulation in onnxruntime as deployed (graph optimizations on) and as written (off), with the step analysis
that explains any difference, and its accuracy in onnxruntime beside the simulated one. Worker side; never
imports Qt.
"""

from __future__ import annotations

import time

import torch

from workbench.errors import JobError
from workbench.results import QuantResult
from workbench.specs import ExportSpec
from workbench.worker.detection_source import is_detection_quant
from workbench.worker.devices import resolve_device
from workbench.worker.export import backend_compare, formats, parity, qdq_steps
from workbench.worker.export.checks import EVAL_BATCH, FILE_NAMES, STEPS, log_parity, parity_inputs, skipped
from workbench.worker.export.common import output_path
from workbench.worker.models import logits_of

MODES = (("deployed", True), ("as_written", False))  # onnxruntime's graph optimizations on, then off


def run_qdq(spec: ExportSpec, ctx) -> dict:
    from workbench.worker.data import load_dataset
    from workbench.worker.export import onnx_qdq
    from workbench.worker.source import merge_dataset

    device = resolve_device(spec.device)
    ctx.progress(0, STEPS, "loading the quantize run", force=True)
    run = onnx_qdq.read_quant_run(spec.source.run, ctx.workspace, say=ctx.log)
    if is_detection_quant(run):  # images in, boxes out: the post-processing float, parity box by box
        from workbench.worker.export.detection_qdq import run_detection_qdq

        return run_detection_qdq(spec, ctx, run)
    data = merge_dataset(run.dataset, spec.dataset)
    dataset = None
    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError as exc:
        ctx.log(
            f"dataset {data.name} cannot be read ({exc}): no accuracy, random parity inputs only", "warning"
        )
    shape = tuple(spec.model.input_shape or run.model.input_shape) or (
        tuple(dataset.sample_shape) if dataset is not None else None
    )
    if not shape:
        raise JobError(
            f"model.input_shape is empty and dataset {data.name} cannot be read to take it from; set "
            "model.input_shape, e.g. 3,32,32"
        )
    warnings: list[str] = []

    def say(text: str, level: str = "info") -> None:
        if level != "info":
            warnings.append(text)
        ctx.log(text, level)

    example = _example(run, dataset, data)
    integer = example is not None and not example.single  # token ids: the export traces and parity feeds them
    build = onnx_qdq.build_qdq(
        run, say=say, input_shape=shape, example=example.sample(0) if integer else None
    )
    name, suffixes = FILE_NAMES["onnx_qdq"]
    out = output_path(spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, name, suffixes)
    ctx.check_stop()
    ctx.progress(1, STEPS, "exporting to ONNX with QuantizeLinear/DequantizeLinear", force=True)
    started = time.perf_counter()
    traced = example.batch(formats.example_batch(spec.dynamic_batch)).tensors[0] if integer else None
    info = onnx_qdq.export_qdq(
        build, out, opset=spec.opset, dynamic_batch=spec.dynamic_batch, say=say, example=traced
    )
    export_s = time.perf_counter() - started
    ctx.artifact("onnx_qdq model", out, kind="onnx_qdq")
    described = onnx_qdq.describe(build, out, info, spec.dynamic_batch, warnings)
    ctx.log(
        f"wrote {out} ({described['size_bytes']:,} bytes, {info['nodes']['QuantizeLinear']} QuantizeLinear, "
        f"{info['nodes']['DequantizeLinear']} DequantizeLinear) in {export_s:.1f} s with the "
        f"{info['exporter']} exporter"
    )
    result = {
        "artifact": str(out),
        "format": "onnx_qdq",
        "size_bytes": described["size_bytes"],
        "exporter": info["exporter"],
        "fallback_reason": info["fallback_reason"],
        "opset": info["opset"],
        "quant_run": run.id,
        "source": {
            "run": str(run.dir),
            "training_run": str(run.train_dir) if run.train_dir else None,
            "model": run.model.name,
        },
        "input_shape": list(shape),
        "dynamic_batch": spec.dynamic_batch,
        "device": str(device),
        "layers": build.layers,
        "nodes": info["nodes"],
        "output_scale": described["output_scale"],
        "warnings": warnings,
        "export_s": round(export_s, 3),
    }
    ctx.check_stop()
    ctx.progress(2, STEPS, "checking parity with the simulated quantized model", force=True)
    deployed = formats.onnx_runner(formats.onnx_session(out, device))
    if not spec.verify:
        result["parity"] = skipped()
    else:
        started = time.perf_counter()
        inputs, batches, samples, extra = parity_inputs(
            spec, shape, data if dataset is not None else None, ctx, dataset, example if integer else None
        )
        result["parity"], result["by_module"], result["tensorrt_by_module"] = _parity(
            build, out, device, deployed, inputs, batches, samples, extra, ctx
        )
        result["parity"]["parity_s"] = round(time.perf_counter() - started, 3)
        log_parity(ctx, result["parity"])
    if dataset is not None and spec.verify:
        ctx.check_stop()
        ctx.progress(3, STEPS, "measuring accuracy in onnxruntime", force=True)
        result["accuracy"] = _accuracy(run, dataset, deployed, ctx)
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result


def _example(run, dataset, data):
    """The quantized model's example inputs (inputs.Example): the run's real samples, else its
    model.input_spec; None for a float image model with neither (random floats of its input shape). A tuple or
    dict input is refused: the QDQ parity and its step analysis feed one tensor."""
    from workbench.worker import inputs

    if dataset is not None:
        example = inputs.from_dataset(dataset)
    elif run.model.input_spec:
        example = inputs.from_input_spec(run.model.input_spec, 2)
    else:
        return None
    if example.kind != "tensor":
        raise JobError(
            f"format=onnx_qdq: the model takes {example.describe()}; the QDQ export and its parity take "
            "models with one input so far; export format=onnx, or quantize a model with one input"
        )
    return example


def _parity(
    build, out, device, deployed, inputs, batches, samples, extra, ctx
) -> tuple[dict, list[dict], dict]:
    """Parity as deployed (the headline) and as written, each held to the tolerance its step analysis derives,
    and each matching the simulation quantizer by quantizer; with that comparison per PyTorch module
    (by_module), and TensorRT's per module where it runs here."""
    sim = build.sim
    outputs: dict[int, torch.Tensor] = {}  # both configurations compare with the same simulated outputs

    def simulated(x: torch.Tensor) -> torch.Tensor:
        if id(x) not in outputs:
            with torch.no_grad():
                outputs[id(x)] = logits_of(sim(x.cpu()))
        return outputs[id(x)]

    step, unit = _output_step(build)
    # The step analysis runs every quantizer twice per input: on the largest random batch and the first real
    # one.
    analysed = [max(inputs[: len(batches)], key=lambda item: len(item[1]))] + inputs[
        len(batches) : len(batches) + 1
    ]
    measured = {}
    for mode, optimize in MODES:
        ctx.check_stop()
        measured[mode] = qdq_steps.measure(sim, out, analysed, optimize=optimize, simulated=simulated)
    # One flip injection serves both configurations (each quantizer at the higher of their two flip rates): it
    # runs the simulation on several copies of the largest input, the dearest part of the check.
    ctx.check_stop()
    spread = qdq_steps.spread_of(sim, list(measured.values()), step)
    checks, analyses = {}, {}
    for mode, optimize in MODES:
        ctx.check_stop()
        analyses[mode] = qdq_steps.conclude(sim, measured[mode], step, spread)
        runner = (
            deployed if optimize else formats.onnx_runner(formats.onnx_session(out, device, optimize=False))
        )
        tolerance = parity.quant_step(
            step, analyses[mode]["tolerance_steps"], _rule(analyses[mode], step, unit)
        )
        checks[mode] = parity.check(simulated, runner, inputs, tolerance)
        passed = checks[mode]["passed"] and analyses[mode]["local_passed"]
        checks[mode]["passed"] = passed
        ctx.log(
            f"{'deployed' if optimize else 'as written'}: {qdq_steps.explain(analyses[mode], step)}",
            "info" if passed else "warning",
        )
    headline = checks["deployed"]
    result = parity.finish(headline, batches, samples, extra)
    result["passed"] = all(c["passed"] for c in checks.values())
    result["steps"] = {**analyses, "unit": unit, "step": step}
    result["explanation"] = " ".join(qdq_steps.explain(analyses[m], step) + "." for m, _ in MODES)
    result["as_written"] = _summary(checks["as_written"])
    result["optimized"] = {
        **_summary(headline),
        "note": "onnxruntime with its graph optimizations (fused int8 "
        "kernels), as deployed; the headline figures",
    }
    first = next(
        (a["quantizers"]["off"][0]["point"] for a in analyses.values() if a["quantizers"]["off"]), None
    )
    by_module, tensorrt = _by_module(sim, out, measured, analysed, ctx)
    result["first_divergent_layer"] = first
    if first is None:
        result["first_divergent_layer_reason"] = (
            "parity passed"
            if result["passed"]
            else "every quantizer computes the simulation's codes from the same "
            "input, up to rounding flips; the output moved further than those flips explain"
        )
    return result, by_module, tensorrt


def _by_module(sim, out, measured: dict, analysed: list, ctx) -> tuple[list[dict], dict]:
    """The step analysis's code comparison per PyTorch module, both configurations; then TensorRT's, module by
    module, on the worst modules (or why it cannot run here)."""
    owners = backend_compare.point_owners(sim)
    labels = dict(zip((mode for mode, _ in MODES), (label for label, _ in backend_compare.CONFIGURATIONS)))
    tallies = {labels[m]: backend_compare.tallies_of(measured[m]) for m, _ in MODES}
    rows = backend_compare.codes_by_module(tallies, owners)
    ctx.check_stop()
    worst = [r["module"] for r in rows]
    tensorrt = backend_compare.tensorrt_by_module(sim, out, analysed[0][1], owners, worst)
    if not tensorrt["available"]:
        ctx.log(tensorrt["reason"])
    return rows, tensorrt


def _rule(analysis: dict, step: float, unit: str) -> str:
    return (
        f"max |diff| <= {analysis['tolerance_steps']} steps ({unit}, {step:.6g}) from the quantize run's "
        f"simulated model: {qdq_steps.MARGIN:g} x the {analysis['injected_spread_steps']:.1f} steps that "
        "one-step rounding flips, injected at the rates measured quantizer by quantizer (one more flip "
        "each), moved the simulation's output, plus one; and every quantizer within one step of the "
        "simulation's codes from the same input"
    )


def _summary(checked: dict) -> dict:
    return {
        "max_abs_diff": parity.finite(checked["max_abs_diff"]),
        "max_rel_diff": parity.finite(checked["max_rel_diff"]),
        "tolerance": checked["tolerance"],
        "within_tolerance": checked["passed"],
    }


def _output_step(build) -> tuple[float, str]:
    """The unit the output's differences are counted in: one step of the output's 8-bit quantizer; where the
    output stays float (after an average of codes, say, or kept at 16 bits), one step of the last quantizer
    before it."""
    from workbench.worker.export.onnx_qdq import logits_scale

    sim = build.sim
    scale = logits_scale(sim, build.layers)
    if scale is not None:
        return scale, "the output quantizer's step"
    kept = set(build.layers["activations"]["float"])
    for name in reversed(list(sim.points)):
        qp = sim.points[name].module.qp
        if qp is not None and sim.points[name].module.enabled:
            if name in kept:
                return float(
                    qp.scale
                ), f"one step of {name}'s {qp.grid.bits}-bit grid, kept float in the ONNX file"
            return float(qp.scale), f"the step of {name}, the last quantizer before the float output"
    raise JobError("onnx_qdq: the quantize run quantizes no activation; export format=onnx instead")


def _accuracy(run, dataset, run_onnx, ctx) -> dict:
    """Accuracy of the ONNX QDQ model in onnxruntime on the samples the quantize run measured (its
    eval_samples of the test split, else validation), beside the simulated accuracy that run reported."""
    from workbench.worker.quant.data import held_out_batches

    batches = held_out_batches(
        dataset, run.spec.eval_samples, batch_size=EVAL_BATCH, device=torch.device("cpu")
    )
    if run.train is not None and QuantResult.from_dict(run.report).metric_name:
        return _monitor(run, dataset, batches, run_onnx, ctx)
    correct = total = 0
    for x, y in batches:
        ctx.check_stop()
        predicted = run_onnx(x).argmax(dim=1)
        correct += int((predicted == y.cpu()).sum())
        total += int(y.numel())
    measured = correct / total if total else None
    simulated = QuantResult.from_dict(run.report).quantized.accuracy
    ctx.log(
        f"accuracy in onnxruntime {measured:.2%} on {total:,} samples of the {batches.what}"
        + (f" (the quantize run simulated {simulated:.2%})" if isinstance(simulated, (int, float)) else "")
    )
    return {
        "onnxruntime": measured,
        "simulated": simulated,
        "samples": total,
        "split": batches.what,
        **_agreement(measured, simulated, total),
    }


def _agreement(measured, simulated, total: int) -> dict:
    """Whether onnxruntime's accuracy equals the simulated one on the same samples."""
    if not isinstance(measured, (int, float)) or not isinstance(simulated, (int, float)):
        return {"equal": None}
    return {"equal": round(measured * total) == round(simulated * total)}


def _monitor(run, dataset, batches, run_onnx, ctx) -> dict:
    """A run of another task (segmentation, regression, ...): its monitor metric in onnxruntime, as quantize
    measured it, under the same keys ("accuracy" holds the monitor), with the metric named."""
    from workbench.worker.objectives.of_run import objective_for
    from workbench.worker.quant.data import evaluate

    objective = objective_for(run.train, dataset)
    # Named after the split measured here ("test mIoU"), whatever an older quantize run's label said.
    split = batches.what.split()[0]
    metric = {**run.report["metric"], "label": f"{split} {objective.monitor_label}", "split": split}
    measured = evaluate(run_onnx, batches, ctx.check_stop, objective=objective)
    simulated = QuantResult.from_dict(run.report).quantized.accuracy
    total = int(measured["logits"].shape[0])
    ctx.log(
        f"{metric.get('label', metric['name'])} in onnxruntime {measured['accuracy']:.4g} on {total:,} "
        f"samples of the {batches.what}"
        + (f" (the quantize run simulated {simulated:.4g})" if isinstance(simulated, (int, float)) else "")
    )
    return {
        "onnxruntime": measured["accuracy"],
        "simulated": simulated,
        "samples": total,
        "split": batches.what,
        "metric": metric,
    }
