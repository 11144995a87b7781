"""Try it's segmentation answer: the model's (1, classes, H, W) scores for one image as its predicted class
mask, each class's share of the pixels and, where the sample's true mask is known, that image's pixel accuracy
and IoU per class (computed as the evaluation computes them over a split). Worker side; never Qt.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from workbench.errors import JobError
from workbench.worker.objectives.segmentation import IGNORE_INDEX, class_map, iou_metrics

# A uint8 mask holds class ids 0..254; 255 marks pixels to ignore, as in the segmentation objective.
MAX_CLASSES = IGNORE_INDEX


def mask_of(scores: torch.Tensor) -> np.ndarray:
    """(H, W) uint8 class ids: the argmax over the classes of a (1, C, H, W) or (C, H, W) output."""
    if scores.dim() == 4:
        scores = scores[0]
    if scores.dim() != 3:
        raise JobError(
            f"the model's output has shape {tuple(scores.shape)}; a segmentation model returns "
            "(batch, classes, height, width) scores"
        )
    if scores.shape[0] > MAX_CLASSES:
        raise JobError(
            f"the model scores {scores.shape[0]} classes; Try it draws masks of at most {MAX_CLASSES}"
        )
    return np.ascontiguousarray(scores.argmax(dim=0).to(torch.uint8).numpy())


def shares(mask: np.ndarray, classes: list[str], count: int) -> list[dict]:
    """Each class's share of the mask's pixels, in class order (the legend's order), zero shares included."""
    pixels = np.bincount(mask.reshape(-1), minlength=count)[:count]
    total = max(int(mask.size), 1)
    return [
        {
            "class": k,
            "label": classes[k] if k < len(classes) else str(k),
            "share": float(pixels[k]) / total,
            "pixels": int(pixels[k]),
        }
        for k in range(count)
    ]


def true_mask(target) -> np.ndarray | None:
    """A sample's target as a (H, W) uint8 mask (out-of-range labels as IGNORE_INDEX), or None when it is not
    one."""
    if not isinstance(target, torch.Tensor) or target.is_floating_point():
        return None
    mask = class_map(target[None])[0] if target.dim() in (2, 3) else None
    if mask is None or mask.dim() != 2:
        return None
    mask = torch.where((mask >= 0) & (mask < MAX_CLASSES), mask, torch.full_like(mask, IGNORE_INDEX))
    return np.ascontiguousarray(mask.to(torch.uint8).numpy())


def scores_against(predicted: np.ndarray, truth: np.ndarray, classes: list[str], count: int) -> dict:
    """This image's pixel accuracy, mIoU and per-class IoU (None for a class in neither mask), ignored pixels
    left out; the same formulas as the test split's evaluation."""
    if predicted.shape != truth.shape:
        return {
            "note": f"the true mask is {truth.shape[1]}x{truth.shape[0]}, the prediction "
            f"{predicted.shape[1]}x{predicted.shape[0]}: not compared"
        }
    valid = truth < count
    cells = truth[valid].astype(np.int64) * count + predicted[valid].astype(np.int64)
    confusion = torch.from_numpy(
        np.bincount(cells, minlength=count * count)[: count * count].reshape(count, count)
    )
    summary, ious = iou_metrics(confusion)

    def number(value: float):
        return None if math.isnan(value) else float(value)

    return {
        "pixel_accuracy": number(summary["pixel_acc"]),
        "miou": number(summary["miou"]),
        "iou": [
            {"class": k, "label": classes[k] if k < len(classes) else str(k), "iou": number(v)}
            for k, v in enumerate(ious)
        ],
    }


def segmentation_answer(scores: torch.Tensor, classes: list[str], truth: np.ndarray | None) -> dict:
    """{"mask", "shares", and with a true mask "scores"} for one model's output on one image."""
    mask = mask_of(scores)
    count = int(scores.shape[-3])
    answer = {"mask": mask, "shares": shares(mask, classes, count)}
    if truth is not None:
        answer["scores"] = scores_against(mask, truth, classes, count)
    return answer


__all__ = ["mask_of", "scores_against", "segmentation_answer", "shares", "true_mask"]
