"""Training throughput of the workbench engine vs. the plain loop of the PyTorch tutorial, as a ratio.

The reference is the quickstart loop: a per-sample `DataLoader` over a `TensorDataset` of the same (already
normalised) training split, shuffled, `loss.item()` every step. Both train the same `cnn` (same seed, Adam, the
same batch size and epochs) on the same device; both are timed over their training loops only (no validation),
in samples per second. Runs are interleaved and the medians of the repeats are compared. Goal: >= 1.0 with the
default TrainSpec and >= 1.3 with the best options this device offers (bf16 autocast, channels-last).

The default data is `fake` 3x28x28 (3,200 training images): digits is too small to time here, since an 8x8 step
takes ~4 ms, an epoch 0.1 s, and per-epoch bookkeeping then outweighs what the loops differ in (`--data digits`
runs it anyway).

    .venv/bin/python benchmarks/train_overhead.py [--data fake|digits] [--epochs N] [--repeats R]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from workbench.specs import DataSpec, ModelSpec, TrainSpec
from workbench.worker.data import load_dataset
from workbench.worker.models import build_model
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task
from workbench.worker.training.devices import check_amp, resolve_device


def datasets(kind: str) -> dict:
    if kind == "digits":
        return {"name": "digits"}
    # 28x28 images, 3 channels (the fake dataset's own), ten classes: enough work per step to time on a CPU.
    return {"name": "fake", "size": 4000, "image_size": [28, 28], "num_classes": 10}


def plain_loop(data: dict, *, epochs: int, batch_size: int, seed: int, device: torch.device, workspace: str) -> float:
    """The tutorial's loop; returns training samples per second."""
    dataset = load_dataset(DataSpec.from_dict(data), workspace=workspace)
    split = dataset.splits["train"]
    mean, std = dataset.normalization()
    images = split.images(torch.arange(len(split))).float().div(255)
    x = (images - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)
    loader = DataLoader(TensorDataset(x, split.labels), batch_size=batch_size, shuffle=True)
    torch.manual_seed(seed)
    model = build_model(ModelSpec(name="cnn", num_classes=len(dataset.classes)), input_shape=dataset.sample_shape)
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    elapsed, samples = 0.0, 0
    for _ in range(epochs):
        model.train()
        started = time.perf_counter()
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss.item()  # the tutorial reads the loss back every step
            samples += len(yb)
        elapsed += time.perf_counter() - started
    return samples / elapsed


def workbench_loop(data: dict, options: dict, *, epochs: int, batch_size: int, seed: int, device: str,
                   workspace: str) -> float:
    spec = {"dataset": data, "model": {"name": "cnn"}, "epochs": epochs, "batch_size": batch_size, "seed": seed,
            "device": device, **options}
    result = run_task(get_task("train.classifier"), spec, emit=lambda *args: None, workspace=workspace)
    if result["status"] != "done":
        raise SystemExit(f"workbench run failed: {result.get('error')}")
    return result["throughput"]["train_samples_per_s"]


def best_candidates(device: torch.device) -> list[dict]:
    """Option sets worth trying here; the fastest one is reported as "best"."""
    candidates = [{"channels_last": True}]
    for amp in (("bf16", "fp16") if device.type == "cuda" else ("bf16",)):
        try:
            check_amp(amp, device)
        except Exception:
            continue
        candidates += [{"amp": amp}, {"amp": amp, "channels_last": True}]
    return candidates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", choices=("fake", "digits"), default="fake")
    parser.add_argument("--epochs", type=int, default=0, help="default: 2 for fake, 10 for digits")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=TrainSpec().batch_size)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args(argv)
    epochs = args.epochs or (10 if args.data == "digits" else 2)
    device = resolve_device(args.device)
    data = datasets(args.data)
    candidates = best_candidates(device)
    labels = ["default"] + [", ".join(f"{k}={v}" for k, v in c.items()) for c in candidates]
    runs: dict[str, list[float]] = {"plain": [], **{label: [] for label in labels}}
    with tempfile.TemporaryDirectory() as workspace:
        # One untimed round first: loads the dataset into the worker cache and warms up allocators and kernels.
        plain_loop(data, epochs=1, batch_size=args.batch_size, seed=0, device=device, workspace=workspace)
        workbench_loop(data, {}, epochs=1, batch_size=args.batch_size, seed=0, device=args.device, workspace=workspace)
        for repeat in range(args.repeats):
            runs["plain"].append(plain_loop(data, epochs=epochs, batch_size=args.batch_size, seed=repeat,
                                            device=device, workspace=workspace))
            for label, options in zip(labels, [{}] + candidates):
                runs[label].append(workbench_loop(data, options, epochs=epochs, batch_size=args.batch_size,
                                                  seed=repeat, device=args.device, workspace=workspace))
            print(f"repeat {repeat + 1}/{args.repeats}: " +
                  ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in runs.items()), file=sys.stderr)
    median = {label: statistics.median(values) for label, values in runs.items()}
    best = max(labels[1:], key=median.get)
    print(f"device {device}, {torch.get_num_threads()} threads; data {args.data}; cnn; batch {args.batch_size}; "
          f"{epochs} epoch(s) per run; medians of {args.repeats} interleaved repeats (training samples/s)")
    print(f"  plain tutorial loop (DataLoader per sample, loss.item() every step): {median['plain']:,.0f}/s")
    for label in labels:
        print(f"  workbench, {label:<30} {median[label]:>10,.0f}/s   ratio {median[label] / median['plain']:.2f}")
    print(f"default settings: ratio {median['default'] / median['plain']:.2f} (goal >= 1.0)")
    print(f"best options ({best}): ratio {median[best] / median['plain']:.2f} (goal >= 1.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
