"""LoadedDataset and Split: what training, the data tasks and the GUI's queries use to read a dataset.

A Split is a set of indices into a store. `batches()` gathers slices of a seeded permutation from uint8
storage, then converts, augments (per sample) and normalises whole batches on the target device. Where the
gathering happens (a copy of the data on the device, staging buffers, the host) is the dataset's placement.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data.augment import Augment, build_augment
from workbench.worker.data.normalize import compute_stats, read_stats, stats_path, write_stats
from workbench.worker.data.placement import (
    DEVICE,
    HOST,
    PLACEMENTS,
    STAGED,
    DeviceStore,
    choose,
    device_batches,
    host_batches,
    place_store,
    prefetch,
    staged_batches,
    to_device,
)
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
        """uint8 (n,C,H,W) images at these indices within the split; a file that does not decode gives
        zeros."""
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

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        epoch: int = 0,
        drop_last: bool = False,
        augment: bool | None = None,
        device: str | torch.device = "cpu",
        placement: str | None = None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Yield (x float32 normalised (n,C,H,W), y int64) covering the split once, by slicing a permutation.

        `shuffle` draws the order from (seed, epoch); `augment` (default: only for train) applies the spec's
        steps with random parameters per sample; samples whose file does not decode are left out of their
        batch. `placement` (device, staged or host) overrides where batches are gathered (default: the
        dataset's choice for `device`, see LoadedDataset.prepare); every placement gives the same batches.
        """
        use_augment = (self.name == "train") if augment is None else augment
        stream = self._stream(
            batch_size,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            drop_last=drop_last,
            steps=self.dataset.augment if use_augment else None,
            device=device,
            placement=placement,
        )
        # Closed explicitly, not when the garbage collector gets to it: a consumer that stops early must stop
        # the staging thread at once (seen on Python 3.12: the thread outlived the consumer).
        with contextlib.closing(stream):
            for _, x, y in stream:
                yield x, y

    def indexed_batches(
        self,
        batch_size: int,
        *,
        device: str | torch.device = "cpu",
        rank: int = 0,
        world: int = 1,
        placement: str | None = None,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(indices within the split (host int64), normalised x, y) in split order with no augmentation, for
        evaluation; with world > 1, every world-th batch from the rank-th. Indices keep each prediction's
        sample even when some files fail to decode."""
        yield from self._stream(
            batch_size,
            shuffle=False,
            steps=None,
            device=device,
            placement=placement,
            shard=(rank, world),
            scale_first=True,
        )

    def _plan(self, order: torch.Tensor, batch_size: int, drop_last: bool, shard: tuple[int, int]) -> list:
        """The batches as (split indices, store indices, labels) on the host: arithmetic known before any
        data."""
        rank, world = shard
        store_indices, labels = self.indices[order], self.labels[order]
        parts = []
        n = len(order)
        for number, start in enumerate(range(0, n, batch_size)):
            if drop_last and start + batch_size > n:
                break
            if number % world != rank:
                continue
            end = start + batch_size
            parts.append((order[start:end], store_indices[start:end], labels[start:end]))
        return parts

    def _stream(
        self,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        epoch: int = 0,
        drop_last: bool = False,
        steps: Augment | None,
        device,
        placement: str | None,
        shard: tuple[int, int] = (0, 1),
        scale_first: bool = False,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        if placement is not None and placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
        device = torch.device(device)
        generator = torch.Generator().manual_seed(_mix(seed, epoch))
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        mean, std = self.dataset.normalization()
        mean_t = to_device(torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), device)
        std_t = to_device(torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), device)
        # Without augmentation, scaling to 0..1 folds into the normalisation: one pass fewer per batch.
        # Evaluation keeps the two passes (scale_first) it always had, so its numbers do not move by a
        # rounding.
        mean_255, std_255 = mean_t * 255, std_t * 255

        def finish(images: torch.Tensor) -> torch.Tensor:
            # uint8 crossed to the device (4x fewer bytes than float); the rest runs there
            x = images.to(torch.float32)
            if steps:
                return steps(x.div_(255), generator).sub_(mean_t).div_(std_t)
            if scale_first:
                return x.div_(255).sub_(mean_t).div_(std_t)
            return x.sub_(mean_255).div_(std_255)  # in place: x is a fresh tensor of this batch alone

        parts = self._plan(order, batch_size, drop_last, shard)
        mode = placement or self.dataset.placement_for(device)
        if mode == DEVICE:
            for local, images, y in device_batches(
                self.dataset.on_device_store(self.store, device), parts, device
            ):
                yield local, finish(images), y
        elif mode == STAGED:
            # reused buffers: pinning them costs once, and makes the copies asynchronous
            pin = device.type == "cuda"
            with contextlib.closing(staged_batches(self.store, parts, batch_size, device, pin=pin)) as staged:
                for local, images, y, release in staged:
                    x = finish(images)
                    if release is not None:
                        release()  # the images are converted: the slot may be refilled
                    yield local, x, y
        else:
            workers = self.dataset.loader_workers()
            source = host_batches(self.store, parts)
            if workers > 0:
                source = prefetch(source, 2 * workers)
            with contextlib.closing(source):
                for local, images, y in source:
                    yield local, finish(to_device(images, device)), to_device(y, device)


MAX_AUTO_WORKERS = 8  # past this, decoding outruns the step on every model we measured, and each holds memory


def auto_worker_count() -> int:
    """The cores this process may run on (its CPU affinity, as a container or taskset limits it), up to 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_AUTO_WORKERS))


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
        # Per job (a LoadedDataset is made for each load_dataset call, the DatasetCore is shared): where
        # batches for each device are gathered, and the device copies of the stores, dropped by release().
        self._placements: dict[str, tuple[str, str]] = {}
        self._on_device: dict[tuple[int, str], DeviceStore] = {}
        self._placement_lock = threading.Lock()

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
                    raise JobError(
                        f"normalize.{key}: {table[key]!r} has {len(table[key])} values, but the images of "
                        f"{self.name} have {channels} channel(s); give 1 or {channels} values"
                    )

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
        return (
            [float(v) for v in mean] * (channels if len(mean) == 1 else 1),
            [float(v) for v in std] * (channels if len(std) == 1 else 1),
        )

    # -- where batches are gathered --------------------------------------------------------------------------
    def loader_workers(self) -> int:
        """dataset.num_workers as a count. auto: the usable cores (up to 8) where a store streams from its
        files, which keeps decoding ahead of the step (an ImageFolder too big for memory trained 3x slower
        without); 0 where every store is held in memory, whose batches are a slice away."""
        workers = self.spec.num_workers
        if workers != "auto":
            return workers
        return 0 if self.in_memory else auto_worker_count()

    def describe_workers(self) -> str:
        workers = self.loader_workers()
        how = f"{workers} background loader(s)" if workers else "loaded in the job's own process"
        if self.spec.num_workers != "auto":
            return f"{how} (dataset.num_workers={workers})"
        return f"{how} (dataset.num_workers auto: " + (
            "the data is held in memory)"
            if self.in_memory
            else f"{workers} usable core(s), the data streams from files)"
        )

    def prepare(
        self,
        device,
        progress: Callable[[int, int, str], None] | None = None,
        check_stop: Callable[[], None] | None = None,
    ) -> tuple[str, str]:
        """Decide where batches for `device` are gathered (dataset.on_device) and, for "device", decode every
        image and copy the stores there now, before any step. Returns (placement, why) for the job's log."""
        device = torch.device(device)
        key = str(device)
        with self._placement_lock:
            if key in self._placements:
                return self._placements[key]
        mode, why = choose(self.spec.on_device, device, self.core.stores)
        if mode == HOST:
            why += f"; {self.describe_workers()}"
        if mode == DEVICE:
            self.decode_all(progress, check_stop)
            for store in self.core.stores:
                self.on_device_store(store, device)
            bad = len(self.skipped_files)
            if bad:
                why += f" ({bad} file(s) that do not decode are left out)"
        with self._placement_lock:
            self._placements[key] = (mode, why)
        return mode, why

    def placement_for(self, device) -> str:
        """Where batches for `device` are gathered: device, staged or host (deciding now if prepare() was not
        called; the data tasks and GUI queries gather on the host, which never decides to copy anything)."""
        device = torch.device(device)
        with self._placement_lock:
            known = self._placements.get(str(device))
        if known is not None:
            return known[0]
        if device.type == "cpu" and self.spec.on_device is not True:
            return HOST
        return self.prepare(device)[0]

    def on_device_store(self, store: ImageStore, device) -> DeviceStore:
        device = torch.device(device)
        key = (id(store), str(device))
        with self._placement_lock:
            placed = self._on_device.get(key)
        if placed is None:
            if store.resident() is None:
                self.decode_all()
            placed = place_store(store, device)
            with self._placement_lock:
                placed = self._on_device.setdefault(key, placed)
        return placed

    def release(self) -> None:
        """Drop the device copies of the data (the job is over); batches asked for later decide afresh."""
        with self._placement_lock:
            self._on_device.clear()
            self._placements.clear()

    def decode_all(
        self,
        progress: Callable[[int, int, str], None] | None = None,
        check_stop: Callable[[], None] | None = None,
    ) -> None:
        """Decode every image not yet decoded, so `skipped_files` is complete (image folders; no-op
        otherwise)."""
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
