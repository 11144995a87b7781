"""Try it on a detection run: the detector's boxes for one image file or dataset sample, as rows a table reads
(class, score, box) and as the image with the boxes above the score drawn in their class colours. Worker side;
never imports Qt."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

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


def run_detection_predict(spec, ctx, trained, run_dir) -> dict:
    """The predict.model query for a detection training run."""
    from workbench.worker.detection_source import load_detection_run
    from workbench.worker.devices import resolve_device

    device = resolve_device(spec.device)
    source = load_detection_run(run_dir, trained, ctx, device)
    model, dataset, checkpoint = source.model, source.dataset, source.checkpoint
    image, info, truth = _image(spec, dataset)
    with torch.no_grad():
        out = model([image.to(device)])[0]
    classes = list(dataset.classes)
    rows = []
    for box, label, score in zip(out["boxes"].tolist(), out["labels"].tolist(), out["scores"].tolist()):
        name = classes[label - 1] if 1 <= label <= len(classes) else str(label)
        rows.append({"class": label, "label": name, "probability": score, "box": [round(v, 1) for v in box]})
    pixels = (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).cpu().numpy()
    shown = [r for r in rows if r["probability"] >= SCORE]
    preview = np.asarray(
        draw_boxes(
            Image.fromarray(pixels),
            [r["box"] for r in shown],
            [r["class"] for r in shown],
            classes,
            1.0,
            True,
        )
    )
    result = {
        "run": run_dir.name,
        "run_kind": "training",
        "model": trained.model.name,
        "dataset": trained.dataset.name,
        "task": "detection",
        "device": str(device),
        "input": info,
        "notes": [f"{len(rows)} box(es); those scoring {SCORE:g} or more are drawn"],
        "checkpoint": str(checkpoint),
        "predictions": rows,
        "score_threshold": SCORE,
    }
    if truth is not None:
        result["truth"] = truth
    if spec.preview:
        result["preview"] = preview
    ctx.log(
        f"{len(rows)} box(es), {len(shown)} scoring {SCORE:g} or more"
        + (": " + ", ".join(f"{r['label']} {r['probability']:.2f}" for r in shown[:5]) if shown else "")
    )
    return result
