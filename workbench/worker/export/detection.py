"""Exporting a detector (a detection training run, or a torchvision detector by name) to ONNX with its
post-processing (anchors, box decode and NMS in the file, opset >= 11), and parity by matching boxes: for
every image checked, each eager box above the score threshold is matched to onnxruntime's box of the same
class with the highest IoU; parity holds when every match has IoU >= 0.99, scores agree within tolerance and
the counts agree, or each extra box is named. Worker side; never imports Qt."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.worker.export.checks import FILE_NAMES
from workbench.worker.export.common import file_size, output_path, staged_output

MIN_OPSET = 11  # torchvision's detectors export their NMS from opset 11 on
IOU_MIN = 0.99
SCORE_TOL = 1e-3
PARITY_IMAGES = 4
MAX_LISTED = 8  # mismatched boxes named in the result, per image


def _source(spec, ctx, run):
    """(model in eval, example images, threshold, description) of the export's source: `run` (a detection
    training run's folder and spec), else the detector model.name names."""
    from workbench.worker.detection_source import load_detection_run
    from workbench.worker.models.registry import get_model

    if run is not None:
        run_dir, trained = run
        source = load_detection_run(run_dir, trained, ctx)
        model, dataset, checkpoint = source.model, source.dataset, source.checkpoint
        split = next(s for s in ("test", "val", "train") if len(dataset.splits[s]))
        count = min(PARITY_IMAGES, len(dataset.splits[split]))
        images = [dataset.splits[split][i][0] for i in range(count)]
        origin = f"{count} image(s) of the {split} split of run {run_dir.name} ({checkpoint.name})"
        described = {"run": str(run_dir), "checkpoint": str(checkpoint), "model": trained.model.name}
    else:
        shape = tuple(spec.model.input_shape) or (3, 320, 320)
        model = get_model(
            spec.model.name,
            num_classes=spec.model.num_classes or 91,
            input_shape=shape,
            weights=spec.model.weights,
            log=ctx.log,
            args=spec.model.args,
        )
        generator = torch.Generator().manual_seed(0)
        images = [torch.rand(*shape, generator=generator) for _ in range(2)]
        origin = f"2 random images of {list(shape)}"
        described = {"model": spec.model.name}
    threshold = float(getattr(getattr(model, "roi_heads", None), "score_thresh", 0.05) or 0.05)
    return model.eval(), images, threshold, origin, described


