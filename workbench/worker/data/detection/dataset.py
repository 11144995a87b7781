"""A detection set as the detection route reads it: train/val/test splits of (image, target) samples, the
class names and category ids, batches of lists for torchvision's detectors, and the COCO ground truth of a
split. Registered in the dataset registry as "coco"; a `file:` Dataset returning (image, target dict) is
wrapped the same way (from_user)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data.detection.collate import detection_collate
from workbench.worker.data.detection.records import Item, Records
from workbench.worker.data.registry import register_dataset_opener
from workbench.worker.data.splits import split_whole

SPLITS = ("train", "val", "test")


def read_image(path: Path) -> torch.Tensor:
    """float32 [3, H, W] in 0..1 (grey and RGBA images become RGB)."""
    from PIL import Image

    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255)


def as_target(item: Item) -> dict:
    return {
        "boxes": torch.tensor(item.boxes, dtype=torch.float32).reshape(-1, 4),
        "labels": torch.tensor(item.labels, dtype=torch.int64),
        "image_id": int(item.image_id),
    }


class RecordSplit(Dataset):
    """One split of a read detection set: sample i is (image, target) of its i-th item."""

    def __init__(self, items: list[Item]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int):
        item = self.items[index]
        return read_image(item.file), as_target(item)


class DetectionDataset:
    """name, spec, classes (K names), category_ids, splits {train, val, test} (torch Datasets of (image,
    target)), first_sample(), loader(split, ...), ground_truth(split)."""

    is_detection = True
    in_memory = False

    def __init__(
        self, spec: DataSpec, splits: dict, classes: list[str], category_ids: list[int], root: str = ""
    ):
        self.spec = spec
        self.name = spec.name
        self.label = f"dataset {spec.name}"
        self.splits = splits
        self.classes = list(classes)
        self.category_ids = list(category_ids)
        self.root = root

    def first_sample(self):
        image, target = self.splits["train"][0]
        check_sample(image, target, f"{self.label}: sample 0 of the train split")
        return image, target

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.first_sample()[0].shape)

    def loader(
        self, split: str, batch_size: int, *, shuffle: bool, seed: int = 0, workers: int = 0
    ) -> DataLoader:
        return DataLoader(
            self.splits[split],
            batch_size=batch_size,
            shuffle=shuffle,
            num_workers=workers,
            collate_fn=detection_collate,
            generator=torch.Generator().manual_seed(seed),
            persistent_workers=False,
        )

    def normalization(self, progress=None):  # the detectors normalise inside (GeneralizedRCNNTransform)
        return None

    def release(self) -> None:
        pass


def check_sample(image, target, where: str) -> None:
    """A detection sample is (float image [3, H, W], {"boxes": [N, 4], "labels": [N]}): else say what is
    wrong."""
    if not isinstance(image, torch.Tensor) or image.dim() != 3:
        raise JobError(f"{where}: the image must be a tensor [3, H, W], not {type(image).__name__}")
    if not isinstance(target, dict) or "boxes" not in target or "labels" not in target:
        raise JobError(f'{where}: the target must be a dict with "boxes" and "labels" (torchvision\'s)')
    boxes = torch.as_tensor(target["boxes"])
    if boxes.numel() and (boxes.dim() != 2 or boxes.shape[1] != 4):
        raise JobError(f"{where}: boxes must be [N, 4] (x1, y1, x2, y2 in pixels), not {list(boxes.shape)}")


def carve(records: Records, spec: DataSpec, label: str) -> dict:
    parts = split_whole(len(records.items), spec.val_fraction, spec.test_fraction, spec.seed, label)
    return {name: RecordSplit([records.items[int(i)] for i in parts[name]]) for name in SPLITS}


@register_dataset_opener(
    "coco", description="A COCO detection set: dataset.root (images), dataset.annotations."
)
def open_coco(spec: DataSpec, workspace: Path, ctx=None) -> DetectionDataset:
    from workbench.worker.data.detection.coco import read_coco
    from workbench.worker.data.loader import resolve_root

    if not spec.annotations:
        raise JobError("dataset.annotations: empty; name the COCO instances JSON of dataset.root's images")
    root = resolve_root(spec, workspace)
    annotations = Path(spec.annotations).expanduser()
    if not annotations.is_absolute():
        annotations = (root / annotations) if (root / annotations).exists() else annotations.absolute()
    log = ctx.log if ctx is not None else (lambda text, level="info": None)
    records = read_coco(root, annotations, log)
    splits = carve(records, spec, f"dataset coco ({annotations.name})")
    counts = ", ".join(f"{len(splits[name]):,} {name}" for name in SPLITS)
    boxes = sum(len(item.boxes) for item in records.items)
    log(
        f"dataset coco: {len(records.items):,} images ({counts}), {boxes:,} boxes, {len(records.classes)} "
        "classes"
    )
    return DetectionDataset(spec, splits, records.classes, records.category_ids, str(root))


@register_dataset_opener(
    "shapes_detection",
    description="Synthetic squares, circles and triangles on noise with their boxes (COCO files written at "
    "first use into the data folder; dataset.size images).",
)
def open_shapes(spec: DataSpec, workspace: Path, ctx=None) -> DetectionDataset:
    """The bundled offline detection set: written once as PNGs and a COCO JSON, then read as any COCO set."""
    from workbench.worker.data.detection.coco import read_coco
    from workbench.worker.data.detection.synthetic import write_shapes_coco
    from workbench.worker.data.loader import resolve_root

    log = ctx.log if ctx is not None else (lambda text, level="info": None)
    folder = resolve_root(spec, workspace) / "shapes_detection" / f"{spec.size}"
    annotations = folder / "instances.json"
    if not annotations.is_file():
        log(f"writing {spec.size:,} synthetic shape images with their boxes into {folder} (once)")
        write_shapes_coco(folder, spec.size, seed=0)
    records = read_coco(folder / "images", annotations, log)
    splits = carve(records, spec, "dataset shapes_detection")
    counts = ", ".join(f"{len(splits[name]):,} {name}" for name in SPLITS)
    log(f"dataset shapes_detection: {len(records.items):,} images ({counts}), {len(records.classes)} classes")
    return DetectionDataset(spec, splits, records.classes, records.category_ids, str(folder))


def defined_splits(records: Records, defined: dict[str, list[int]], spec: DataSpec, label: str) -> dict:
    """The splits the files define (item indices), the missing ones carved by the seeded splitter: no split
    defined is split_whole; train alone gives val and test out of it; train and val give test out of train."""
    if not defined.get("train"):
        return carve(records, spec, label)
    train = [records.items[i] for i in defined["train"]]
    parts = {name: [records.items[i] for i in defined.get(name, [])] for name in SPLITS}
    missing = [name for name in ("val", "test") if not parts[name]]
    if missing:
        fractions = {
            "val": spec.val_fraction if "val" in missing else 0.0,
            "test": spec.test_fraction if "test" in missing else 0.0,
        }
        cut = split_whole(
            len(train), fractions["val"], fractions["test"], spec.seed, f"the train split of {label}"
        )
        for name in missing:
            parts[name] = [train[int(i)] for i in cut[name]]
        parts["train"] = [train[int(i)] for i in cut["train"]]
    return {name: RecordSplit(parts[name]) for name in SPLITS}


def _opened(name: str, records: Records, splits: dict, root: str, spec: DataSpec, log) -> DetectionDataset:
    counts = ", ".join(f"{len(splits[split]):,} {split}" for split in SPLITS)
    boxes = sum(len(item.boxes) for item in records.items)
    log(
        f"dataset {name}: {len(records.items):,} images ({counts}), {boxes:,} boxes, {len(records.classes)} "
        "classes"
    )
    return DetectionDataset(spec, splits, records.classes, records.category_ids, root)


@register_dataset_opener(
    "voc", description="A Pascal VOC folder: Annotations/, JPEGImages/, ImageSets/Main/."
)
def open_voc(spec: DataSpec, workspace: Path, ctx=None) -> DetectionDataset:
    from workbench.worker.data.detection.voc import read_voc
    from workbench.worker.data.loader import resolve_root

    log = ctx.log if ctx is not None else (lambda text, level="info": None)
    root = resolve_root(spec, workspace)
    records, ids = read_voc(root, log)
    index = {item.file.stem: k for k, item in enumerate(records.items)}
    defined = {split: [index[i] for i in names if i in index] for split, names in ids.items()}
    return _opened(
        "voc", records, defined_splits(records, defined, spec, "dataset voc"), str(root), spec, log
    )


@register_dataset_opener("yolo", description="A YOLO folder: images/ and labels/ (class cx cy w h), names.")
def open_yolo(spec: DataSpec, workspace: Path, ctx=None) -> DetectionDataset:
    from workbench.worker.data.detection.yolo import read_yolo
    from workbench.worker.data.loader import resolve_root

    log = ctx.log if ctx is not None else (lambda text, level="info": None)
    root = resolve_root(spec, workspace)
    records, defined = read_yolo(root, spec.annotations, log)
    return _opened(
        "yolo", records, defined_splits(records, defined, spec, "dataset yolo"), str(root), spec, log
    )


class UserDetectionSplit(Dataset):
    """A split of a user's `file:` Dataset whose samples are (image, torchvision target): images as float
    [3, H, W] in 0..1 (uint8 divided by 255), boxes float32 [N, 4], labels int64, image_id the sample's place
    when the target has none. `items` reads every sample once, for the ground truth."""

    def __init__(self, source, label: str, split: str):
        self.source, self.label, self.split = source, label, split
        self._items: list[Item] | None = None

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int):
        image, target = self.source[index]
        image = torch.as_tensor(image)
        image = image.float().div(255) if image.dtype == torch.uint8 else image.float()
        where = f"{self.label}: sample {index} of the {self.split} split"
        check_sample(image, target, where)
        return image, {
            "boxes": torch.as_tensor(target["boxes"], dtype=torch.float32).reshape(-1, 4),
            "labels": torch.as_tensor(target["labels"], dtype=torch.int64).reshape(-1),
            "image_id": int(target.get("image_id", index + 1)),
        }

    @property
    def items(self) -> list[Item]:
        if self._items is None:
            items = []
            for index in range(len(self)):
                image, target = self[index]
                items.append(
                    Item(
                        target["image_id"],
                        Path(""),
                        float(image.shape[2]),
                        float(image.shape[1]),
                        target["boxes"].tolist(),
                        target["labels"].tolist(),
                    )
                )
            self._items = items
        return self._items


def from_user(spec: DataSpec, splits: dict, label: str, classes) -> DetectionDataset:
    """A user's Dataset of (image, target dict) samples as a detection set; its `classes` name labels 1..K
    (else they are counted from the largest label in the train split)."""
    wrapped = {name: UserDetectionSplit(splits[name], label, name) for name in SPLITS}
    if not classes:
        largest = max((max(item.labels, default=0) for item in wrapped["train"].items), default=0)
        classes = [str(k) for k in range(1, largest + 1)]
    return DetectionDataset(spec, wrapped, [str(c) for c in classes], list(range(1, len(classes) + 1)))
