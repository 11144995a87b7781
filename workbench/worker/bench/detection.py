"""Benchmarking a detector: the whole detector (resize and normalise, backbone, heads, box decode, NMS) and,
where it splits (torchvision's GeneralizedRCNN, RetinaNet, FCOS, SSD: a `transform` and a `backbone`), the
network alone on the transformed batch, in eager PyTorch; with `artifact` naming the run's ONNX export, the
whole detector in onnxruntime too (one image a call, as exported). Rows in the bench result's shape, `part`
naming what was timed. Worker side; never imports Qt."""

from __future__ import annotations

import time

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


def run_detection_bench(spec, ctx, trained, train_dir) -> dict:
    """The bench.latency job of a detection run: eager whole and network alone per batch size, and
    onnxruntime whole from an ONNX export (`artifact`) at batch 1."""
    from workbench.worker.detection_source import load_detection_run
    from workbench.worker.devices import resolve_device

    device = resolve_device(spec.device)
    source = load_detection_run(train_dir, trained, ctx, device)
    model, dataset = source.model, source.dataset
    split = next(s for s in ("test", "val", "train") if len(dataset.splits[s]))
    image = dataset.splits[split][0][0].to(device)
    splits = hasattr(model, "transform") and hasattr(model, "backbone")
    plan = [("eager", b, "whole detector") for b in spec.batch_sizes]
    plan += [("eager", b, "network alone (backbone)") for b in spec.batch_sizes if splits]
    if spec.artifact:
        plan.append(("onnxruntime", 1, "whole detector"))
    publisher = Publisher(ctx, len(plan))
    ctx.log(
        f"measuring the detector {trained.model.name} on {device} with images of {list(image.shape)}: the "
        "whole "
        "detector" + (" and its network alone" if splits else "") + (", onnxruntime" if spec.artifact else "")
    )
    for k, (backend, batch, part) in enumerate(plan):
        ctx.progress(k, len(plan), f"{backend} {part}, batch {batch}", force=True)
        images = [image] * batch
        if backend == "eager" and part == "whole detector":
            run = lambda images=images: model(images)  # noqa: E731
        elif backend == "eager":
            with torch.no_grad():
                batched = model.transform(images)[0].tensors
            run = lambda batched=batched: model.backbone(batched)  # noqa: E731
        else:
            import onnxruntime as ort

            try:
                session = ort.InferenceSession(spec.artifact, providers=["CPUExecutionProvider"])
            except Exception as exc:
                raise JobError(f"artifact: {spec.artifact} does not open in onnxruntime ({exc})") from None
            feed = {session.get_inputs()[0].name: image.cpu().numpy()}
            run = lambda session=session, feed=feed: session.run(None, feed)  # noqa: E731
        samples = _time(run, spec.warmup, spec.iters, ctx.check_stop)
        # the network alone is its own row name, so a table or a plot keeps it apart from the whole detector
        shown = backend if part == "whole detector" else f"{backend} (network alone)"
        publisher.add(_row(shown, batch, device, part, samples), samples)
    ctx.progress(len(plan), len(plan), "done", force=True)
    return {
        "results": publisher.rows,
        "model": trained.model.name,
        "input_shape": list(image.shape),
        "task": "detection",
        "source": {"run": str(train_dir), "model": trained.model.name},
        "device": str(device),
        "dtype": "float32",
        "threads": torch.get_num_threads(),
        "samples": str(saved) if (saved := publisher.save_samples()) else None,
    }
