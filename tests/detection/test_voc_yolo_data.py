"""VOC and YOLO folders written by the test: boxes in pixels (VOC's 1-based corners, YOLO's normalised
centres), classes from the files, the splits the folders define (the missing ones carved by the seeded
splitter), and one line per bad entry naming the file."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data.loader import load_dataset

VOC_XML = (
    "<annotation><filename>{id}.jpg</filename>"
    "<size><width>64</width><height>48</height><depth>3</depth></size>\n{objects}</annotation>"
)
VOC_OBJECT = (
    "<object><name>{name}</name><difficult>0</difficult><bndbox><xmin>{x1}</xmin><ymin>{y1}</ymin>"
    "<xmax>{x2}</xmax><ymax>{y2}</ymax></bndbox></object>"
)


class Log:
    def __init__(self):
        self.warnings: list[str] = []

    def __call__(self, text: str, level: str = "info") -> None:
        if level == "warning":
            self.warnings.append(text)

    def progress(self, *args, **kwargs):
        pass


def _voc(root, ids_by_split: dict[str, list[str]]):
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    every = [i for ids in ids_by_split.values() for i in ids]
    for k, image_id in enumerate(every):
        Image.new("RGB", (64, 48), (k * 10 % 255, 40, 90)).save(root / "JPEGImages" / f"{image_id}.jpg")
        objects = VOC_OBJECT.format(name="dog" if k % 2 else "cat", x1=11, y1=6, x2=30, y2=20)
        if k == 0:
            objects += VOC_OBJECT.format(name="cat", x1=50, y1=40, x2=80, y2=47)  # reaches outside: clipped
        (root / "Annotations" / f"{image_id}.xml").write_text(VOC_XML.format(id=image_id, objects=objects))
    for split, ids in ids_by_split.items():
        (root / "ImageSets" / "Main" / f"{split}.txt").write_text("\n".join(ids) + "\n")


def test_a_voc_folder_gives_its_own_splits_classes_and_pixel_boxes(tmp_path):
    _voc(tmp_path / "voc", {"train": [f"a{k}" for k in range(8)], "val": ["b0", "b1"]})
    log = Log()
    spec = DataSpec.from_dict({"name": "voc", "root": str(tmp_path / "voc"), "test_fraction": 0.25})

    class Ctx:
        def __init__(self):
            self.log, self.workspace = log, tmp_path / "ws"

        def progress(self, *args, **kwargs):
            pass

    dataset = load_dataset(spec, ctx=Ctx())
    assert dataset.classes == ["cat", "dog"]
    assert {name: len(split) for name, split in dataset.splits.items()} == {"train": 6, "val": 2, "test": 2}
    first = next(
        item
        for item in dataset.splits["train"].items + dataset.splits["test"].items
        if item.file.stem == "a0"
    )
    assert (
        first.boxes[0] == [10.0, 5.0, 30.0, 20.0] and first.labels[0] == 1
    )  # 1-based corners to 0-based edges
    assert first.boxes[1] == [49.0, 39.0, 64.0, 47.0]
    assert any("a0.xml: object 1 (cat)" in w and "clipped" in w for w in log.warnings)
    image, target = dataset.splits["val"][0]
    assert image.shape == (3, 48, 64) and target["labels"].tolist() == [1]


def _yolo(root, names_file: str = "data.yaml"):
    for split, count in (("train", 6), ("val", 2)):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for k in range(count):
            Image.new("RGB", (100, 50)).save(root / "images" / split / f"{split}{k}.png")
            lines = ["1 0.5 0.5 0.2 0.4", "0 0.1 0.1 0.1 0.1"]
            if split == "train" and k == 0:
                lines += ["7 0.5 0.5 0.1 0.1", "oops"]
            (root / "labels" / split / f"{split}{k}.txt").write_text("\n".join(lines) + "\n")
    if names_file == "data.yaml":
        (root / "data.yaml").write_text(
            "path: .\ntrain: images/train\nval: images/val\nnames:\n  0: person\n  1: car\n"
        )
    else:
        (root / "classes.txt").write_text("person\ncar\n")


@pytest.mark.parametrize("names_file", ["data.yaml", "classes.txt"])
def test_a_yolo_folder_gives_pixel_boxes_from_normalised_centres(tmp_path, names_file):
    _yolo(tmp_path / "yolo", names_file)
    spec = DataSpec.from_dict({"name": "yolo", "root": str(tmp_path / "yolo"), "test_fraction": 0.2})
    dataset = load_dataset(spec, workspace=tmp_path / "ws")
    assert dataset.classes == ["person", "car"]
    assert {name: len(split) for name, split in dataset.splits.items()} == {"train": 5, "val": 2, "test": 1}
    _, target = dataset.splits["val"][0]
    assert torch.allclose(target["boxes"][0], torch.tensor([40.0, 15.0, 60.0, 35.0]))
    assert target["labels"].tolist() == [2, 1]  # class index + 1: 0 is the background


def test_yolo_without_names_says_where_to_put_them(tmp_path):
    _yolo(tmp_path / "yolo")
    (tmp_path / "yolo" / "data.yaml").unlink()
    with pytest.raises(JobError, match="no class names for .*data.yaml"):
        load_dataset(DataSpec.from_dict({"name": "yolo", "root": str(tmp_path / "yolo")}), workspace=tmp_path)
