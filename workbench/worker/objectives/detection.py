"""Object detection's objective: the monitor is COCO mAP@[.5:.95] ("mAP", higher is better), computed by
pycocotools from COCO-format ground truth and predictions (never by hand), with mAP@.5, mAP@.75, AR@100, AP
per class and each class's precision-recall curve at IoU .5. Worker side; never imports Qt."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np

from workbench.worker.objectives.base import json_safe

MONITOR, MONITOR_LABEL = "map", "mAP"
METRICS = ("map", "map_50", "map_75", "mar_100")  # COCOeval's stats 0, 1, 2 and 8
LOSS_NAME = "detector"  # the detector's own loss dict, summed


class DetectionObjective:
    """What the window, the ladders and the result read of a detection run: its monitor and direction. The
    losses are the detector's own (its train-mode forward returns them), so there is no loss function here.
    """

    task = "detection"
    monitor = MONITOR
    monitor_label = MONITOR_LABEL
    higher_is_better = True
    loss_name = LOSS_NAME
    num_outputs = 0

    def __init__(self, *, loss_name: str = LOSS_NAME, num_outputs: int = 0, label_smoothing: float = 0.0):
        self.num_outputs = int(num_outputs)

    def arrow(self) -> str:
        return "↑"

    def monitor_text(self, prefix: str = "val") -> str:
        return f"{prefix} {self.monitor_label} ↑".strip()

    def describe(self) -> str:
        return f"detection: the detector's own losses, monitor {self.monitor_text()} (COCO, pycocotools)"


def ground_truth(items, classes: list[str], category_ids: list[int]) -> dict:
    """A COCO dataset dict of `items` (records.Item: image id, size, boxes x1, y1, x2, y2, labels 1..K)."""
    images, annotations = [], []
    for item in items:
        images.append({"id": int(item.image_id), "width": item.width, "height": item.height})
        for box, label in zip(item.boxes, item.labels):
            x1, y1, x2, y2 = map(float, box)
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": int(item.image_id),
                    "category_id": int(category_ids[int(label) - 1]),
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": (x2 - x1) * (y2 - y1),
                    "iscrowd": 0,
                }
            )
    categories = [{"id": int(i), "name": name} for i, name in zip(category_ids, classes)]
    return {"images": images, "annotations": annotations, "categories": categories}


def predictions(image_ids: list[int], outputs: list[dict], category_ids: list[int]) -> list[dict]:
    """COCO results (image_id, category_id, bbox x, y, w, h, score) of a detector's eval outputs."""
    results = []
    for image_id, out in zip(image_ids, outputs):
        boxes = out["boxes"].detach().cpu().double().tolist()
        labels = out["labels"].detach().cpu().tolist()
        scores = out["scores"].detach().cpu().double().tolist()
        for (x1, y1, x2, y2), label, score in zip(boxes, labels, scores):
            if not 1 <= int(label) <= len(category_ids):
                continue  # a background or unknown label: no category to name
            results.append(
                {
                    "image_id": int(image_id),
                    "category_id": int(category_ids[int(label) - 1]),
                    "bbox": [round(x1, 3), round(y1, 3), round(x2 - x1, 3), round(y2 - y1, 3)],
                    "score": round(float(score), 5),
                }
            )
    return results


def _coco(dataset: dict):
    from pycocotools.coco import COCO

    with contextlib.redirect_stdout(io.StringIO()):  # it prints; the CLI's stdout carries only JSON
        coco = COCO()
        # pycocotools marks the annotations it reads ("ignore"): its own copies of them, ours stay as written
        coco.dataset = {**dataset, "annotations": [dict(a) for a in dataset["annotations"]]}
        coco.createIndex()
    return coco


def evaluate(gt: dict, results: list[dict], classes: list[str]) -> dict:
    """{"metrics": {map, map_50, map_75, mar_100}, "per_class": [...], "pr": {class: {recall, precision}}}
    by pycocotools' COCOeval (bbox). No prediction at all: every figure 0."""
    from pycocotools.cocoeval import COCOeval

    metrics = dict.fromkeys(METRICS, 0.0)
    per_class = [{"class": name, "ap": 0.0, "ap_50": 0.0, "count": 0} for name in classes]
    counts: dict[int, int] = {}
    for ann in gt["annotations"]:
        counts[ann["category_id"]] = counts.get(ann["category_id"], 0) + 1
    ids = [c["id"] for c in gt["categories"]]
    for row, cat in zip(per_class, ids):
        row["count"] = counts.get(cat, 0)
    recall = np.linspace(0.0, 1.0, 101)
    pr = {name: {"recall": recall.tolist(), "precision": [0.0] * 101} for name in classes}
    if not results or not gt["annotations"]:
        return {"metrics": metrics, "per_class": per_class, "pr": pr}
    coco = _coco(gt)
    with contextlib.redirect_stdout(io.StringIO()):
        detections = coco.loadRes([dict(r) for r in results])  # it adds area and id to each
        run = COCOeval(coco, detections, "bbox")
        run.evaluate()
        run.accumulate()
        run.summarize()
    stats = run.stats
    metrics.update(map=_num(stats[0]), map_50=_num(stats[1]), map_75=_num(stats[2]), mar_100=_num(stats[8]))
    precision = run.eval["precision"]  # [IoU 10, recall 101, class K, area 4, max dets 3]
    for k, (row, name) in enumerate(zip(per_class, classes)):
        every = precision[:, :, k, 0, 2]
        at_50 = precision[0, :, k, 0, 2]
        row["ap"] = _mean(every)
        row["ap_50"] = _mean(at_50)
        pr[name]["precision"] = [float(max(p, 0.0)) for p in at_50]
    return json_safe({"metrics": metrics, "per_class": per_class, "pr": pr})


def _num(value) -> float:
    """COCOeval's -1 (no ground truth for that figure) reads as 0."""
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else 0.0


def _mean(values: np.ndarray) -> float:
    kept = values[values > -1]
    return float(kept.mean()) if kept.size else 0.0
