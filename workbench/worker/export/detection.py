"""Exporting a detector (a detection training run, or a torchvision detector by name) to ONNX with its
post-processing (anchors, box decode and NMS in the file, opset >= 11), and parity by matching boxes: for
every image checked, each eager box above the score threshold is matched to onnxruntime's box of the same
class with the highest IoU; parity holds when every match has IoU >= 0.99, scores agree within tolerance and
the counts agree, or each extra box is named. Worker side; never imports Qt."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.worker.export.checks import FILE_NAMES
from workbench.worker.export.common import file_size, output_path, staged_output

MIN_OPSET = 11  # torchvision's detectors export their NMS from opset 11 on
IOU_MIN = 0.99
# A box the other side had before its NMS is the same box at this IoU: a proposal differs in place by a
# fraction of a pixel between the simulation and onnxruntime's fused kernels, which moves a thin box's IoU a
# lot (a box 2.5 px tall went to 0.981); its score must still agree within SCORE_TOL.
SAME_CANDIDATE_IOU = 0.9
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
        images, origin = parity_images(dataset)
        origin += f" of run {run_dir.name} ({checkpoint.name})"
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
    return model.eval(), images, score_threshold(model), origin, described


def parity_images(dataset) -> tuple[list, str]:
    """(the first PARITY_IMAGES images of the first split that has any, what they are)."""
    from workbench.worker.detection_source import first_split

    split = first_split(dataset)
    count = min(PARITY_IMAGES, len(dataset.splits[split]))
    return [dataset.splits[split][i][0] for i in range(count)], f"{count} image(s) of the {split} split"


def score_threshold(model) -> float:
    """The score below which the detector (or its simulation) drops a box: its RoIHeads' (0.05 otherwise)."""
    heads = getattr(getattr(model, "gm", model), "roi_heads", None)
    return float(getattr(heads, "score_thresh", 0.05) or 0.05)


