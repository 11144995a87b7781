"""Where a split's batches are gathered on their way to the training device: from a copy of the whole uint8
dataset kept on the device ("device"), through reused staging buffers that a background thread fills and a
side stream copies ("staged"), or on the host ("host"). The same code runs on every device, trivially on the
CPU.

Nothing here makes the training thread wait on the device. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from workbench.errors import JobError
from workbench.worker.data.stores import ImageStore, nbytes

DEVICE, STAGED, HOST = "device", "staged", "host"
PLACEMENTS = (DEVICE, STAGED, HOST)
# auto keeps a dataset on CUDA when its uint8 pixels take less than this share of the free device memory: the
# rest is for the model, its activations and the allocator's slack.
ON_DEVICE_SHARE = 0.25
STAGING_SLOTS = 3  # one being filled, one being copied, one being trained on
POLL_S = 0.1


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host tensor on `device` without a wait: on CUDA a non_blocking copy (from pageable memory CUDA
    stages the bytes before it returns, so the source may be freed at once; a blocking copy would also
    synchronise the stream); elsewhere an ordinary copy, or the tensor itself on the CPU."""
    return tensor.to(device, non_blocking=device.type == "cuda")


def stores_bytes(stores: Iterable[ImageStore]) -> int:
    return sum(nbytes(len(store), store.shape) for store in stores)


def choose(on_device, device: torch.device, stores: list[ImageStore]) -> tuple[str, str]:
    """(placement, why) for dataset.on_device (True, False or "auto") on `device`."""
    device = torch.device(device)
    size = stores_bytes(stores)
    held = all(store.in_memory for store in stores)
    if on_device is True:
        if not held:
            raise JobError(
                f"dataset.on_device: true needs a dataset held in memory, but this one ({_mib(size)} as "
                "uint8) is read from its files as it is used; set dataset.on_device=auto or false"
            )
        return DEVICE, f"dataset.on_device=true: the dataset ({_mib(size)}) is kept on {device}"
    if device.type == "cpu":
        return HOST, "the dataset is in host memory, where the CPU trains"
    if device.type != "cuda":  # mps: no side streams to overlap with; on_device=true still works there
        return HOST, f"batches are copied to {device} one at a time (dataset.on_device=true keeps it there)"
    if on_device == "auto" and held:
        free, _ = torch.cuda.mem_get_info(device)
        if size < ON_DEVICE_SHARE * free:
            return DEVICE, (
                f"dataset.on_device=auto: the dataset ({_mib(size)}) is kept on {device} ({_mib(free)} free)"
            )
        return STAGED, (
            f"dataset.on_device=auto: the dataset ({_mib(size)}) takes more than a quarter of the "
            f"{_mib(free)} free on {device}, so batches are staged through host memory"
        )
    why = "dataset.on_device=false" if on_device is False else "the dataset is read from its files"
    return STAGED, f"{why}: batches are staged through host memory and copied on a side stream"


@dataclass
class DeviceStore:
    """A store's samples on the device: uint8 images, int64 labels, and the host mask of samples with no
    image."""

    data: torch.Tensor
    labels: torch.Tensor
    bad: torch.Tensor | None


def place_store(store: ImageStore, device: torch.device) -> DeviceStore:
    """Copy a store to `device` once (on the CPU: the store's own tensors); its files must all be decoded."""
    data = store.resident()
    if data is None:
        raise JobError(
            "dataset.on_device: the dataset is not fully in memory; set dataset.on_device=auto or false"
        )
    try:
        # Once per job, before training: the one blocking copy of this path.
        return DeviceStore(data.to(device), store.labels.to(device), store.known_bad())
    except torch.OutOfMemoryError:
        raise JobError(
            f"dataset.on_device: the dataset ({_mib(data.numel())}) does not fit in the memory of "
            f"{device}; set dataset.on_device=auto or false"
        ) from None


