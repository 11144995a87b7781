"""Training throughput on an ImageFolder that streams from its files, against torchvision's ImageFolder +
DataLoader, as ratios measured in the same run (medians of interleaved repeats; these machines are shared and
noisy, so read ratios, not figures).

A folder of real JPEG files (CLASSES class folders, random smooth-plus-noise content at 64x64) is written to a
temp dir. The workbench keeps a folder whose decoded images fit half the available memory in memory, and
streams the rest from the files; to measure the streaming path on a small folder, the workbench's rows
SIMULATE A FOLDER LARGER THAN MEMORY: `workbench.worker.data.stores.available_memory` is patched (in the
process that runs the task) to report just enough for STREAM_IMAGES decoded images, and the decoded-image
cache (`imagefolder.LRU_BYTES`, 256 MB, which would otherwise hold this whole small folder from the second
epoch on) to the same STREAM_IMAGES, the share a real folder many times its size would get. Every row then
decodes every image of every epoch from its file, as the torchvision rows do.

Rows: torchvision's `ImageFolder` (ToTensor + Normalize) through a `DataLoader` with num_workers=2 (the
reference) and 0 (the old workbench default's counterpart), with a plain loop (forward, cross-entropy,
backward, Adam step); then the workbench's real `train.classifier` task (run_task, in-process, as the worker
runs it) with dataset.num_workers=0 and auto (the default). All train the workbench's small `cnn` from the
same seed with Adam (lr 1e-3), batch 64, one epoch a run, timed over the steps after the first WARMUP_STEPS =
5 (the workbench reports that itself: its warm-up ends at its first loss read-back at or after step 5, so its
rows read losses back every 5 steps, `log_every_steps=5`, not 20: a read-back is a no-op wait on the CPU, and
20 warm-up steps would double the run). The workbench rows keep its other defaults: channels_last=auto picks a
layout by a timed trial, which the plain loop does not get (the "memory layout" line the task logs is printed,
with its "batches" line, which says how many loaders it used). Each run is a fresh Python process, as a user's
script is; one untimed workbench run first reads every file (the page cache) and leaves its layout trial and
the folder's statistics in the shared workspace.

Two figures say how much loading can matter at all: "loading alone" (the same rows' batches for one epoch with
no model, all four in one fresh process a repeat), and one batch's data work in one thread against a whole
step. Where the step costs far more than its batch's data work, loaders can save little, whatever their count.

    .venv/bin/python benchmarks/stream_loading.py [--images 1500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLASSES = 3
SIZE = 64
BATCH_SIZE = 64
EPOCHS = 1
LR = 1e-3
WARMUP_STEPS = 5  # the workbench's warm-up: 5 steps, ended at its first read-back (log_every_steps = 5 here)
STREAM_IMAGES = 64  # decoded images the simulated memory (and the decoded-image cache) has room for
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # what a torchvision script usually normalises with
REFERENCE = "torchvision DataLoader, num_workers=2"
WARM_UP_ROW = "workbench, dataset.num_workers=auto"


def make_folder(root: Path, images: int) -> None:
    """`images` JPEGs of SIZE x SIZE in CLASSES class folders: a random 8x8 pattern scaled up, plus noise, so
    files compress and decode like small photos rather than pure noise. Written once per size and reused."""
    import numpy as np
    from PIL import Image

    done = root / ".complete"
    if done.exists():
        return
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = root / f"class_{i % CLASSES}"
        folder.mkdir(parents=True, exist_ok=True)
        coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).resize(
            (SIZE, SIZE), Image.Resampling.BILINEAR
        )
        pixels = np.asarray(coarse, dtype=np.int16) + rng.integers(-20, 21, (SIZE, SIZE, 3), dtype=np.int16)
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(folder / f"img_{i:05d}.jpg", quality=90)
    done.touch()


class _Clock:
    """Samples/s over the steps after the first WARMUP_STEPS (CPU only: no device to wait for)."""

    def __init__(self):
        self.steps = 0
        self.samples = 0
        self.started = None

    def step(self, n: int) -> None:
        self.steps += 1
        if self.steps == WARMUP_STEPS:
            self.started = time.perf_counter()
        elif self.steps > WARMUP_STEPS:
            self.samples += n

    def rate(self) -> float:
        if self.started is None or not self.samples:
            raise SystemExit(
                f"too few steps to time: {self.steps} ran, {WARMUP_STEPS} are warm-up; use more --images"
            )
        return self.samples / (time.perf_counter() - self.started)


def torchvision_loop(root: str, workers: int, *, epochs: int, seed: int, workspace: str) -> float:
    """The script a user would write: torchvision's ImageFolder and DataLoader, a plain Adam loop."""
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model

    dataset = datasets.ImageFolder(
        root, transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    )
    torch.manual_seed(seed)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
    model = build_model(ModelSpec(name="cnn", num_classes=len(dataset.classes)), input_shape=(3, SIZE, SIZE))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = _Clock()
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            clock.step(len(y))
    return clock.rate()