def onnx_detector(path: Path):
    """The detector file at `path` in onnxruntime as a detector is called: a list of [3, H, W] images in, one
    {boxes, labels, scores} dict of tensors per image out (one image a call, as exported)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def detect(images) -> list[dict]:
        outputs = []
        for image in images:
            boxes, labels, scores = session.run(None, {"image": image.cpu().numpy()})
            outputs.append(
                {
                    "boxes": torch.from_numpy(boxes),
                    "labels": torch.from_numpy(labels),
                    "scores": torch.from_numpy(scores),
                }
            )
        return outputs

    return detect


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


def _modules(model):
    """The detector's modules; a quantize run's simulation (a QuantSim) holds its detector as .gm."""
    return getattr(model, "gm", model).modules()


@contextlib.contextmanager
def without_suppression(model) -> Iterator[None]:
    """The detector (or its simulation) with its NMS and per-image box limit switched off for a moment: its
    output is then every candidate box above its score threshold, the set NMS chose from."""
    saved = []
    for module in _modules(model):
        # The final NMS and box limit (RoIHeads, or an SSD's, RetinaNet's, FCOS's own), and a two-stage
        # detector's RPN: its NMS and proposal limit chose the proposals, and a near-tie there changes them.
        if hasattr(module, "detections_per_img"):
            changes = {"nms_thresh": 1.0, "detections_per_img": 10**6}
        elif isinstance(getattr(module, "_post_nms_top_n", None), dict):
            changes = {
                "nms_thresh": 1.0,
                "_pre_nms_top_n": {**module._pre_nms_top_n, "testing": 10**6},
                "_post_nms_top_n": {**module._post_nms_top_n, "testing": 10**6},
            }
        else:
            continue
        for name, value in changes.items():
            if hasattr(module, name):
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, value)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def match_boxes(
    eager: dict,
    other: dict,
    threshold: float,
    *,
    candidates: dict | None = None,
    other_candidates: dict | None = None,
) -> dict:
    """One image's parity: eager and onnxruntime outputs (boxes, labels, scores as tensors) compared box by
    box above `threshold` (see the module's docstring). `candidates` and `other_candidates`: each side's boxes
    before its NMS and box limit (without_suppression). NMS is deterministic on its candidates, so where the
    other side had a box before its NMS (same class, IoU >= SAME_CANDIDATE_IOU, score within SCORE_TOL) and
    only its NMS or box limit dropped it, the two sides differ in a near-tie's order, not in what they
    computed: named as a tie, not failed."""
    from torchvision.ops import box_iou

    keep_e, keep_o = eager["scores"] >= threshold, other["scores"] >= threshold
    boxes_e, labels_e, scores_e = eager["boxes"][keep_e], eager["labels"][keep_e], eager["scores"][keep_e]
    boxes_o, labels_o, scores_o = other["boxes"][keep_o], other["labels"][keep_o], other["scores"][keep_o]
    iou = _iou(box_iou, boxes_e, boxes_o)
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
            unmatched.append((e, _named("eager", boxes_e[e], labels_e[e], scores_e[e], best_iou)))
            continue
        taken.add(best)
        worst_iou = min(worst_iou, best_iou)
        worst_score = max(worst_score, abs(float(scores_e[e]) - float(scores_o[best])))
    extra = [
        (o, _named("onnxruntime", boxes_o[o], labels_o[o], scores_o[o], None))
        for o in range(len(boxes_o))
        if o not in taken
    ]
    for _, named in unmatched + extra:
        # A box whose score sits within tolerance of the threshold may fall either side of it: named, not
        # failed.
        if abs(named["score"] - threshold) <= SCORE_TOL:
            named["why"] = "at the score threshold"
    if candidates is not None and other_candidates is not None:
        _name_ties(
            unmatched,
            extra,
            (boxes_e, labels_e, scores_e),
            (boxes_o, labels_o, scores_o),
            candidates,
            other_candidates,
        )
    failing = [named for _, named in unmatched + extra if "why" not in named]
    for _, named in unmatched:
        if "why" not in named:
            worst_iou = min(worst_iou, named["best_iou"])
    listed = [named for _, named in unmatched + extra]
    return {
        "boxes": len(boxes_e),
        "boxes_onnxruntime": len(boxes_o),
        "worst_iou": round(worst_iou, 6),
        "max_score_diff": worst_score,
        "ties": sum(1 for named in listed if named.get("why", "").startswith("tie")),
        "extra": sorted(listed, key=lambda named: "why" in named)[:MAX_LISTED],  # the failing ones first
        "passed": not failing and worst_score <= SCORE_TOL,
    }


def _iou(box_iou, a, b) -> torch.Tensor:
    return box_iou(a, b) if len(a) and len(b) else torch.zeros(len(a), len(b))


def _name_ties(unmatched, extra, eager, other, candidates, other_candidates) -> None:
    """Name as a tie each unmatched box that the other side had before its NMS (match_boxes)."""
    from torchvision.ops import box_iou

    for found, (boxes, labels, scores), before, side in (
        (unmatched, eager, other_candidates, "onnxruntime"),
        (extra, other, candidates, "eager"),
    ):
        iou = _iou(box_iou, boxes, before["boxes"])
        for i, named in found:
            if "why" in named:
                continue
            had = (
                (before["labels"] == labels[i])
                & (iou[i] >= SAME_CANDIDATE_IOU)
                & ((before["scores"] - scores[i]).abs() <= SCORE_TOL)
            )
            if bool(had.any()):
                named["why"] = (
                    f"tie: {side} had this box before its NMS and box limits, which dropped it there only "
                    "(near-tied scores, or a proposal moved by a fraction of a pixel)"
                )


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


def box_parity(
    reference, path: Path, images: list, threshold: float, origin: str, ctx, *, exported, opset: int
) -> dict:
    """`reference` (the eager detector, or a quantize run's simulation) against onnxruntime running the file
    at `path`, image by image, box by box (match_boxes). `exported` (the module written to `path`) is written
    once more without its NMS and box limit, so onnxruntime's candidates can be read as the reference's
    are."""
    import tempfile

    detector = onnx_detector(path)
    per_image = []
    with tempfile.TemporaryDirectory(prefix="wb-parity-") as tmp, torch.no_grad():
        unsuppressed = Path(tmp) / "candidates.onnx"
        with without_suppression(exported):
            write_detector_onnx(exported, images[0], unsuppressed, opset)
        before = onnx_detector(unsuppressed)
        for k, image in enumerate(images):
            ctx.check_stop()
            eager = reference([image])[0]
            with without_suppression(reference):
                candidates = reference([image])[0]
            found = match_boxes(
                eager,
                detector([image])[0],
                threshold,
                candidates=candidates,
                other_candidates=before([image])[0],
            )
            per_image.append({"image": k, **found})
    return {
        "passed": all(row["passed"] for row in per_image),
        "method": "boxes",
        "score_threshold": threshold,
        "iou_min": IOU_MIN,
        "score_tol": SCORE_TOL,
        "inputs": origin,
        "images": per_image,
        "worst_iou": min(row["worst_iou"] for row in per_image),
        "max_score_diff": max(row["max_score_diff"] for row in per_image),
        "ties": sum(row["ties"] for row in per_image),
    }


def log_box_parity(ctx, parity: dict, reference: str) -> None:
    passed = parity["passed"]
    ctx.log(
        f"parity {'passed' if passed else 'FAILED'} ({reference} against onnxruntime): "
        f"{len(parity['images'])} image(s), boxes above score {parity['score_threshold']:g} matched with "
        f"worst IoU {parity['worst_iou']:.4f}, scores within {parity['max_score_diff']:.2e}"
        + (
            f"; {parity['ties']} box(es) on one side only that the other side had before its NMS (named as "
            "ties)"
            if parity.get("ties")
            else ""
        )
        + (
            ""
            if passed
            else "; " + "; ".join(str(row["extra"][:2]) for row in parity["images"] if not row["passed"])
        ),
        "info" if passed else "warning",
    )


def run_detection_export(spec, ctx, run=None) -> dict:
    """The `export.model` task for a detector (`run`: a detection training run's folder and spec; None: the
    detector model.name names): ONNX only (with its post-processing), parity by matching boxes."""
    if spec.format != "onnx":
        raise JobError(
            f"format: {spec.format} does not take a detector here yet; use format=onnx (the detector with "
            "its post-processing, parity checked box by box), or format=onnx_qdq with a quantize run of it"
        )
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
    parity = box_parity(model, out, images, threshold, origin, ctx, exported=model, opset=opset)
    log_box_parity(ctx, parity, "eager")
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
