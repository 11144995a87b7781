"""Benchmarking a detector: the whole detector (resize and normalise, backbone, heads, box decode, NMS) and,
where it splits (torchvision's GeneralizedRCNN, RetinaNet, FCOS, SSD: a `transform` and a `backbone`), the
network alone on the transformed batch, in eager PyTorch; the whole detector in onnxruntime (float) and
onnxruntime_int8 (the quantize run's QDQ detector), one image a call, as exported. Rows in the bench result's
shape, `part` naming what was timed. Worker side; never imports Qt."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from workbench.errors import JobError
from workbench.worker.bench.engine import Publisher, new_row
from workbench.worker.bench.stats import summarize, throughput_per_s


def _time(fn, warmup: int, iters: int, check_stop) -> np.ndarray:
    with torch.no_grad():
        for _ in range(warmup):
            check_stop()
            fn()
        samples = []
        for _ in range(iters):
            check_stop()
            started = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - started) * 1000.0)
    return np.asarray(samples)


def _row(backend: str, batch: int, device, part: str, samples: np.ndarray) -> dict:
    row = new_row(backend, batch, device, "float32")
    latency = summarize(samples)
    row.update(
        status="ok",
        part=part,
        latency_ms=latency,
        iters=int(samples.size),
        throughput_per_s=throughput_per_s(batch, latency["p50"]),
        source=part,
    )
    return row


def _unavailable(backend: str, batch: int, device, reason: str) -> dict:
    row = new_row(backend, batch, device, "float32")
    row.update(reason=reason, part="whole detector")
    return row


def _is_qdq(path: str) -> bool:
    """Whether the .onnx file at `path` holds QuantizeLinear nodes (a QDQ model)."""
    from workbench.worker.export.detection_qdq import counted_ops

    return counted_ops(path)["quantize_linear"] > 0


def _onnx_files(spec, ctx, model, image, quant_run, dataset, tmp: Path) -> dict[str, str | None]:
    """{backend: the .onnx file it runs, or None where there is none to run} for onnxruntime (the float
    detector) and onnxruntime_int8 (the quantized one, QDQ): `artifact` where it is that kind, else written
    here from the run (the quantize run's for int8)."""
    from workbench.worker.export.detection import MIN_OPSET, write_detector_onnx

    wanted = [b for b in ("onnxruntime", "onnxruntime_int8") if b in spec.backends]
    artifact_kind = None
    if spec.artifact:  # the file named is measured as the kind it is, asked for or not, as it always was
        artifact_kind = "onnxruntime_int8" if _is_qdq(spec.artifact) else "onnxruntime"
        if artifact_kind not in wanted:
            wanted.insert(0 if artifact_kind == "onnxruntime" else len(wanted), artifact_kind)
    files: dict[str, str | None] = {}
    for backend in wanted:
        if backend == artifact_kind:
            files[backend] = spec.artifact
        elif backend == "onnxruntime" and model is not None:
            ctx.log("writing the float detector to ONNX for onnxruntime (with its post-processing)")
            path = tmp / "detector.onnx"
            write_detector_onnx(model.cpu(), image.cpu(), path, max(MIN_OPSET, 17))
            files[backend] = str(path)
        elif backend == "onnxruntime_int8" and quant_run is not None:
            from workbench.worker.detection_source import load_detection_quant
            from workbench.worker.export.onnx_qdq import qdq_module
            from workbench.worker.export.qdq_ops import register_torchscript_symbolics

            ctx.log(f"writing quantize run {quant_run.id}'s detector to ONNX QDQ for onnxruntime_int8")
            loaded = load_detection_quant(quant_run, ctx, dataset)
            module, _ = qdq_module(loaded.sim, quant_run.spec, ctx.log)
            register_torchscript_symbolics()
            path = tmp / "detector_qdq.onnx"
            write_detector_onnx(module, image.cpu(), path, 17)
            files[backend] = str(path)
        else:
            files[backend] = None
    return files


def run_detection_bench(spec, ctx, trained, train_dir, quant_run=None) -> dict:
    """The bench.latency job of a detection run (or of a detection quantize run, `quant_run`, whose FP32
    detector is eager's): eager whole and network alone per batch size, and at batch 1 the whole detector in
    onnxruntime (float) and onnxruntime_int8 (QDQ), from `artifact` or written from the run."""
    import tempfile

    from workbench.worker.detection_source import first_split, load_detection_run
    from workbench.worker.devices import resolve_device

    device = resolve_device(spec.device)
    source = load_detection_run(train_dir, trained, ctx, device)
    model, dataset = source.model, source.dataset
    image = dataset.splits[first_split(dataset)][0][0].to(device)
    splits = hasattr(model, "transform") and hasattr(model, "backbone")
    plan = []
    if "eager" in spec.backends:
        plan += [("eager", b, "whole detector") for b in spec.batch_sizes]
        plan += [("eager", b, "network alone (backbone)") for b in spec.batch_sizes if splits]
    with tempfile.TemporaryDirectory(prefix="wb-detect-bench-") as tmp:
        files = _onnx_files(spec, ctx, model, image, quant_run, dataset, Path(tmp))
        plan += [(backend, 1, "whole detector") for backend in files]
        unknown = [b for b in spec.backends if b not in ("eager", "onnxruntime", "onnxruntime_int8")]
        publisher = Publisher(ctx, len(plan) + len(unknown))
        ctx.log(
            f"measuring the detector {trained.model.name} on {device} with images of {list(image.shape)}: "
            + ", ".join(dict.fromkeys(f"{backend} ({part})" for backend, _, part in plan))
        )
        for k, (backend, batch, part) in enumerate(plan):
            ctx.progress(k, len(plan), f"{backend} {part}, batch {batch}", force=True)
            if backend in files and files[backend] is None:
                reason = (
                    "the quantized detector comes from a quantize run: set source.run to a quantize run of "
                    "this detector, or artifact to its onnx_qdq export"
                    if backend == "onnxruntime_int8"
                    else "no float detector to write"
                )
                publisher.add(_unavailable(backend, batch, device, reason), None)
                continue
            run = _runner(backend, part, model, image, batch, files.get(backend))
            samples = _time(run, spec.warmup, spec.iters, ctx.check_stop)
            # the network alone is its own row name, so a table or a plot keeps it apart from the whole
            # detector
            shown = backend if part == "whole detector" else f"{backend} (network alone)"
            publisher.add(_row(shown, batch, device, part, samples), samples)
        for backend in unknown:
            reason = f"{backend} does not take a detector here; eager, onnxruntime and onnxruntime_int8 do"
            publisher.add(_unavailable(backend, 1, device, reason), None)
    ctx.progress(len(plan), len(plan), "done", force=True)
    return {
        "results": publisher.rows,
        "model": trained.model.name,
        "input_shape": list(image.shape),
        "task": "detection",
        "source": {
            "run": str(quant_run.dir if quant_run is not None else train_dir),
            "model": trained.model.name,
            **({"training_run": str(train_dir)} if quant_run is not None else {}),
        },
        "device": str(device),
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "samples": str(saved) if (saved := publisher.save_samples()) else None,
    }


def _runner(backend: str, part: str, model, image, batch: int, path: str | None):
    """What one timed call runs: the detector, its backbone on the transformed batch, or an onnxruntime
    session of the file at `path` on one image."""
    images = [image] * batch
    if backend == "eager" and part == "whole detector":
        return lambda: model(images)
    if backend == "eager":
        with torch.no_grad():
            batched = model.transform(images)[0].tensors
        return lambda: model.backbone(batched)
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise JobError(f"{path} does not open in onnxruntime ({exc})") from None
    feed = {session.get_inputs()[0].name: image.cpu().numpy()}
    return lambda: session.run(None, feed)