def _epoch_rate(batches) -> float:
    """Samples/s of one pass over `batches` (an iterable of (x, y)), nothing done with them."""
    start, samples = time.perf_counter(), 0
    for _, y in batches:
        samples += len(y)
    return samples / (time.perf_counter() - start)


def torchvision_load(root: str, workers: int, *, seed: int, workspace: str, **_) -> float:
    """Loading alone: the second epoch of the DataLoader above, no model."""
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    dataset = datasets.ImageFolder(
        root, transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    )
    torch.manual_seed(seed)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=workers)
    _epoch_rate(loader)
    return _epoch_rate(loader)


def workbench_load(root: str, workers, *, seed: int, workspace: str, **_) -> float:
    """Loading alone: the second epoch of the training split's batches, as the task draws them, no model."""
    from workbench.specs import DataSpec
    from workbench.worker.data import load_dataset

    simulate_folder_larger_than_memory()
    dataset = load_dataset(DataSpec.from_dict(_data_spec(root, workers)), workspace=workspace)
    if dataset.in_memory:
        raise SystemExit("the simulated memory did not take: the folder is held in memory in this run")
    split = dataset.splits["train"]
    for epoch in range(2):
        rate = _epoch_rate(split.batches(BATCH_SIZE, shuffle=True, seed=seed, epoch=epoch, device="cpu"))
    return rate


def batch_data_seconds(root: Path) -> float:
    """One batch's data work in one thread as torchvision does it (open and decode BATCH_SIZE files, ToTensor,
    Normalize, stack): the share of a step that loaders can take off the training loop. Median of 5."""
    import torch
    from PIL import Image
    from torchvision import transforms

    files = sorted(root.rglob("*.jpg"))[:BATCH_SIZE]
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    times = []
    for _ in range(5):
        start = time.perf_counter()
        torch.stack([transform(Image.open(f).convert("RGB")) for f in files])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def simulate_folder_larger_than_memory() -> None:
    """In this process: the memory the workbench sees has room for STREAM_IMAGES decoded images (its budget is
    half of it), and so has its decoded-image cache; a folder of more images streams from its files."""
    from workbench.worker.data import imagefolder, stores

    room = stores.nbytes(STREAM_IMAGES, (3, SIZE, SIZE))
    stores.available_memory = lambda: 2 * room
    imagefolder.LRU_BYTES = room


def _data_spec(root: str, workers) -> dict:
    return {
        "name": "imagefolder",
        "root": root,
        "num_workers": workers,
        "image_size": [SIZE],
        "val_fraction": 0.0,
        "test_fraction": 0.0,
    }


