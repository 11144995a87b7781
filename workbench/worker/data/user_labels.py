"""The class labels of a user's own Dataset: the largest one its train split holds (the class count when the
dataset names no classes) and the check that names the sample whose label falls outside a run's classes, so a
bad label reads as the user's sample rather than as the loss's "Target 99 is out of bounds" or a CUDA assert.

Every check here reads host tensors as the DataLoader hands them over, before any device sees them. Worker
side; never imports Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from workbench.errors import JobError


def is_label_batch(y: torch.Tensor) -> bool:
    """Whether a batch's targets are one integer class label per sample."""
    return (
        y.dim() == 1
        and not y.is_floating_point()
        and not y.is_complex()
        and y.dtype != torch.bool
        and y.numel() > 0
    )


def classes_text(count: int) -> str:
    """ "the 10 classes 0..9" (the labels a count of classes allows)."""
    return "the 1 class 0" if count == 1 else f"the {count} classes 0..{count - 1}"


@dataclass(frozen=True)
class LargestLabel:
    """The largest label the train split's scan met, and the sample that holds it ("sample 17 of the train
    split")."""

    value: int
    sample: str


def scan_batch(
    label: str, origin, indices: torch.Tensor, y: torch.Tensor, largest: LargestLabel | None
) -> LargestLabel | None:
    """One batch of the train split's label scan: a JobError naming the sample of a negative label; else the
    largest label so far, with its sample."""
    low = int(y.argmin())
    if int(y[low]) < 0:
        raise JobError(
            f"{label}: {origin.one(int(indices[low]))} has label {int(y[low])}; class labels "
            "count from 0 (0..K-1 for K classes); fix the label"
        )
    high = int(y.argmax())
    if largest is None or int(y[high]) > largest.value:
        return LargestLabel(int(y[high]), origin.one(int(indices[high])))
    return largest


@dataclass(frozen=True)
class LabelRange:
    """The labels a classification run allows, 0..count-1, with why (which count) and what to change."""

    count: int
    why: str  # "its `classes` lists 10 names", "model.num_classes=10"
    fix: str  # "fix the label or the class list"

    def message(self, label: str, sample: str, value: int) -> str:
        return (
            f"{label}: {sample} has label {value}, outside {classes_text(self.count)} ({self.why}); "
            f"{self.fix}"
        )

    def check(self, label: str, origin, indices: torch.Tensor, y: torch.Tensor) -> None:
        """A JobError naming the first sample of the batch whose label is outside 0..count-1."""
        if not is_label_batch(y) or y.device.type != "cpu":
            return
        if int(y.min()) >= 0 and int(y.max()) < self.count:
            return
        position = int(((y < 0) | (y >= self.count)).nonzero()[0])
        raise JobError(self.message(label, origin.one(int(indices[position])), int(y[position])))


def label_range(count: int, declared: list | None, largest: LargestLabel | None) -> LabelRange:
    """The LabelRange of a run with `count` classes, worded after where the count came from: the dataset's own
    `classes`, one past the largest train label (no `classes`, model.num_classes auto), or
    model.num_classes."""
    if declared and len(declared) == count:
        return LabelRange(count, f"its `classes` lists {count} names", "fix the label or the class list")
    if not declared and largest is not None and largest.value + 1 == count:
        return LabelRange(
            count,
            f"model.num_classes={count}: one past the largest label of the train split, "
            "as the dataset has no `classes`",
            "fix the label, give the dataset a `classes` list, or set model.num_classes",
        )
    return LabelRange(count, f"model.num_classes={count}", "fix the label or model.num_classes")
