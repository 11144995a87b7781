"""LoadedDataset and Split: what training, the data tasks and the GUI's queries use to read a dataset.

A Split is a set of indices into a store. `batches()` gathers slices of a seeded permutation from uint8
storage, then converts, augments (per sample) and normalises whole batches on the target device.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data.augment import Augment, build_augment
from workbench.worker.data.normalize import compute_stats, read_stats, stats_path, write_stats
from workbench.worker.data.stores import ImageStore

SPLITS = ("train", "val", "test")
DECODE_CHUNK = 256


@dataclass
class DatasetCore:
    """The part of a loaded dataset that a spec's augment/normalize do not change; shared by the LRU cache."""

    name: str
    classes: list[str]
    root: str
    workspace: Path
    split_defs: dict[str, tuple[ImageStore, torch.Tensor]]
    stats_key: dict
    _stats: tuple[list[float], list[float]] | None = None
    _stats_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def stores(self) -> list[ImageStore]:
        unique: dict[int, ImageStore] = {}
        for store, _ in self.split_defs.values():
            unique.setdefault(id(store), store)
        return list(unique.values())

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        return self.split_defs["train"][0].shape

    def statistics(self, progress=None) -> tuple[list[float], list[float]]:
        with self._stats_lock:
            if self._stats is None:
                channels = self.sample_shape[0]
                path = stats_path(self.workspace, self.stats_key)
                cached = read_stats(path, self.stats_key, channels)
                if cached is None:
                    store, indices = self.split_defs["train"]
                    mean, std, count = compute_stats(store, indices, progress)
                    write_stats(path, self.stats_key, mean, std, count)
                    cached = (mean, std)
                self._stats = cached
            return self._stats


def _mix(seed: int, epoch: int) -> int:
    # One stream per (seed, epoch); the constant keeps seed 1 epoch 0 apart from seed 0 epoch 1.
    return (int(seed) * 1_000_003 + int(epoch)) % (2**63)


def _prefetch(source: Iterator, depth: int) -> Iterator:
    """Run `source` on a background thread, `depth` items ahead; stops when the consumer does."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        # Never block for good on a consumer that has gone away: give up once it says stop.
        while not stop.is_set():
            try:
                items.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in source:
                if not offer(item):
                    return
            offer(done)
        except BaseException as exc:  # handed to the consumer, which raises it where the caller can see
            offer(exc)

    thread = threading.Thread(target=produce, name="batch-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = items.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()


class Split:
    """One of train/val/test: `len`, `labels`, `images(indices)`, `class_counts()` and `batches(...)`."""

    def __init__(self, name: str, store: ImageStore, indices: torch.Tensor, dataset: LoadedDataset):
        self.name = name
        self.store = store
        self.indices = indices  # into the store
        self.labels = store.labels[indices]
        self.dataset = dataset

    def __len__(self) -> int:
        return int(self.indices.numel())

    def _rows(self, indices) -> torch.Tensor:
        rows = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= len(self)):
            raise IndexError(f"index out of range for the {self.name} split of {len(self)} samples")
        return rows

    def fetch(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 (n,C,H,W) images and a bool mask of those that decoded; indices are within this split."""
        return self.store.fetch(self.indices[self._rows(indices)])

    def images(self, indices) -> torch.Tensor:
        """uint8 (n,C,H,W) images at these indices within the split; a file that does not decode gives zeros."""
        images, ok = self.fetch(indices)
        if not bool(ok.all()):
            images = images.clone()
            images[~ok] = 0
        return images

    def path(self, index: int) -> str:
        return self.store.path(int(self.indices[self._rows([index])[0]]))

    def good(self) -> torch.Tensor:
        """A bool mask over the split: False for samples already known not to decode."""
        bad = self.store.known_bad()
        return torch.ones(len(self), dtype=torch.bool) if bad is None else ~bad[self.indices]

    def class_counts(self) -> list[int]:
        """Samples per class, leaving out files already known not to decode."""
        labels = self.labels[self.good()]
        return torch.bincount(labels, minlength=len(self.dataset.classes)).tolist()

    def batches(self, batch_size: int, *, shuffle: bool, seed: int = 0, epoch: int = 0, drop_last: bool = False,
                augment: bool | None = None, device: str | torch.device = "cpu") -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield (x float32 normalised (n,C,H,W), y int64) covering the split once, by slicing a permutation.

        `shuffle` draws the order from (seed, epoch); `augment` (default: only for train) applies the spec's
        steps with random parameters per sample; samples whose file does not decode are left out of their batch.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        device = torch.device(device)
        generator = torch.Generator().manual_seed(_mix(seed, epoch))
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        use_augment = (self.name == "train") if augment is None else augment
        steps = self.dataset.augment if use_augment else None
        mean, std = self.dataset.normalization()
        mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1).to(device)
        std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1).to(device)
        # Without augmentation, scaling to 0..1 folds into the normalisation: one pass fewer per batch.
        mean_255, std_255 = mean_t * 255, std_t * 255
        pin = self.dataset.spec.pin_memory and device.type == "cuda"
        store_indices, labels = self.indices[order], self.labels[order]

        def gather() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            for start in range(0, n, batch_size):
                if drop_last and start + batch_size > n:
                    return
                images, ok = self.store.fetch(store_indices[start:start + batch_size])
                y = labels[start:start + batch_size]
                if not bool(ok.all()):
                    images, y = images[ok], y[ok]
                    if not y.numel():
                        continue
                yield (images.pin_memory(), y.pin_memory()) if pin else (images, y)

        workers = self.dataset.spec.num_workers
        source = _prefetch(gather(), 2 * workers) if workers > 0 else gather()
        for images, y in source:
            # uint8 crosses to the device (4x fewer bytes than float), then everything runs there.
            x = images.to(device, non_blocking=pin).to(torch.float32)
            if steps:
                x = steps(x.div_(255), generator).sub_(mean_t).div_(std_t)
            else:
                x = x.sub_(mean_255).div_(std_255)  # in place: x is a fresh tensor of this batch alone
            yield x, y.to(device, non_blocking=pin)


