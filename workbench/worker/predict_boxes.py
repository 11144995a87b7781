"""Try it on a detection run: the detector's boxes for one image file or dataset sample, as rows a table reads
(class, score, box) and as the image with the boxes above the score drawn in their class colours; for a
detection quantize run the quantized detector's beside the FP32 one's. Worker side; never imports Qt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

from workbench.box_agreement import agreement
from workbench.errors import JobError
from workbench.worker.data.detection.views import draw_boxes

SCORE = 0.5  # boxes drawn on the preview; every box above the model's own threshold is listed


def _image(spec, dataset) -> tuple[torch.Tensor, dict, dict | None]:
    """(float [3, H, W] in 0..1, what it is, the sample's true boxes or None)."""
    if spec.input:
        path = Path(spec.input).expanduser()
        try:
            with Image.open(path) as opened:
                pixels = np.asarray(opened.convert("RGB"), dtype=np.uint8)
        except (OSError, ValueError) as exc:
            raise JobError(f"input: {path} is not an image this can read ({exc})") from None
        image = torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255)
        info = {
            "kind": "file",
            "path": str(path),
            "size": [pixels.shape[1], pixels.shape[0]],
            "channels": 3,
            "model_size": [pixels.shape[0], pixels.shape[1]],
        }
        return image, info, None
    split_name, index = spec.sample.split, spec.sample.index
    if split_name not in dataset.splits:
        raise JobError(f"sample.split: {split_name!r} is not a split; choose train, val or test")
    split = dataset.splits[split_name]
    if index >= len(split):
        raise JobError(
            f"sample.index: {index} is past the end of the {split_name} split ({len(split):,} images: 0 to "
            f"{len(split) - 1})"
        )
    image, target = split[index]
    info = {
        "kind": "sample",
        "split": split_name,
        "index": index,
        "channels": 3,
        "model_size": [int(image.shape[1]), int(image.shape[2])],
    }
    truth = {"boxes": target["boxes"].tolist(), "labels": target["labels"].tolist()}
    return image, info, truth


def _rows(model, image: torch.Tensor, device, classes: list[str]) -> list[dict]:
    """The detector's boxes for one image, best first: {class, label, probability, box}."""
    with torch.no_grad():
        out = model([image.to(device)])[0]
    rows = []
    for box, label, score in zip(out["boxes"].tolist(), out["labels"].tolist(), out["scores"].tolist()):
        name = classes[label - 1] if 1 <= label <= len(classes) else str(label)
        rows.append({"class": label, "label": name, "probability": score, "box": [round(v, 1) for v in box]})
    return rows


def _pixels(image: torch.Tensor) -> np.ndarray:
    """A float [3, H, W] image in 0..1 as uint8 H x W x 3."""
    return (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()


def _drawn(image: torch.Tensor, rows: list[dict], classes: list[str]) -> np.ndarray:
    """The image (uint8 H x W x 3) with the boxes scoring SCORE or more drawn in their class colours."""
    pixels = _pixels(image)
    shown = [r for r in rows if r["probability"] >= SCORE]
    return np.asarray(
        draw_boxes(
            Image.fromarray(pixels),
            [r["box"] for r in shown],
            [r["class"] for r in shown],
            classes,
            1.0,
            True,
        )
    )


def _said(rows: list[dict]) -> str:
    shown = [r for r in rows if r["probability"] >= SCORE]
    return f"{len(rows)} box(es), {len(shown)} scoring {SCORE:g} or more" + (
        ": " + ", ".join(f"{r['label']} {r['probability']:.2f}" for r in shown[:5]) if shown else ""
    )


def run_detection_predict(spec, ctx, trained, run_dir) -> dict:
    """The predict.model query for a detection training run."""
    from workbench.worker.detection_source import load_detection_run
    from workbench.worker.devices import resolve_device

    device = resolve_device(spec.device)
    source = load_detection_run(run_dir, trained, ctx, device)
    model, dataset, checkpoint = source.model, source.dataset, source.checkpoint
    image, info, truth = _image(spec, dataset)
    classes = list(dataset.classes)
    rows = _rows(model, image, device, classes)
    result = {
        "run": run_dir.name,
        "run_kind": "training",
        "model": trained.model.name,
        "dataset": trained.dataset.name,
        "task": "detection",
        "device": str(device),
        "input": info,
        "notes": [f"{len(rows)} box(es) above the detector's own score threshold"],
        "checkpoint": str(checkpoint),
        "predictions": rows,
        "score_threshold": SCORE,
    }
    if truth is not None:
        result["truth"] = truth
    if spec.preview:
        result["preview"] = _drawn(image, rows, classes)
        result["image"] = _pixels(image)  # the window draws the boxes over it at its own score threshold
    ctx.log(_said(rows))
    return result


def run_detection_quant_predict(spec, ctx, run) -> dict:
    """The predict.model query for a detection quantize run (a QuantRun): the quantized detector's boxes
    beside the FP32 one's, on the CPU where the run's simulation runs, and how far they agree."""
    from workbench.worker.detection_source import load_detection_quant

    ctx.progress(0, 3, "rebuilding the quantized detector", force=True)
    loaded = load_detection_quant(run, ctx)
    image, info, truth = _image(spec, loaded.dataset)
    classes = list(loaded.dataset.classes)
    ctx.check_stop()
    ctx.progress(1, 3, "predicting with the quantized detector", force=True)
    quantized = _rows(loaded.sim, image, "cpu", classes)
    notes: list[str] = []
    fp32 = None
    if loaded.fp32 is not None:
        ctx.check_stop()
        ctx.progress(2, 3, "predicting with the FP32 detector", force=True)
        fp32 = _rows(loaded.fp32, image, "cpu", classes)
    else:
        notes.append(
            f"the FP32 checkpoint that quantize run {run.id} started from is gone, so only the quantized "
            "detector's boxes are shown"
        )
        ctx.log(notes[-1], "warning")
    result = {
        "run": run.id,
        "run_kind": "quantize",
        "model": run.train.model.name,
        "dataset": run.dataset.name,
        "task": "detection",
        "device": "cpu",
        "input": info,
        "notes": notes,
        "predictions": quantized,
        "quantized": quantized,
        "fp32": fp32,
        "score_threshold": SCORE,
    }
    if loaded.checkpoint is not None:
        result["checkpoint"] = str(loaded.checkpoint)
    if fp32 is not None:
        result["agreement"] = agreement(fp32, quantized, SCORE)
    if truth is not None:
        result["truth"] = truth
    if spec.preview:
        result["image"] = _pixels(image)
        result["preview"] = _drawn(image, quantized, classes)
        result["previews"] = {"quantized": result["preview"]}
        if fp32 is not None:
            result["previews"]["fp32"] = _drawn(image, fp32, classes)
    ctx.log(
        f"quantized: {_said(quantized)}"
        + (f"; FP32: {_said(fp32)}; {_agreement_text(result['agreement'])}" if fp32 is not None else "")
    )
    ctx.progress(3, 3, "done", force=True)
    return result


def _agreement_text(found: dict) -> str:
    return (
        f"{found['matched']} of {found['fp32']} FP32 box(es) matched by a quantized box of the same class at "
        f"IoU >= {found['iou_min']:g}"
    )
