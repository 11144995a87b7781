"""A Lightning detection run's data for the jobs after training (quantize, export, bench, Try it): the
DataModule's train, validation and test batches of (images, targets of boxes and labels) unbatched into the
splits a detection set has, each sample's target given an image_id, with the class names the DataModule (or
"1".."K") gives. Worker side; never imports Qt."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from workbench.errors import JobError, WorkbenchError
from workbench.specs import DataSpec
from workbench.worker.lightning import require_lightning
from workbench.worker.lightning.detection import check_detection_batch, class_names
from workbench.worker.lightning.user_classes import load_datamodule, overrides
from workbench.worker.models.user_code import _describe

MAX_SAMPLES = 256  # per split: quantize reads at most 64, export 4, bench 1; Try it an index among these


@dataclass
class LightningDetectionData:
    """splits {train, val, test}: lists of (image [3, H, W], target with image_id); classes; category_ids."""

    splits: dict = field(default_factory=dict)
    classes: list = field(default_factory=list)
    category_ids: list = field(default_factory=list)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        for split in self.splits.values():
            if split:
                return tuple(split[0][0].shape)
        return ()


def _samples(loader, split: str, start: int) -> list:
    samples = []
    for k, batch in enumerate(loader):
        check_detection_batch(batch, f"{split} batch {k} of the DataModule")
        for image, target in zip(batch[0], batch[1]):
            samples.append((image, {**target, "image_id": start + len(samples) + 1}))
            if len(samples) >= MAX_SAMPLES:
                return samples
    return samples


def open_lightning_detection(spec: DataSpec, ctx) -> LightningDetectionData:
    """The DataModule `spec` names, set up and read into a detection run's splits (seeded, so every job
    reads the same samples)."""
    lightning = require_lightning()
    module = load_datamodule(spec.name, spec.args, ctx.log)
    base = lightning.LightningDataModule
    splits: dict[str, list] = {}
    torch.manual_seed(0)
    try:
        for stage, hooks in (("fit", ("train", "val")), ("test", ("test",))):
            if not any(overrides(module, f"{hook}_dataloader", base) for hook in hooks):
                continue
            module.setup(stage)
            for hook in hooks:
                if overrides(module, f"{hook}_dataloader", base):
                    start = sum(len(s) for s in splits.values())
                    splits[hook] = _samples(getattr(module, f"{hook}_dataloader")(), hook, start)
    except WorkbenchError:
        raise
    except Exception as exc:
        raise JobError(f"dataset.name: {_describe(exc)} (reading the DataModule's batches)") from None
    splits = {name: splits.get(name, []) for name in ("train", "val", "test")}
    highest = max(
        (
            int(label)
            for split in splits.values()
            for _, t in split
            for label in t["labels"].reshape(-1).tolist()
        ),
        default=0,
    )
    classes = class_names((module,), highest)
    counts = ", ".join(f"{len(v):,} {k}" for k, v in splits.items())
    ctx.log(f"dataset {spec.name}: {counts} images from the DataModule's batches, {len(classes)} classes")
    return LightningDetectionData(splits, classes, list(range(1, len(classes) + 1)))
