"""COCO instances JSON: the images, their boxes (x, y, w, h turned into x1, y1, x2, y2) and categories mapped
to labels 1..K in sorted id order (0 is the background, as torchvision's detectors count), with one line per
bad entry."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.errors import JobError
from workbench.worker.data.detection.checks import Problems, clip_box
from workbench.worker.data.detection.records import Records


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise JobError(f"dataset.annotations: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise JobError(f"dataset.annotations: {path} is not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise JobError(f'dataset.annotations: {path} is not a COCO instances file (no "images" list)')
    for key in ("annotations", "categories"):
        if not isinstance(data.get(key, []), list):
            raise JobError(f'dataset.annotations: {path}: "{key}" is not a list')
    return data


def read_coco(images_dir: Path, path: Path, log) -> Records:
    """The usable images of a COCO file whose images lie in `images_dir`. Missing images, unknown categories,
    zero-area boxes and boxes outside their image are said (one line each) and left out or clipped."""
    data = _load(path)
    problems = Problems(log, path.name)
    categories = sorted(
        (c for c in data.get("categories", []) if isinstance(c, dict) and isinstance(c.get("id"), int)),
        key=lambda c: c["id"],
    )
    if not categories:
        raise JobError(f"dataset.annotations: {path} has no categories; a detection set needs at least one")
    label_of = {c["id"]: k + 1 for k, c in enumerate(categories)}
    records = Records(
        classes=[str(c.get("name", c["id"])) for c in categories],
        category_ids=[c["id"] for c in categories],
        source=str(path),
    )
    by_image: dict[int, list[dict]] = {}
    for k, ann in enumerate(data.get("annotations", [])):
        if isinstance(ann, dict):
            by_image.setdefault(ann.get("image_id"), []).append({**ann, "_index": k})
    for image in data["images"]:
        if not isinstance(image, dict) or "id" not in image or "file_name" not in image:
            problems.say(f"images entry {image!r:.80} has no id or file_name; skipped")
            continue
        file = images_dir / str(image["file_name"])
        if not file.is_file():
            problems.say(f"image {image['id']}: {file} does not exist; skipped with its boxes")
            continue
        width, height = float(image.get("width") or 0), float(image.get("height") or 0)
        if width <= 0 or height <= 0:
            from PIL import Image

            with Image.open(file) as opened:
                width, height = map(float, opened.size)
        boxes, labels = [], []
        for ann in by_image.get(image["id"], []):
            where = f"annotation {ann.get('id', ann['_index'])} (image {image['id']}, {image['file_name']})"
            if ann.get("iscrowd"):
                continue  # crowd regions are ignored in training and evaluation alike, as COCO does
            if ann.get("category_id") not in label_of:
                problems.say(
                    f"{where}: category {ann.get('category_id')!r} is not in the categories; dropped"
                )
                continue
            bbox = ann.get("bbox")
            if not isinstance(bbox, list) or len(bbox) != 4:
                problems.say(f"{where}: bbox {bbox!r} is not [x, y, w, h]; dropped")
                continue
            x, y, w, h = map(float, bbox)
            box = clip_box([x, y, x + w, y + h], width, height, where, problems)
            if box is not None:
                boxes.append(box)
                labels.append(label_of[ann["category_id"]])
        records.add(int(image["id"]), file, width, height, boxes, labels)
    problems.finish()
    if not records.items:
        raise JobError(f"dataset: {path} lists no image found under {images_dir}; check dataset.root")
    return records
