"""A small COCO-format detection set of coloured shapes (squares, circles, triangles) on noise, written as
PNGs and an instances JSON: the bundled offline example and the tests' data. Deterministic for a seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

SHAPES = ("square", "circle", "triangle")
COLOURS = ((230, 60, 50), (60, 170, 80), (60, 90, 220))


def _place(rng: np.random.Generator, size: int, taken: list[tuple[int, int, int, int]]):
    """A box of side 18..48 pixels inside the image that overlaps no box already placed (None after 50
    tries)."""
    for _ in range(50):
        side = int(rng.integers(18, 49))
        x1, y1 = int(rng.integers(0, size - side)), int(rng.integers(0, size - side))
        box = (x1, y1, x1 + side, y1 + side)
        if all(box[2] <= t[0] or t[2] <= box[0] or box[3] <= t[1] or t[3] <= box[1] for t in taken):
            return box
    return None


def _draw(draw: ImageDraw.ImageDraw, shape: str, box: tuple[int, int, int, int], colour) -> None:
    x1, y1, x2, y2 = box
    if shape == "square":
        draw.rectangle((x1, y1, x2 - 1, y2 - 1), fill=colour)
    elif shape == "circle":
        draw.ellipse((x1, y1, x2 - 1, y2 - 1), fill=colour)
    else:
        draw.polygon(((x1 + x2) / 2, y1, x2 - 1, y2 - 1, x1, y2 - 1), fill=colour)


def write_shapes_coco(
    folder: str | Path, n_images: int = 64, seed: int = 0, size: int = 128, category_ids=(1, 2, 3)
) -> tuple[Path, Path]:
    """Write `n_images` PNGs of 1-4 shapes each into folder/images and their annotations into
    folder/instances.json (categories square, circle, triangle with ids `category_ids`; boxes x, y, w, h tight
    around each shape). Returns (images folder, JSON path)."""
    folder = Path(folder)
    images_dir = folder / "images"
    images_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for index in range(n_images):
        pixels = rng.integers(0, 90, size=(size, size, 3), dtype=np.uint8)
        image = Image.fromarray(pixels, "RGB")
        draw = ImageDraw.Draw(image)
        taken: list[tuple[int, int, int, int]] = []
        for _ in range(int(rng.integers(1, 5))):
            box = _place(rng, size, taken)
            if box is None:
                continue
            taken.append(box)
            kind = int(rng.integers(0, len(SHAPES)))
            _draw(draw, SHAPES[kind], box, COLOURS[kind])
            x1, y1, x2, y2 = box
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": index + 1,
                    "category_id": int(category_ids[kind]),
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": (x2 - x1) * (y2 - y1),
                    "iscrowd": 0,
                }
            )
        name = f"shapes_{index:04d}.png"
        image.save(images_dir / name)
        images.append({"id": index + 1, "file_name": name, "width": size, "height": size})
    categories = [{"id": int(i), "name": name} for i, name in zip(category_ids, SHAPES)]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return images_dir, path
