"""What the Data tab shows of a detection set: its summary (images per split, objects per class, boxes per
image, box sizes), pages of thumbnails with each box drawn in its class colour, and one image large with its
boxes and class names. Worker side; never imports Qt."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image, ImageDraw

from workbench.errors import JobError

# One colour per class label (1..K) in turn: the window's run hues.
COLOURS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75))


def colour(label: int) -> tuple[int, int, int]:
    return COLOURS[(max(int(label), 1) - 1) % len(COLOURS)]


def _histogram(values: list[float], bins: int = 20) -> dict:
    if not values:
        return {"edges": [], "counts": []}
    counts, edges = np.histogram(np.asarray(values, dtype=np.float64), bins=bins)
    return {"edges": edges.tolist(), "counts": counts.astype(int).tolist()}


def summary(dataset) -> dict:
    """data.info of a detection set: the summary the Data tab shows and its three histograms."""
    from workbench.worker.data.user_views import class_histogram

    items = dataset.splits["train"].items
    per_class = [0] * len(dataset.classes)
    per_image, sizes = [], []
    for item in items:
        per_image.append(len(item.boxes))
        for (x1, y1, x2, y2), label in zip(item.boxes, item.labels):
            per_class[int(label) - 1] += 1
            sizes.append(math.sqrt(max((x2 - x1) * (y2 - y1), 0.0)))
    counts = {name: len(split) for name, split in dataset.splits.items()}
    first, target = dataset.first_sample()
    # The images' channel statistics from a few of them (the detectors normalise with their own)
    pixels = np.concatenate([_rgb(item.file).reshape(-1, 3) for item in items[:16]]) / 255.0
    return {
        "tasks": {
            "auto": "detection",
            "why": "the target is a dict of boxes and labels (torchvision's detection target)",
            "unavailable": {
                task: f"task={task}, but the targets are boxes and labels: set task=detection or task=auto"
                for task in ("classification", "multilabel", "regression", "segmentation")
            },
        },
        "target_histogram": class_histogram(dataset.classes, per_class, len(items), len(items)),
        "dataset": dataset.name,
        "classes": list(dataset.classes),
        "num_samples": counts,
        "class_counts": {"train": per_class},
        "sample_shape": list(first.shape),
        "mean": pixels.mean(axis=0).tolist(),
        "std": pixels.std(axis=0).tolist(),
        "root": dataset.root,
        "in_memory": False,
        "skipped_files": [],
        "detection": {
            "objects_per_class": dict(zip(dataset.classes, per_class)),
            "boxes_per_image": _histogram(per_image, bins=max(1, min(20, max(per_image, default=0) + 1))),
            "box_sizes": _histogram(sizes),
            "boxes": int(sum(per_class)),
        },
    }


def _rgb(path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def draw_boxes(
    image: Image.Image, boxes, labels, classes: list[str], scale: float, names: bool
) -> Image.Image:
    """`image` with each box (scaled by `scale`) outlined in its class colour, and with `names` its class
    name at its corner."""
    draw = ImageDraw.Draw(image)
    width = max(1, round(2 * scale)) if names else 1
    for (x1, y1, x2, y2), label in zip(boxes, labels):
        box = [x1 * scale, y1 * scale, x2 * scale - 1, y2 * scale - 1]
        draw.rectangle(box, outline=colour(label), width=width)
        if names and 1 <= label <= len(classes):
            draw.text((box[0] + 2, box[1] + 1), classes[label - 1], fill=colour(label))
    return image


def page(dataset, split_name: str, offset: int, count: int, thumb_size: int, request_id: int, ctx) -> dict:
    """A page of square thumbnails (n, T, T, 3) with the boxes drawn; each thumbnail's "label" is the class
    (0-based) it holds most boxes of, -1 for none."""
    split = dataset.splits[split_name]
    total = len(split)
    chosen = list(range(min(offset, total), min(offset + count, total)))
    images, labels = [], []
    for index in chosen:
        ctx.check_stop()
        item = split.items[index]
        with Image.open(item.file) as opened:
            image = opened.convert("RGB")
        scale = thumb_size / max(image.size)
        image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))))
        canvas = Image.new("RGB", (thumb_size, thumb_size))
        canvas.paste(draw_boxes(image, item.boxes, item.labels, dataset.classes, scale, names=False), (0, 0))
        images.append(np.asarray(canvas, dtype=np.uint8))
        most = np.bincount(np.asarray(item.labels, dtype=np.int64)).argmax() - 1 if item.labels else -1
        labels.append(int(most))
    stacked = np.stack(images) if images else np.zeros((0, thumb_size, thumb_size, 3), dtype=np.uint8)
    return {
        "request_id": request_id,
        "split": split_name,
        "offset": offset,
        "total": total,
        "indices": chosen,
        "labels": labels,
        "images": stacked,
        "boxes": [
            {
                "boxes": split.items[i].boxes,
                "labels": split.items[i].labels,
                "width": split.items[i].width,
                "height": split.items[i].height,
            }
            for i in chosen
        ],
    }


def sample(dataset, split_name: str, index: int) -> dict:
    """One image large with its boxes and class names drawn, and the boxes as numbers."""
    import torch

    from workbench.worker.data.imageops import histogram

    split = dataset.splits[split_name]
    if index >= len(split):
        raise JobError(
            f"index: {index} is out of range; the {split_name} split of {dataset.name} has {len(split)} "
            f"images (0..{len(split) - 1})"
        )
    item = split.items[index]
    with Image.open(item.file) as opened:
        raw = opened.convert("RGB")
    scale = max(1.0, 256 / max(raw.size))  # small images drawn larger, so class names stay readable
    image = raw.resize((round(raw.width * scale), round(raw.height * scale)), Image.NEAREST)
    drawn = np.asarray(
        draw_boxes(image, item.boxes, item.labels, dataset.classes, scale, names=True), dtype=np.uint8
    )
    counts = {}
    for label in item.labels:
        counts[dataset.classes[label - 1]] = counts.get(dataset.classes[label - 1], 0) + 1
    names = ", ".join(f"{n} {name}" for name, n in counts.items()) or "no objects"
    plain = np.asarray(raw, dtype=np.uint8)
    first = int(item.labels[0]) - 1 if item.labels else 0
    return {
        "index": index,
        "split": split_name,
        "label": first,
        "class_name": f"{len(item.boxes)} box(es): {names}",
        "shape": [3, int(item.height), int(item.width)],
        "image": drawn,
        "augmented": drawn,
        "histogram": histogram(torch.from_numpy(plain.copy()).permute(2, 0, 1)),
        "path": str(item.file),
        "boxes": {"boxes": item.boxes, "labels": item.labels},
        "mean": (plain.reshape(-1, 3).mean(axis=0) / 255).tolist(),
        "std": (plain.reshape(-1, 3).std(axis=0) / 255).tolist(),
    }