class LoadedDataset:
    """A dataset ready to use: `classes`, `splits` (train/val/test), `sample_shape` (C,H,W), `skipped_files`,
    and `normalization()` as the spec asks for it."""

    def __init__(self, core: DatasetCore, spec: DataSpec):
        self.core = core
        self.spec = spec
        self.name = core.name
        self.classes = core.classes
        self.root = core.root
        self.augment: Augment = build_augment(spec.augment)
        self.splits = {name: Split(name, store, idx, self) for name, (store, idx) in core.split_defs.items()}
        self._check_normalize()

    @property
    def sample_shape(self) -> tuple[int, int, int]:
        return self.core.sample_shape

    @property
    def in_memory(self) -> bool:
        return all(store.in_memory for store in self.core.stores)

    @property
    def skipped_files(self) -> list[dict]:
        return [item for store in self.core.stores for item in store.skipped_files]

    def _check_normalize(self) -> None:
        table = self.spec.normalize
        if isinstance(table, dict):
            channels = self.sample_shape[0]
            for key in ("mean", "std"):
                if len(table[key]) not in (1, channels):
                    raise JobError(f"normalize.{key}: {table[key]!r} has {len(table[key])} values, but the images of "
                                   f"{self.name} have {channels} channel(s); give 1 or {channels} values")

    def statistics(self, progress=None) -> tuple[list[float], list[float]]:
        """The train split's own per-channel mean and std in 0..1 pixel units (cached in the workspace)."""
        return self.core.statistics(progress)

    def normalization(self, progress=None) -> tuple[list[float], list[float]]:
        """(mean, std) per channel that batches are normalised with: auto, none or the spec's own table."""
        channels = self.sample_shape[0]
        table = self.spec.normalize
        if table == "none":
            return [0.0] * channels, [1.0] * channels
        if table == "auto":
            return self.statistics(progress)
        mean, std = table["mean"], table["std"]
        return ([float(v) for v in mean] * (channels if len(mean) == 1 else 1),
                [float(v) for v in std] * (channels if len(std) == 1 else 1))

    def decode_all(self, progress: Callable[[int, int, str], None] | None = None,
                   check_stop: Callable[[], None] | None = None) -> None:
        """Decode every image not yet decoded, so `skipped_files` is complete (image folders; no-op otherwise)."""
        stores = [store for store in self.core.stores if not store.fully_decoded]
        total = sum(len(store) for store in stores)
        done = 0
        for store in stores:
            for start in range(0, len(store), DECODE_CHUNK):
                store.decode(torch.arange(start, min(start + DECODE_CHUNK, len(store))))
                done += min(DECODE_CHUNK, len(store) - start)
                if progress is not None:
                    progress(done, total, f"decoding images {done:,}/{total:,}")
                if check_stop is not None:
                    check_stop()