def workbench_loop(root: str, workers, *, epochs: int, seed: int, workspace: str) -> float:
    """The workbench's own train.classifier task, run in this process as the worker runs it."""
    from workbench.specs import DataSpec
    from workbench.worker.data import load_dataset
    from workbench.worker.host_memory import keep_freed_memory
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    keep_freed_memory()  # as the worker and `workbench train` do at their start, before any thread
    simulate_folder_larger_than_memory()
    logged: list[str] = []

    def emit(kind, payload, *_):
        if kind == "log":
            logged.append(payload.get("text", ""))

    data = _data_spec(root, workers)
    # The same dataset the task loads (the process's dataset cache hands the task this one): it must stream,
    # or the row would measure the in-memory path.
    if load_dataset(DataSpec.from_dict(data), workspace=workspace).in_memory:
        raise SystemExit("the simulated memory did not take: the folder is held in memory in this run")
    spec = {
        "dataset": data,
        "model": {"name": "cnn"},
        "epochs": epochs,
        "batch_size": BATCH_SIZE,
        "seed": seed,
        "device": "cpu",
        "optimizer": "adam",
        "lr": LR,
        "log_every_steps": WARMUP_STEPS,
    }
    result = run_task(get_task("train.classifier"), spec, emit=emit, workspace=workspace)
    if result["status"] != "done":
        raise SystemExit(f"workbench run failed: {result.get('error')}")
    for text in logged:
        if text.startswith(("batches:", "memory layout:")):
            print(f"LOG {text}")
    return result["throughput"]["train_samples_per_s"]


ROWS = {
    REFERENCE: lambda root, **kw: torchvision_loop(root, 2, **kw),
    "torchvision DataLoader, num_workers=0": lambda root, **kw: torchvision_loop(root, 0, **kw),
    "workbench, dataset.num_workers=0": lambda root, **kw: workbench_loop(root, 0, **kw),
    "workbench, dataset.num_workers=auto": lambda root, **kw: workbench_loop(root, "auto", **kw),
}
LOAD_ROWS = {  # the same rows' data alone: how fast each can feed a model that costs nothing
    REFERENCE: lambda root, **kw: torchvision_load(root, 2, **kw),
    "torchvision DataLoader, num_workers=0": lambda root, **kw: torchvision_load(root, 0, **kw),
    "workbench, dataset.num_workers=0": lambda root, **kw: workbench_load(root, 0, **kw),
    "workbench, dataset.num_workers=auto": lambda root, **kw: workbench_load(root, "auto", **kw),
}


def _child(args: list[str], what: str) -> list[str]:
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-4000:]}{done.stdout[-2000:]}")
    return done.stdout.strip().splitlines()


def _run_row(label: str, root: Path, workspace: str, *, seed: int, epochs: int) -> tuple[float, list[str]]:
    """One training row in a fresh Python process; returns its samples/s and the log lines it printed."""
    lines = _child(
        [
            "--one-row",
            label,
            "--root",
            str(root),
            "--workspace",
            workspace,
            "--seed",
            str(seed),
            "--epochs",
            str(epochs),
        ],
        f"row {label!r}",
    )
    return float(lines[-1]), [line[4:] for line in lines if line.startswith("LOG ")]


def _run_loads(root: Path, workspace: str, *, seed: int) -> dict[str, float]:
    """Every loading-alone row, one after another in one fresh process (no model: nothing of one row's heap or
    threads slows the next, and a process start here costs more than all four rows)."""
    lines = _child(
        ["--load-only", "--root", str(root), "--workspace", workspace, "--seed", str(seed)], "loading alone"
    )
    return {label: float(value) for label, value in zip(LOAD_ROWS, lines[-len(LOAD_ROWS) :])}


def _one_row(args) -> int:
    """The child's side of `_run_row`: run one row and print its samples/s last."""
    print(ROWS[args.one_row](args.root, epochs=args.epochs, seed=args.seed, workspace=args.workspace))
    return 0


