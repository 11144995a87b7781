"""Pascal VOC folders: Annotations/<id>.xml (size, objects with name, bndbox and difficult), JPEGImages/, and
ImageSets/Main/{train,val,trainval,test}.txt naming each split's images where the folder has them. Classes are
the object names found, sorted; labels 1..K. One line per bad entry, as for COCO."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from workbench.errors import JobError
from workbench.worker.data.detection.checks import Problems, clip_box
from workbench.worker.data.detection.records import Records

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")


def _number(node, tag: str) -> float:
    found = node.find(tag)
    if found is None or found.text is None:
        raise ValueError(f"no <{tag}>")
    return float(found.text)


def split_ids(root: Path) -> dict[str, list[str]]:
    """{split: image ids} from ImageSets/Main, where it defines them ("trainval" is train when no train)."""
    folder = root / "ImageSets" / "Main"
    found = {}
    for split, names in (
        ("train", ("train.txt", "trainval.txt")),
        ("val", ("val.txt",)),
        ("test", ("test.txt",)),
    ):
        for name in names:
            if (folder / name).is_file():
                found[split] = [
                    line.split()[0] for line in (folder / name).read_text().splitlines() if line.strip()
                ]
                break
    return found


def read_voc(root: Path, log) -> tuple[Records, dict[str, list[str]]]:
    """The usable images of a VOC folder, and its own splits (image ids by split; empty where it has none)."""
    annotations = root / "Annotations"
    if not annotations.is_dir():
        raise JobError(
            f"dataset.root: {root} has no Annotations/ folder; a VOC folder holds Annotations/, "
            "JPEGImages/ and ImageSets/Main/"
        )
    problems = Problems(log, "Annotations")
    parsed = []
    for path in sorted(annotations.glob("*.xml")):
        try:
            tree = ET.parse(path).getroot()
        except ET.ParseError as exc:
            problems.say(f"{path.name}: not XML ({exc}); skipped")
            continue
        parsed.append((path, tree))
    names = sorted({(o.findtext("name") or "").strip() for _, t in parsed for o in t.iter("object")} - {""})
    if not names:
        raise JobError(f"dataset.root: no object in {annotations}; a detection set needs at least one box")
    label_of = {name: k + 1 for k, name in enumerate(names)}
    records = Records(classes=names, category_ids=list(range(1, len(names) + 1)), source=str(root))
    images = root / "JPEGImages"
    for number, (path, tree) in enumerate(parsed):
        stem = path.stem
        file = next(
            (images / f"{stem}{s}" for s in IMAGE_SUFFIXES if (images / f"{stem}{s}").is_file()), None
        )
        if file is None:
            problems.say(f"{path.name}: its image {stem}.jpg is not in {images}; skipped with its boxes")
            continue
        size = tree.find("size")
        try:
            width, height = _number(size, "width"), _number(size, "height")
        except (ValueError, AttributeError):
            from PIL import Image

            with Image.open(file) as opened:
                width, height = map(float, opened.size)
        boxes, labels = [], []
        for k, obj in enumerate(tree.iter("object")):
            name = (obj.findtext("name") or "").strip()
            where = f"{path.name}: object {k} ({name or 'no name'})"
            box = obj.find("bndbox")
            try:
                coords = [_number(box, t) for t in ("xmin", "ymin", "xmax", "ymax")]
            except (ValueError, AttributeError):
                problems.say(f"{where} has no complete <bndbox>; dropped")
                continue
            # VOC counts pixels from 1: to 0-based pixel edges as torchvision's boxes are
            kept = clip_box(
                [coords[0] - 1, coords[1] - 1, coords[2], coords[3]], width, height, where, problems
            )
            if kept is not None:
                boxes.append(kept)
                labels.append(label_of[name])
        records.add(number + 1, file, width, height, boxes, labels)
    problems.finish()
    if not records.items:
        raise JobError(f"dataset.root: no annotated image of {root} was found in {images}")
    return records, split_ids(root)
