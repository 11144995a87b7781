"""YOLO folders: images/ (or images/{train,val,test}/) with labels/ beside it holding one <image stem>.txt per
image of `class cx cy w h` lines normalised to the image size, and the class names from dataset.annotations or
root's data.yaml (`names:`), classes.txt or names.txt. Labels are the class index + 1. One line per bad
entry."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import JobError
from workbench.worker.data.detection.checks import Problems, clip_box
from workbench.worker.data.detection.records import Records

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
SPLITS = ("train", "val", "test")


def _names_from_yaml(path: Path) -> list[str]:
    """`names:` of a YOLO data.yaml: a list, or a {index: name} mapping (PyYAML is not needed for these)."""
    names, inside = {}, False
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("names:"):
            rest = stripped[len("names:") :].strip()
            if rest.startswith("["):
                return [n.strip().strip("'\"") for n in rest.strip("[]").split(",") if n.strip()]
            inside = True
            continue
        if inside:
            if not line.startswith((" ", "\t", "-")):
                break
            item = stripped.lstrip("- ").strip()
            if ":" in item:
                key, value = item.split(":", 1)
                names[int(key)] = value.strip().strip("'\"")
            elif item:
                names[len(names)] = item.strip("'\"")
    return [names[k] for k in sorted(names)]


def class_names(root: Path, annotations: str) -> list[str]:
    candidates = (
        [Path(annotations)] if annotations else [root / n for n in ("data.yaml", "classes.txt", "names.txt")]
    )
    for path in candidates:
        path = path if path.is_absolute() else (root / path if not path.exists() else path)
        if path.is_file():
            names = (
                _names_from_yaml(path)
                if path.suffix in (".yaml", ".yml")
                else [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
            )
            if names:
                return names
            raise JobError(f"dataset.annotations: {path} names no class")
    raise JobError(
        f"dataset.annotations: no class names for {root}; put data.yaml (names: [...]) or classes.txt there, "
        "or name the file in dataset.annotations"
    )


def read_yolo(root: Path, annotations: str, log) -> tuple[Records, dict[str, list[int]]]:
    """The images of a YOLO folder and its own splits (item indices by split; empty where it has none)."""
    names = class_names(root, annotations)
    images_root = root / "images"
    if not images_root.is_dir():
        raise JobError(f"dataset.root: {root} has no images/ folder (a YOLO set holds images/ and labels/)")
    splits = [s for s in SPLITS if (images_root / s).is_dir()]
    folders = [(s, images_root / s) for s in splits] or [("", images_root)]
    records = Records(classes=names, category_ids=list(range(1, len(names) + 1)), source=str(root))
    problems = Problems(log, "labels")
    by_split: dict[str, list[int]] = {}
    from PIL import Image

    for split, folder in folders:
        for file in sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES):
            with Image.open(file) as opened:
                width, height = map(float, opened.size)
            relative = file.relative_to(images_root).with_suffix(".txt")
            label_file = root / "labels" / relative
            boxes, labels = [], []
            lines = label_file.read_text(encoding="utf-8").splitlines() if label_file.is_file() else []
            for number, line in enumerate(lines, 1):
                parts = line.split()
                if not parts:
                    continue
                where = f"labels/{relative}: line {number}"
                try:
                    cls, cx, cy, w, h = int(parts[0]), *map(float, parts[1:5])
                except (ValueError, IndexError):
                    problems.say(f"{where} is not `class cx cy w h`; dropped")
                    continue
                if not 0 <= cls < len(names):
                    problems.say(f"{where}: class {cls} is not one of the {len(names)} names; dropped")
                    continue
                box = [
                    (cx - w / 2) * width,
                    (cy - h / 2) * height,
                    (cx + w / 2) * width,
                    (cy + h / 2) * height,
                ]
                kept = clip_box(box, width, height, where, problems)
                if kept is not None:
                    boxes.append(kept)
                    labels.append(cls + 1)
            if split:
                by_split.setdefault(split, []).append(len(records.items))
            records.add(len(records.items) + 1, file, width, height, boxes, labels)
    problems.finish()
    if not records.items:
        raise JobError(f"dataset.root: no image in {images_root}")
    return records, by_split
