"""How far two detectors' boxes agree (a quantized detector's against its FP32 one): each box of the first
scoring at least a threshold matched to the unmatched box of the same class in the second with the highest
IoU. Plain numpy, so the worker's Try it answer and the window's score slider count alike."""

from __future__ import annotations

import numpy as np

MATCH_IOU = 0.5  # two boxes of the same class overlapping this much are the same object


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` [N, 4] with every box of `b` [M, 4] (x1, y1, x2, y2)."""
    a, b = np.asarray(a, dtype=float).reshape(-1, 4), np.asarray(b, dtype=float).reshape(-1, 4)
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(axis=2)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def agreement(first: list[dict], second: list[dict], threshold: float, iou_min: float = MATCH_IOU) -> dict:
    """Rows ({class, probability, box}, best first) of two detectors at score `threshold`: how many of the
    first's boxes the second finds, and their mean IoU."""
    a = [r for r in first if r["probability"] >= threshold]
    b = [r for r in second if r["probability"] >= threshold]
    iou = iou_matrix([r["box"] for r in a], [r["box"] for r in b])
    taken: set[int] = set()
    matched: list[float] = []
    for i, row in enumerate(a):
        same = [(iou[i, j], j) for j in range(len(b)) if j not in taken and b[j]["class"] == row["class"]]
        best, j = max(same, default=(0.0, None))
        if j is not None and best >= iou_min:
            taken.add(j)
            matched.append(float(best))
    return {
        "fp32": len(a),
        "quantized": len(b),
        "matched": len(matched),
        "iou_min": iou_min,
        "score_threshold": threshold,
        "mean_iou": round(sum(matched) / len(matched), 4) if matched else None,
    }