# A batch as the planner hands it over: (indices within the split, indices into the store, labels), all on the
# host.
Part = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def device_batches(
    placed: DeviceStore, parts: Iterable[Part], device: torch.device
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(split indices, uint8 images, labels) gathered on the device from a DeviceStore.

    Samples known not to decode are dropped from their batch on the host, so batches are the ones the host
    path makes. All of an epoch's store indices cross in one copy; after that each batch is two gathers on the
    device.
    """
    kept = []
    for local, store_idx, _ in parts:
        if placed.bad is not None:
            ok = ~placed.bad[store_idx]
            local, store_idx = local[ok], store_idx[ok]
        if local.numel():
            kept.append((local, store_idx))
    if not kept:
        return
    flat = torch.cat([store_idx for _, store_idx in kept])
    if device.type == "cuda":
        flat = flat.pin_memory()  # pinned: the copy is truly asynchronous, and the allocator keeps it alive
    flat = to_device(flat, device)
    start = 0
    for local, store_idx in kept:
        rows = flat[start : start + store_idx.numel()]
        start += store_idx.numel()
        yield local, placed.data.index_select(0, rows), placed.labels.index_select(0, rows)


def host_batches(
    store: ImageStore, parts: Iterable[Part]
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(split indices, uint8 images, labels) gathered on the host; samples that fail to decode are dropped."""
    for local, store_idx, y in parts:
        images, ok = store.fetch(store_idx)
        if not bool(ok.all()):  # a host tensor: no device involved
            local, images, y = local[ok], images[ok], y[ok]
            if not y.numel():
                continue
        yield local, images, y


def prefetch(source: Iterator, depth: int) -> Iterator:
    """Run `source` on a background thread, `depth` items ahead; stops when the consumer does."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        # Never block for good on a consumer that has gone away: give up once it says stop.
        while not stop.is_set():
            try:
                items.put(item, timeout=POLL_S)
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
        yield from _consume(items, done)
    finally:
        stop.set()


def _consume(items: queue.Queue, done: object) -> Iterator:
    """The consumer side of a producer thread: its items until `done`, and its exception raised here, where
    the caller can see it."""
    while True:
        item = items.get()
        if item is done:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


class Staging:
    """`slots` reused host buffers of one batch each (pinned for CUDA, so copies from them are asynchronous).

    Pinning a fresh tensor every batch cost more than it saved; these are allocated once per epoch's
    iterator and refilled in turn.
    """

    def __init__(
        self,
        batch_size: int,
        shape: tuple[int, ...],
        device: torch.device,
        *,
        pin: bool,
        slots: int = STAGING_SLOTS,
    ):
        pin = pin and device.type == "cuda"
        self.images = [
            torch.empty((batch_size, *shape), dtype=torch.uint8, pin_memory=pin) for _ in range(slots)
        ]
        self.labels = [torch.empty(batch_size, dtype=torch.int64, pin_memory=pin) for _ in range(slots)]
        self.pinned = pin
        self.copied: list = [None] * slots  # CUDA: the event after the last copy out of each slot
        self.free: queue.Queue = queue.Queue()
        for slot in range(slots):
            self.free.put(slot)


def _gather(
    store: ImageStore,
    staging: Staging,
    slot: int,
    local: torch.Tensor,
    store_idx: torch.Tensor,
    y: torch.Tensor,
) -> tuple[torch.Tensor, int] | None:
    """Fetch a batch's images and labels into the staging slot; returns its split indices and size, without
    the samples that could not be read (moved up to close the gaps), or None when none could."""
    images, labels = staging.images[slot], staging.labels[slot]
    n = store_idx.numel()
    ok = store.fetch_into(store_idx, images)
    labels[:n].copy_(y)
    if not bool(ok.all()):
        local = local[ok]
        kept = int(ok.sum())
        images[:kept] = images[:n][ok]
        labels[:kept] = labels[:n][ok]
        n = kept
        if not n:
            return None
    return local, n


def _staged_item(
    staging: Staging, slot: int, local: torch.Tensor, n: int, device: torch.device, side
) -> tuple:
    """What the consumer is handed for a filled slot: on CUDA the batch copied to the device on the side
    stream with the event that ends the copy; on the CPU the slot's images themselves and a copy of its
    labels."""
    images, labels = staging.images[slot], staging.labels[slot]
    if side is not None:
        with torch.cuda.stream(side):
            x_dev = images[:n].to(device, non_blocking=True)
            y_dev = labels[:n].to(device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(side)
        staging.copied[slot] = event
        # Free to refill once `event` has passed: the producer waits on it before refilling.
        return (local, x_dev, y_dev, event, slot)
    return (local, images[:n], labels[:n].clone(), None, slot)


def staged_batches(
    store: ImageStore, parts: list[Part], batch_size: int, device: torch.device, *, pin: bool
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, object]]:
    """(split indices, uint8 images on `device`, labels on `device`, release) for each planned batch.

    A background thread gathers each batch into a free staging slot and, on CUDA, copies it to the device on a
    side stream; the consumer makes its own stream wait for that copy (wait_event), tells the allocator the
    tensors are used there (record_stream), and calls `release()` once it no longer reads the slot (at once on
    CUDA, where it reads the device copy; after converting the images on the CPU, where it reads the slot
    itself).
    """
    cuda = device.type == "cuda"
    staging = Staging(batch_size, store.shape, device, pin=pin)
    side = torch.cuda.Stream(device) if cuda else None
    ready: queue.Queue = queue.Queue(maxsize=STAGING_SLOTS)
    stop = threading.Event()
    done = object()

    def offer(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def take_slot() -> int | None:
        while not stop.is_set():
            try:
                return staging.free.get(timeout=POLL_S)
            except queue.Empty:
                continue
        return None

    def produce() -> None:
        try:
            with torch.cuda.device(device) if cuda else contextlib.nullcontext():
                for local, store_idx, y in parts:
                    slot = take_slot()
                    if slot is None:
                        return
                    if staging.copied[slot] is not None:
                        staging.copied[slot].synchronize()  # this thread waits, not the training one
                    gathered = _gather(store, staging, slot, local, store_idx, y)
                    if gathered is None:
                        staging.free.put(slot)
                        continue
                    item = _staged_item(staging, slot, *gathered, device, side)
                    if not offer(item):
                        return
            offer(done)
        except BaseException as exc:  # handed to the consumer, which raises it where the caller can see
            offer(exc)

    thread = threading.Thread(target=produce, name="batch-staging", daemon=True)
    thread.start()
    try:
        for local, x, y, event, slot in _consume(ready, done):
            if event is not None:
                stream = torch.cuda.current_stream(device)
                stream.wait_event(event)
                # Allocated on the side stream, used on this one: the allocator must not hand the memory back
                # to the side stream before this stream's work on it is done.
                x.record_stream(stream)
                y.record_stream(stream)
                staging.free.put(slot)
                yield local, x, y, None
            else:
                yield local, x, y, lambda slot=slot: staging.free.put(slot)
    finally:
        stop.set()
