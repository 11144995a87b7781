"""COCO detection data: categories mapped to labels 1..K in id order, boxes as x1, y1, x2, y2, the seeded
split, batches of lists, task=auto, and one line per bad annotation naming the file and the entry."""

from __future__ import annotations

import json

import pytest
import torch

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data.detection.coco import read_coco
from workbench.worker.data.detection.synthetic import write_shapes_coco
from workbench.worker.data.loader import load_dataset
from workbench.worker.objectives.detect import check_target, detect_task


class Log:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def __call__(self, text: str, level: str = "info") -> None:
        self.lines.append((level, text))


def test_a_coco_set_reads_into_splits_of_images_and_box_targets(tmp_path):
    images, annotations = write_shapes_coco(tmp_path, 20, seed=1, category_ids=(5, 9, 40))
    spec = DataSpec.from_dict(
        {"name": "coco", "root": str(images), "annotations": str(annotations), "test_fraction": 0.2}
    )
    dataset = load_dataset(spec, workspace=tmp_path / "ws")
    assert dataset.classes == ["square", "circle", "triangle"] and dataset.category_ids == [5, 9, 40]
    assert {name: len(split) for name, split in dataset.splits.items()} == {"train": 14, "val": 2, "test": 4}
    image, target = dataset.first_sample()
    assert (
        image.dtype == torch.float32 and image.shape == (3, 128, 128) and 0 <= image.min() <= image.max() <= 1
    )
    assert target["boxes"].shape[1] == 4 and target["labels"].dtype == torch.int64
    assert set(target["labels"].tolist()) <= {1, 2, 3}  # 0 is the background
    boxes = target["boxes"]
    assert bool((boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all())
    batch_images, batch_targets = next(iter(dataset.loader("train", 3, shuffle=False)))
    assert isinstance(batch_images, list) and len(batch_images) == 3 and len(batch_targets) == 3
    assert detect_task(image, target)[0] == "detection"
    with pytest.raises(JobError, match="set task=detection or task=auto"):
        check_target("classification", image, target)
    truth = json.loads(annotations.read_text())
    first = next(
        a for a in truth["annotations"] if a["image_id"] == dataset.splits["train"].items[0].image_id
    )
    x, y, w, h = first["bbox"]
    assert boxes[0].tolist() == [x, y, x + w, y + h]


def test_each_bad_annotation_gets_one_line_naming_the_file_and_the_entry(tmp_path):
    images, annotations = write_shapes_coco(tmp_path, 3, seed=2)
    data = json.loads(annotations.read_text())
    data["images"].append({"id": 99, "file_name": "gone.png", "width": 128, "height": 128})
    image = data["images"][0]["id"]
    data["annotations"] += [
        {"id": 501, "image_id": image, "category_id": 1, "bbox": [100, 100, 60, 10]},  # reaches outside
        {"id": 502, "image_id": image, "category_id": 1, "bbox": [10, 10, 0, 5]},  # no area
        {"id": 503, "image_id": image, "category_id": 42, "bbox": [10, 10, 5, 5]},  # unknown category
        {"id": 504, "image_id": image, "category_id": 1, "bbox": [200, 200, 5, 5]},  # wholly outside
    ]
    annotations.write_text(json.dumps(data))
    log = Log()
    records = read_coco(images, annotations, log)
    said = [text for level, text in log.lines if level == "warning"]
    assert len(said) == 5 and all(text.startswith("instances.json: ") for text in said)
    assert any("image 99" in t and "gone.png does not exist" in t for t in said)
    assert any("annotation 501" in t and "clipped" in t for t in said)
    assert any("annotation 502" in t and "zero area" in t for t in said)
    assert any("annotation 503" in t and "category 42 is not in the categories" in t for t in said)
    assert any("annotation 504" in t and "lies outside" in t for t in said)
    assert len(records.items) == 3
    clipped = records.items[0].boxes[-1]
    assert clipped == [100.0, 100.0, 128.0, 110.0]


def test_a_coco_spec_without_its_annotations_says_so(tmp_path):
    spec = DataSpec.from_dict({"name": "coco", "root": str(tmp_path)})
    with pytest.raises(JobError, match="dataset.annotations: empty"):
        load_dataset(spec, workspace=tmp_path / "ws")
    (tmp_path / "bad.json").write_text("{not json")
    spec = DataSpec.from_dict({"name": "coco", "root": str(tmp_path), "annotations": "bad.json"})
    with pytest.raises(JobError, match="bad.json is not JSON"):
        load_dataset(spec, workspace=tmp_path / "ws")
