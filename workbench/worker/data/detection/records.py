"""What a detection set is once read: per image its file, size, boxes (x1, y1, x2, y2 in pixels) and labels
(1..K), with the class names and each label's original category id."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Item:
    image_id: int
    file: Path
    width: float
    height: float
    boxes: list[list[float]]
    labels: list[int]

    @classmethod
    def of_sample(cls, image_id: int, image, target: dict) -> Item:
        """The record of an (image [C, H, W], target {boxes, labels}) sample already in memory (no file)."""
        import torch

        boxes = torch.as_tensor(target["boxes"], dtype=torch.float32).reshape(-1, 4).tolist()
        labels = [int(v) for v in torch.as_tensor(target["labels"]).reshape(-1).tolist()]
        return cls(int(image_id), Path(""), float(image.shape[-1]), float(image.shape[-2]), boxes, labels)


@dataclass
class Records:
    classes: list[str]
    category_ids: list[int]  # category_ids[label - 1]: the id a COCO file gives the label
    source: str = ""
    items: list[Item] = field(default_factory=list)

    def add(self, image_id: int, file: Path, width: float, height: float, boxes, labels) -> None:
        self.items.append(Item(image_id, Path(file), width, height, list(boxes), list(labels)))