def _loads(args) -> int:
    """The child's side of `_run_loads`: every loading-alone row, one samples/s a line, in LOAD_ROWS'
    order."""
    rates = [run(args.root, seed=args.seed, workspace=args.workspace) for run in LOAD_ROWS.values()]
    print("\n".join(map(str, rates)))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1500, help="JPEG files written (CLASSES classes)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one-row", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--epochs", type=int, default=EPOCHS, help=argparse.SUPPRESS)
    parser.add_argument("--load-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_row:
        return _one_row(args)
    if args.load_only:
        return _loads(args)

    import os

    import torch

    started = time.perf_counter()
    root = Path(tempfile.gettempdir()) / f"workbench-bench-stream-{CLASSES}x{args.images}-{SIZE}px"
    make_folder(root, args.images)
    files = sum(1 for _ in root.rglob("*.jpg"))
    print(
        f"folder: {files:,} JPEGs of {SIZE}x{SIZE} in {CLASSES} classes under {root} "
        f"(ready in {time.perf_counter() - started:.1f} s)"
    )
    print(
        f"SIMULATED: the workbench's rows see memory for {STREAM_IMAGES} decoded images (budget: half of it) "
        f"and cache {STREAM_IMAGES}, so this folder streams from its files as one larger than memory would"
    )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"cpu: {cores} usable cores, {torch.get_num_threads()} torch threads; cnn, batch {BATCH_SIZE}, Adam; "
        f"{EPOCHS} epoch(s) a run, timed after {WARMUP_STEPS} steps; medians of {args.repeats} interleaved "
        "repeats, each run a fresh process"
    )
    data_s = batch_data_seconds(root)
    runs: dict[str, list[float]] = {label: [] for label in ROWS}
    loads: dict[str, list[float]] = {label: [] for label in LOAD_ROWS}
    logs: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as workspace:
        # Untimed, once: reads every file (the page cache, for every row) and leaves the workbench's layout
        # trial and the folder's statistics in the shared workspace, as a user's workspace has them after a
        # first run.
        _run_row(WARM_UP_ROW, root, workspace, seed=0, epochs=1)
        for repeat in range(args.repeats):
            for label in ROWS:
                rate, lines = _run_row(label, root, workspace, seed=repeat, epochs=EPOCHS)
                runs[label].append(rate)
                logs.setdefault(label, lines)
                print(
                    f"  repeat {repeat + 1}/{args.repeats}: {label} {rate:,.1f}/s",
                    file=sys.stderr,
                    flush=True,
                )
            for label, rate in _run_loads(root, workspace, seed=repeat).items():
                loads[label].append(rate)
    median = {label: statistics.median(values) for label, values in runs.items()}
    loading = {label: statistics.median(values) for label, values in loads.items()}
    reference = median[REFERENCE]
    print(
        f"  {'row':<40} {'training samples/s':>18}   vs reference   {'loading alone samples/s':>23}   vs "
        "reference"
    )
    for label, value in median.items():
        print(
            f"  {label:<40} {value:>18,.1f}   {value / reference:>11.2f}x   {loading[label]:>23,.0f}   "
            f"{loading[label] / loading[REFERENCE]:>11.2f}x"
        )
    print(
        f"  (reference: {REFERENCE}; loading alone: one epoch of the same batches with no model, after one "
        "untimed)"
    )
    auto, zero = "workbench, dataset.num_workers=auto", "workbench, dataset.num_workers=0"
    print(
        f"workbench auto / workbench 0: {median[auto] / median[zero]:.2f}x training, "
        f"{loading[auto] / loading[zero]:.2f}x loading alone"
    )
    step_s = BATCH_SIZE / median["torchvision DataLoader, num_workers=0"]
    print(
        f"one batch's data work in one thread (decode {BATCH_SIZE} files, ToTensor, Normalize): "
        f"{data_s * 1000:,.0f} ms, {data_s / step_s:.1%} of a whole step of the num_workers=0 reference "
        f"({step_s * 1000:,.0f} ms), about the most that loading ahead of the step can save here"
    )
    for label, lines in logs.items():
        for text in lines:
            print(f"  [{label}] {text}")
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