def write_detector_onnx(model, image: torch.Tensor, path: Path, opset: int) -> dict:
    """The detector with its post-processing, one image [3, H, W] in (any size), boxes, labels and scores
    out (any count). torch.onnx's TorchScript exporter, as torchvision exports its detectors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about the data-dependent box counts
        torch.onnx.export(
            model,
            ([image],),
            str(path),
            opset_version=opset,
            input_names=["image"],
            output_names=["boxes", "labels", "scores"],
            dynamic_axes={"image": [1, 2], "boxes": [0], "labels": [0], "scores": [0]},
            dynamo=False,
        )
    return {"exporter": "torchscript", "opset": opset}


def match_boxes(eager: dict, other: dict, threshold: float) -> dict:
    """One image's parity: eager and onnxruntime outputs (boxes, labels, scores as tensors) compared box by
    box above `threshold` (see the module's docstring)."""
    from torchvision.ops import box_iou

    keep_e, keep_o = eager["scores"] >= threshold, other["scores"] >= threshold
    boxes_e, labels_e, scores_e = eager["boxes"][keep_e], eager["labels"][keep_e], eager["scores"][keep_e]
    boxes_o, labels_o, scores_o = other["boxes"][keep_o], other["labels"][keep_o], other["scores"][keep_o]
    iou = (
        box_iou(boxes_e, boxes_o)
        if len(boxes_e) and len(boxes_o)
        else torch.zeros(len(boxes_e), len(boxes_o))
    )
    taken: set[int] = set()
    worst_iou, worst_score, unmatched = 1.0, 0.0, []
    for e in torch.argsort(scores_e, descending=True).tolist():
        same = [
            (float(iou[e, o]), o)
            for o in range(len(boxes_o))
            if o not in taken and labels_o[o] == labels_e[e]
        ]
        best_iou, best = max(same, default=(0.0, None))
        if best is None or best_iou < IOU_MIN:
            unmatched.append(_named("eager", boxes_e[e], labels_e[e], scores_e[e], best_iou))
            worst_iou = min(worst_iou, best_iou)
            continue
        taken.add(best)
        worst_iou = min(worst_iou, best_iou)
        worst_score = max(worst_score, abs(float(scores_e[e]) - float(scores_o[best])))
    extra = [
        _named("onnxruntime", boxes_o[o], labels_o[o], scores_o[o], None)
        for o in range(len(boxes_o))
        if o not in taken
    ]
    # A box whose score sits within tolerance of the threshold may fall either side of it: named, not failed.
    at_edge = [b for b in unmatched + extra if abs(b["score"] - threshold) <= SCORE_TOL]
    failing = [b for b in unmatched + extra if b not in at_edge]
    return {
        "boxes": len(boxes_e),
        "boxes_onnxruntime": len(boxes_o),
        "worst_iou": round(worst_iou, 6),
        "max_score_diff": worst_score,
        "extra": (unmatched + extra)[:MAX_LISTED],
        "passed": not failing and worst_score <= SCORE_TOL,
    }


def _named(side: str, box, label, score, iou) -> dict:
    named = {
        "side": side,
        "label": int(label),
        "score": round(float(score), 5),
        "box": [round(float(v), 2) for v in box],
    }
    if iou is not None:
        named["best_iou"] = round(iou, 4)
    return named


def run_detection_export(spec, ctx, run=None) -> dict:
    """The `export.model` task for a detector (`run`: a detection training run's folder and spec; None: the
    detector model.name names): ONNX only (with its post-processing), parity by matching boxes."""
    if spec.format != "onnx":
        raise JobError(
            f"format: {spec.format} does not take a detector here yet; use format=onnx (the detector with "
            "its post-processing, parity checked box by box)"
        )
    import onnxruntime as ort

    ctx.progress(0, 3, "loading the detector", force=True)
    model, images, threshold, origin, described = _source(spec, ctx, run)
    opset = max(spec.opset, MIN_OPSET)
    if opset != spec.opset:
        ctx.log(f"opset {spec.opset} cannot hold the detector's NMS: exporting at opset {opset}")
    out = output_path(
        spec.output, ctx.run.artifacts_dir if ctx.run is not None else None, *FILE_NAMES["onnx"]
    )
    ctx.progress(1, 3, "exporting to onnx (with the post-processing)", force=True)
    started = time.perf_counter()
    with staged_output(out) as staged:
        info = write_detector_onnx(model, images[0], staged, opset)
    export_s = time.perf_counter() - started
    ctx.check_stop()
    ctx.progress(2, 3, "parity: eager against onnxruntime, box by box", force=True)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    per_image = []
    with torch.no_grad():
        for k, image in enumerate(images):
            ctx.check_stop()
            eager = model([image])[0]
            boxes, labels, scores = session.run(None, {"image": image.numpy()})
            other = {
                "boxes": torch.from_numpy(boxes),
                "labels": torch.from_numpy(labels),
                "scores": torch.from_numpy(scores),
            }
            per_image.append({"image": k, **match_boxes(eager, other, threshold)})
    passed = all(row["passed"] for row in per_image)
    parity = {
        "passed": passed,
        "method": "boxes",
        "score_threshold": threshold,
        "iou_min": IOU_MIN,
        "score_tol": SCORE_TOL,
        "inputs": origin,
        "images": per_image,
        "worst_iou": min(row["worst_iou"] for row in per_image),
        "max_score_diff": max(row["max_score_diff"] for row in per_image),
    }
    verdict = "passed" if passed else "FAILED"
    ctx.log(
        f"parity {verdict}: {len(per_image)} image(s), boxes above score {threshold:g} matched with worst "
        f"IoU {parity['worst_iou']:.4f}, scores within {parity['max_score_diff']:.2e}"
        + (
            ""
            if passed
            else "; " + "; ".join(str(row["extra"][:2]) for row in per_image if not row["passed"])
        )
    )
    ctx.artifact("ONNX model (with post-processing)", out, kind="onnx")
    ctx.progress(3, 3, "done", force=True)
    return {
        "artifact": str(out),
        "format": "onnx",
        "size_bytes": file_size(out),
        "parity": parity,
        "source": described,
        "task": "detection",
        "post_processing": "in the file: anchors, box decode and NMS (float)",
        "export_s": round(export_s, 3),
        **info,
    }
