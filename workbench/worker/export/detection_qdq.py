"""A detection quantize run as ONNX QDQ: its backbone, neck and head layers with QuantizeLinear /
DequantizeLinear as the run quantized them, and the post-processing (anchors, box decode, NMS) in the file in
float; parity is the run's simulation against onnxruntime, box by box. Worker side; never imports Qt."""

from __future__ import annotations

import time

from workbench.errors import JobError
from workbench.worker.export.checks import FILE_NAMES
from workbench.worker.export.common import file_size, output_path, staged_output
from workbench.worker.export.detection import (
    MIN_OPSET,
    box_parity,
    log_box_parity,
    onnx_detector,
    parity_images,
    score_threshold,
    write_detector_onnx,
)
from workbench.worker.export.qdq_ops import SYMBOLIC_OPSET, register_torchscript_symbolics

STEPS = 4  # rebuild, export, parity, mAP in onnxruntime


def _ops(graph) -> list[str]:
    """Every op of an ONNX graph, its subgraphs' (a Loop's, an If's) included: the NMS of a detector's
    post-processing sits in one."""
    found = []
    for node in graph.node:
        found.append(node.op_type)
        for attribute in node.attribute:
            if attribute.HasField("g"):
                found += _ops(attribute.g)
            for sub in attribute.graphs:
                found += _ops(sub)
    return found


def counted_ops(path) -> dict:
    """The file's Q/DQ nodes and whether its NMS is in it."""
    import onnx

    ops = _ops(onnx.load(str(path), load_external_data=False).graph)
    return {
        "nms": "NonMaxSuppression" in ops,
        "quantize_linear": ops.count("QuantizeLinear"),
        "dequantize_linear": ops.count("DequantizeLinear"),
    }


def onnxruntime_map(path, run, dataset, ctx) -> dict:
    """The exported detector's COCO mAP in onnxruntime on the held-out images the quantize run measured,
    beside the mAP its simulation had there (the export's accuracy, as an onnx_qdq export of a classifier
    reports)."""
    from workbench.worker.detection_source import held_out_split
    from workbench.worker.quant.detection import HELD_OUT_IMAGES, first_images, ground_truth_of, measure_map

    split = held_out_split(dataset)
    held_out = first_images(dataset.splits[split], HELD_OUT_IMAGES)
    found = measure_map(
        onnx_detector(path), held_out, ground_truth_of(held_out, dataset), dataset, ctx.check_stop, "cpu"
    )
    report = run.report or {}
    simulated = (report.get("quantized") or {}).get("accuracy")
    metric = report.get("metric") or {"name": "map", "label": f"{split} mAP", "higher_is_better": True}
    ctx.log(
        f"{metric.get('label', 'mAP')} in onnxruntime {found['accuracy']:.4f}"
        + (f", simulated by the quantize run {simulated:.4f}" if isinstance(simulated, (int, float)) else "")
        + f" on {len(held_out)} image(s) of the {split} split"
    )
    return {
        "onnxruntime": found["accuracy"],
        "simulated": simulated,
        "metric": metric,
        "split": f"{split} split",
        "samples": len(held_out),
        "metrics": found["metrics"],
    }


def run_detection_qdq(spec, ctx, run) -> dict:
    """The export.model task for format=onnx_qdq on a detection quantize run (a QuantRun)."""
    from workbench.worker.detection_source import load_detection_quant
    from workbench.worker.export.onnx_qdq import qdq_module

    warnings: list[str] = []

    def say(text: str, level: str = "info") -> None:
        if level != "info":
            warnings.append(text)
        ctx.log(text, level)

    ctx.progress(0, STEPS, "rebuilding the quantized detector", force=True)
    loaded = load_detection_quant(run, ctx)
    module, layers = qdq_module(loaded.sim, run.spec, say)
    images, origin = parity_images(loaded.dataset)
    opset = max(spec.opset, MIN_OPSET, SYMBOLIC_OPSET)
    if opset != spec.opset:
        ctx.log(
            f"opset {spec.opset} cannot hold per-channel Q/DQ and the detector's NMS: exporting at {opset}"
        )
    out = output_path(
        spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, *FILE_NAMES["onnx_qdq"]
    )
    ctx.check_stop()
    ctx.progress(1, STEPS, "exporting to ONNX QDQ (with the float post-processing)", force=True)
    register_torchscript_symbolics()
    started = time.perf_counter()
    with staged_output(out) as staged:
        info = write_detector_onnx(module, images[0], staged, opset)
        found = counted_ops(staged)
    export_s = time.perf_counter() - started
    expected = len(layers["activations"]["qdq"])
    if found["quantize_linear"] < expected:
        raise JobError(
            f"onnx_qdq: the exported detector has {found['quantize_linear']} QuantizeLinear nodes for "
            f"{expected} quantized activation points; the exporter dropped some. Try format=onnx"
        )
    ctx.artifact("onnx_qdq detector (float post-processing)", out, kind="onnx_qdq")
    ctx.log(
        f"wrote {out} ({file_size(out):,} bytes, {found['quantize_linear']} QuantizeLinear, "
        f"{found['dequantize_linear']} DequantizeLinear; NMS {'in the file' if found['nms'] else 'MISSING'}) "
        f"in {export_s:.1f} s"
    )
    threshold = score_threshold(loaded.sim)
    result = {
        "artifact": str(out),
        "format": "onnx_qdq",
        "size_bytes": file_size(out),
        "quant_run": run.id,
        "source": {
            "run": str(run.dir),
            "training_run": str(run.train_dir) if run.train_dir else None,
            "model": run.train.model.name,
        },
        "task": "detection",
        "layers": layers,
        "nodes": {"QuantizeLinear": found["quantize_linear"], "DequantizeLinear": found["dequantize_linear"]},
        "post_processing": "in the file, float: anchors, box decode and NMS",
        "warnings": warnings,
        "export_s": round(export_s, 3),
        **info,
    }
    ctx.check_stop()
    if spec.verify:
        ctx.progress(2, STEPS, "parity: the simulation against onnxruntime, box by box", force=True)
        result["parity"] = box_parity(
            loaded.sim, out, images, threshold, f"{origin} of run {run.id}", ctx, exported=module, opset=opset
        )
        log_box_parity(ctx, result["parity"], "the quantize run's simulation")
        ctx.check_stop()
        ctx.progress(3, STEPS, "measuring mAP in onnxruntime", force=True)
        result["accuracy"] = onnxruntime_map(out, run, loaded.dataset, ctx)
    else:
        result["parity"] = {"passed": None, "method": "boxes", "skipped": "verify = false"}
    ctx.progress(STEPS, STEPS, "done", force=True)
    return result
