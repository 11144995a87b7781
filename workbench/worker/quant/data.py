"""The data a quantize job reads: the calibration subset (seeded draw from the training split) and the
held-out set (the test split, else validation), as normalised batches without augmentation; and evaluating a
model on them (accuracy or the run's task monitor, loss, logits). Worker side; never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from workbench.errors import JobError
from workbench.worker.models import logits_of
from workbench.worker.models.build import call_model
from workbench.worker.objectives.of_run import is_user_data

CACHE_BYTES = 512 * 2**20  # subsets up to this size (as float32) are decoded once and kept


class Batches:
    """Normalised (x, y) batches of some samples of one split, in a fixed order, on `device`."""

    def __init__(
        self,
        split,
        indices: torch.Tensor,
        *,
        batch_size: int,
        device: torch.device,
        mean: list[float],
        std: list[float],
        what: str,
    ):
        self.split = split
        self.indices = indices
        self.batch_size = batch_size
        self.device = device
        self.what = what
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        shape = split.store.shape
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.keep = len(indices) * math.prod(shape) * 4 <= CACHE_BYTES

    def __len__(self) -> int:
        return math.ceil(len(self.indices) / self.batch_size)

    @property
    def samples(self) -> int:
        return int(len(self.indices))

    def _load(self, chunk: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        images, ok = self.split.fetch(chunk)
        labels = self.split.labels[chunk]
        if not bool(ok.all()):  # files that do not decode are left out, as training leaves them out
            images, labels = images[ok], labels[ok]
        # Scale first, then normalise: the same arithmetic as the training engine's evaluation.
        x = images.to(torch.float32).div_(255).sub_(self.mean).div_(self.std)
        return x.to(self.device), labels.to(self.device)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.cache is not None:
            yield from self.cache
            return
        loaded = []
        for start in range(0, len(self.indices), self.batch_size):
            batch = self._load(self.indices[start : start + self.batch_size])
            if batch[1].numel() == 0:
                continue
            if self.keep:
                loaded.append(batch)
            yield batch
        if self.keep:
            self.cache = loaded

    def head(self, count: int) -> Batches:
        """The first `count` samples, as their own Batches."""
        return Batches(
            self.split,
            self.indices[:count],
            batch_size=self.batch_size,
            device=self.device,
            mean=self.mean.flatten().tolist(),
            std=self.std.flatten().tolist(),
            what=self.what,
        )


class SampleBatches:
    """(x, y) batches of some samples of a user's own Dataset split (file:), read in this process and collated
    as its DataLoader collates them (x may be a tuple or dict of tensors); kept after the first pass."""

    def __init__(self, split, indices: torch.Tensor, *, batch_size: int, device: torch.device, what: str):
        self.split = split
        self.indices = indices
        self.batch_size = batch_size
        self.device = device
        self.what = what
        self.cache: list | None = None

    def __len__(self) -> int:
        return math.ceil(len(self.indices) / self.batch_size)

    @property
    def samples(self) -> int:
        return int(len(self.indices))

    def __iter__(self) -> Iterator[tuple]:
        if self.cache is None:
            from torch.utils.data import default_collate

            self.cache = []
            for start in range(0, len(self.indices), self.batch_size):
                items = [self.split.sample(int(i)) for i in self.indices[start : start + self.batch_size]]
                x = default_collate([item[0] for item in items])
                y = default_collate([item[1] for item in items])
                self.cache.append((_to(x, self.device), y.to(self.device)))
        yield from self.cache

    def head(self, count: int) -> SampleBatches:
        return SampleBatches(
            self.split, self.indices[:count], batch_size=self.batch_size, device=self.device, what=self.what
        )


def _to(x, device):
    if isinstance(x, dict):
        return {key: value.to(device) for key, value in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(value.to(device) for value in x)
    return x.to(device)


def calibration_batches(dataset, samples: int, seed: int, *, batch_size: int, device, log) -> Batches:
    split = dataset.splits["train"]
    if not len(split):
        raise JobError(f"{dataset.name} has no training samples to calibrate on")
    count = min(samples, len(split))
    if count < samples:
        log(
            f"calibration.samples is {samples:,}, but the training split has {len(split):,}; calibrating on "
            "all of them",
            "warning",
        )
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(int(seed)))[:count]
    if is_user_data(dataset):
        return SampleBatches(
            split, order.sort().values, batch_size=batch_size, device=device, what="calibration"
        )
    mean, std = dataset.normalization()
    return Batches(
        split,
        order.sort().values,
        batch_size=batch_size,
        device=device,
        mean=mean,
        std=std,
        what="calibration",
    )


def held_out_split(dataset) -> str:
    """The split every rung is measured on: "test", else "val" when the dataset holds no test samples."""
    return "test" if len(dataset.splits["test"]) else "val"


def held_out_batches(dataset, samples: int, *, batch_size: int, device) -> Batches:
    name = held_out_split(dataset)
    split = dataset.splits[name]
    if not len(split):
        raise JobError(
            f"{dataset.name} has no test or validation samples to measure accuracy on; set "
            "dataset.test_fraction or dataset.val_fraction above 0"
        )
    count = len(split) if samples <= 0 else min(samples, len(split))
    if is_user_data(dataset):
        return SampleBatches(
            split, torch.arange(count), batch_size=batch_size, device=device, what=f"{name} split"
        )
    mean, std = dataset.normalization()
    return Batches(
        split,
        torch.arange(count),
        batch_size=batch_size,
        device=device,
        mean=mean,
        std=std,
        what=f"{name} split",
    )


@torch.no_grad()
def evaluate(
    model: Callable[..., object],
    batches: Batches,
    check_stop: Callable[[], None] | None = None,
    objective=None,
) -> dict:
    """`model` over the batches: "accuracy" (the measure the ladder, the sweeps and the proposal rank by),
    "loss" (mean per sample) and "logits" (CPU); with a non-classification `objective`
    (workbench.worker.objectives), "accuracy" holds that task's monitor value and "metrics" all of its
    metrics."""
    if objective is None or objective.task == "classification":
        return _evaluate_classification(model, batches, check_stop)
    loss, total, stats = 0.0, 0, None
    logits = []
    for x, y in batches:
        if check_stop is not None:
            check_stop()
        scores = logits_of(call_model(model, x)).float()
        count = int(y.shape[0]) if y.dim() else 1
        # The objective's loss is a batch mean: weighted by the batch's samples, so a short last batch counts
        # right.
        loss += float(objective.loss(scores, y)) * count
        batch = objective.batch_stats(scores, y)
        stats = batch if stats is None else stats + batch
        total += count
        logits.append(scores.cpu())
    if not total:
        raise JobError(f"no sample of the {batches.what} could be read")
    metrics = objective.metrics(stats, total)
    return {
        "accuracy": metrics.get(objective.monitor, math.nan),
        "loss": loss / total,
        "logits": torch.cat(logits),
        "metrics": metrics,
    }


def _evaluate_classification(model, batches, check_stop) -> dict:
    """accuracy (argmax), loss (mean cross-entropy) and logits: the numbers quantize reports for
    classification."""
    correct, loss, total = 0, 0.0, 0
    logits = []
    for x, y in batches:
        if check_stop is not None:
            check_stop()
        scores = logits_of(call_model(model, x)).float()
        loss += float(F.cross_entropy(scores, y, reduction="sum"))
        correct += int((scores.argmax(dim=1) == y).sum())
        total += int(y.numel())
        logits.append(scores.cpu())
    if not total:
        raise JobError(f"no sample of the {batches.what} could be read")
    return {"accuracy": correct / total, "loss": loss / total, "logits": torch.cat(logits)}
