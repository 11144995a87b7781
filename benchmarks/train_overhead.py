"""Training throughput of the workbench engine against the loops users would write instead, as ratios measured
in the same run (medians of interleaved repeats; these machines are shared and noisy, so read ratios, not
figures).

Section "host" (any device; issue 14, item 25): the tutorial loop (a per-sample `DataLoader` over a
`TensorDataset` of the normalised training split, `.to(device)` and `loss.item()` every step) is the
reference; Lightning's `Trainer` (no logger, progress bar, checkpointing or model summary) is a peer row when
`lightning` is importable (an optional dependency of this script only: `pip install lightning`); then the
workbench with its defaults and with other options. Goal: default >= 1.2x the tutorial loop and >= 1.1x
Lightning.

Section "cuda" (skipped with a message where CUDA is missing; issue 12): the reference is a plain loop whose
data is already on the GPU (normalised float32, gathered by a random permutation), fp32; then the workbench.
Goal: default >= 0.9x the plain loop, and faster with bf16 and channels-last, as the plain loop gets.

Every loop trains the same model from the same seed with SGD (momentum 0.9), the same batches per step and the
same data; each is timed over its steps after the first WARMUP_STEPS (the workbench reports that itself:
`throughput.train_samples_per_s`, with warm-up and compilation apart). Each run is a fresh Python process, as
a user's script is; the workbench's rows apply the heap settings its worker and `workbench train` start with
(`workbench/worker/host_memory.py`). Rows marked [bf16: changes precision] are
not like-for-like with fp32 rows.

Section "user" (issue #20): see benchmarks/user_rows.py; the reference is a plain DataLoader loop over the
same user Dataset with the same 2 workers.

Section "layers" (issue #21, part 2): the cost of recording layer statistics. The reference is the workbench
with `layer_stats_every=0`; then its default (every 50 steps, and step 1) and every 10 steps, on the device
torch has (cuda where there is one). Goal: the default within 3 % (>= 0.97x).

Section "lightning" (issue #20): see benchmarks/lightning_rows.py; the reference is the same LightningModule
under a bare Lightning Trainer (no logger, progress bar, checkpointing or model summary). Goal: within 1.05x.

    .venv/bin/python benchmarks/train_overhead.py [--section host|cuda|user|layers|lightning|all] [--model torchvision:resnet18|cnn]
        [--size 32] [--batch-size 128] [--epochs 2] [--repeats 3]
"""  # noqa: E501

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
from lightning_rows import lightning_rows  # noqa: E402  (beside this script, as user_rows)
from torch.utils.data import DataLoader, TensorDataset
from user_rows import user_rows  # noqa: E402  (beside this script: python benchmarks/train_overhead.py)

from workbench.specs import DataSpec, ModelSpec
from workbench.worker.data import load_dataset
from workbench.worker.devices import check_amp
from workbench.worker.host_memory import keep_freed_memory
from workbench.worker.models import build_model
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

WARMUP_STEPS = 20  # the workbench's default warm-up ends at its first read-back (log_every_steps = 20)
LR, MOMENTUM = 0.01, 0.9
PRECISION = " [bf16: changes precision]"


def data_spec(size: int, samples: int) -> dict:
    return {"name": "fake", "size": samples, "image_size": [size, size], "num_classes": 10}


def _train_tensors(data: dict, workspace: str):
    dataset = load_dataset(DataSpec.from_dict(data), workspace=workspace)
    split = dataset.splits["train"]
    mean, std = dataset.normalization()
    images = split.images(torch.arange(len(split))).float().div(255)
    x = (images - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)
    return x, split.labels, dataset.sample_shape


def _model(name: str, shape, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return build_model(ModelSpec(name=name, num_classes=10), input_shape=shape)


class _Clock:
    """Samples/s over the steps after the first WARMUP_STEPS; `sync` makes the clock wait for an async
    device."""

    def __init__(self, device: torch.device):
        self.device = device
        self.steps = 0
        self.samples = 0
        self.started = None

    def step(self, n: int) -> None:
        self.steps += 1
        if self.steps == WARMUP_STEPS:
            self._sync()
            self.started = time.perf_counter()
        elif self.steps > WARMUP_STEPS:
            self.samples += n

    def rate(self) -> float:
        self._sync()
        return self.samples / (time.perf_counter() - self.started)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def tutorial_loop(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    """The PyTorch quickstart's loop."""
    x, y, shape = _train_tensors(data, workspace)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    model = _model(model_name, shape, seed).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = _Clock(device)
    for _ in range(epochs):
        model.train()
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            loss.item()  # the tutorial reads the loss back every step
            clock.step(len(yb))
    return clock.rate()


def lightning_loop(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    """Lightning's Trainer as its docs set it up, with everything that writes files or draws turned off."""
    import lightning as L

    # Lightning's banners and tips go to its loggers; a benchmark prints only its figures.
    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    x, y, shape = _train_tensors(data, workspace)
    loader = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=True)
    clock = _Clock(device)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _model(model_name, shape, seed)

        def training_step(self, batch, batch_idx):
            xb, yb = batch
            return torch.nn.functional.cross_entropy(self.net(xb), yb)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR, momentum=MOMENTUM)

    class Timing(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            clock.step(len(batch[1]))

    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Timing()],
    )
    trainer.fit(Module(), loader)
    return clock.rate()


def plain_device_loop(
    data, model_name, *, epochs, batch_size, seed, device, workspace, bf16=False, channels_last=False
) -> float:
    """A plain loop with the data already on the GPU: the reference of the CUDA section."""
    x, y, shape = _train_tensors(data, workspace)
    x, y = x.to(device), y.to(device)
    model = _model(model_name, shape, seed).to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    generator = torch.Generator(device=device).manual_seed(seed)
    clock = _Clock(device)
    for _ in range(epochs):
        order = torch.randperm(len(y), device=device, generator=generator)
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            clock.step(len(idx))
    return clock.rate()


def workbench_loop(data, model_name, options, *, epochs, batch_size, seed, device, workspace) -> float:
    spec = {
        "dataset": {**data, **options.pop("dataset", {})},
        "model": {"name": model_name},
        "epochs": epochs,
        "batch_size": batch_size,
        "seed": seed,
        "device": str(device),
        "optimizer": "sgd",
        "lr": LR,
        "momentum": MOMENTUM,
        **options,
    }
    result = run_task(get_task("train.classifier"), spec, emit=lambda *args: None, workspace=workspace)
    if result["status"] != "done":
        raise SystemExit(f"workbench run failed: {result.get('error')}")
    return result["throughput"]["train_samples_per_s"]


def _measure(section: str, rows: dict, args, workspace) -> tuple[dict[str, float], dict[str, float]]:
    """Run every row once untimed (data cache, the layout trial), then `repeats` interleaved rounds, each run
    in a fresh Python process as a user's script or the workbench's worker runs (a heap that one row leaves
    behind must not speed up or slow down the next); returns the medians and the bests (other work on a shared
    machine only slows a run: the best is its least disturbed one)."""
    runs: dict[str, list[float]] = {label: [] for label in rows}
    for label in rows:
        _run_row(section, label, args, workspace, seed=0, epochs=1)
    for repeat in range(args.repeats):
        for label in rows:
            runs[label].append(_run_row(section, label, args, workspace, seed=repeat, epochs=args.epochs))
        print(
            f"  repeat {repeat + 1}/{args.repeats}: "
            + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in runs.items()),
            file=sys.stderr,
        )
    return (
        {label: statistics.median(values) for label, values in runs.items()},
        {label: max(values) for label, values in runs.items()},
    )


def _run_row(section: str, label: str, args, workspace: str, *, seed: int, epochs: int) -> float:
    command = [
        sys.executable,
        __file__,
        "--one-row",
        section,
        label,
        "--seed",
        str(seed),
        "--epochs",
        str(epochs),
        "--workspace",
        workspace,
        "--model",
        args.model,
        "--size",
        str(args.size),
        "--samples",
        str(args.samples),
        "--batch-size",
        str(args.batch_size),
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"row {label!r} failed:\n{done.stderr[-4000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def _one_row(args) -> int:
    """The child's side of `_run_row`: run one row and print its samples/s."""
    section, label = args.one_row
    device = torch.device(
        "cuda" if section == "cuda" or (section == "layers" and torch.cuda.is_available()) else "cpu"
    )
    rows = {"cuda": cuda_rows, "user": user_rows, "lightning": lightning_rows, "layers": layer_rows}.get(
        section, lambda: host_rows(args.peers_only)
    )()
    run = rows[label]
    rate = run(
        data_spec(args.size, args.samples),
        args.model,
        epochs=args.epochs,
        batch_size=args.batch_size,
        seed=args.seed,
        device=device,
        workspace=args.workspace,
    )
    print(rate)
    return 0


def _wb(options: dict, *, heap_settings: bool = True):
    def run(data, model, **kw):
        if heap_settings:  # as the worker and `workbench train` do at their start, before any thread
            keep_freed_memory()
        return workbench_loop(data, model, dict(options), **kw)

    return run


def host_rows(peers_only: bool) -> dict:
    rows = {"tutorial loop": tutorial_loop}
    if importlib.util.find_spec("lightning") is not None:
        rows["Lightning Trainer"] = lightning_loop
    rows["workbench, default"] = _wb({})
    if not peers_only:
        rows["workbench, default, glibc's own heap settings"] = _wb({}, heap_settings=False)
        rows["workbench, channels_last=false"] = _wb({"channels_last": False})
        rows["workbench, channels_last=true"] = _wb({"channels_last": True})
        try:
            check_amp("bf16", torch.device("cpu"))
            rows["workbench, amp=bf16" + PRECISION] = _wb({"amp": "bf16"})
        except Exception:
            pass
    return rows


def host_section(args, workspace) -> None:
    rows = host_rows(args.peers_only)
    has_lightning = "Lightning Trainer" in rows
    print(
        f"host section: cpu, {torch.get_num_threads()} threads; {args.model} on {args.size}x{args.size}, "
        f"batch {args.batch_size}, SGD; {args.epochs} epoch(s) of {int(args.samples * 0.8):,} samples a run, "
        f"timed after {WARMUP_STEPS} steps; medians of {args.repeats} interleaved repeats"
    )
    median, best = _measure("host", rows, args, workspace)
    print("  row: median samples/s, ratios of medians (ratios of the bests in brackets)")
    for label, value in median.items():
        ratio = (
            f"{value / median['tutorial loop']:.2f}x ({best[label] / best['tutorial loop']:.2f}x) tutorial"
        )
        if has_lightning:
            ratio += (
                f"   {value / median['Lightning Trainer']:.2f}x "
                f"({best[label] / best['Lightning Trainer']:.2f}x) Lightning"
            )
        print(f"  {label:<48} {value:>9,.0f}/s   {ratio}")
    if not has_lightning:
        print("  (Lightning row skipped: `lightning` is not installed; `pip install lightning` to add it)")
    default = median["workbench, default"]
    text = f"default: {default / median['tutorial loop']:.2f}x the tutorial loop (goal >= 1.2)"
    if has_lightning:
        text += f", {default / median['Lightning Trainer']:.2f}x Lightning (goal >= 1.1)"
    print(text)


def cuda_rows() -> dict:
    rows = {
        "plain loop, data on the GPU, fp32": plain_device_loop,
        "plain loop, bf16 + channels_last" + PRECISION: lambda *a, **kw: plain_device_loop(
            *a, **kw, bf16=True, channels_last=True
        ),
        "tutorial loop": tutorial_loop,
        "workbench, default": _wb({}),
        "workbench, dataset.on_device=false (pinned staging)": _wb({"dataset": {"on_device": False}}),
        "workbench, amp=bf16" + PRECISION: _wb({"amp": "bf16"}),
        "workbench, amp=bf16, channels_last=true" + PRECISION: _wb({"amp": "bf16", "channels_last": True}),
    }
    if importlib.util.find_spec("lightning") is not None:
        rows["Lightning Trainer"] = lightning_loop
    return rows


def cuda_section(args, workspace) -> None:
    if not torch.cuda.is_available():
        print("cuda section skipped: torch sees no CUDA device here")
        return
    device = torch.device("cuda")
    rows = cuda_rows()
    print(
        f"cuda section: {torch.cuda.get_device_name(device)}; {args.model} on {args.size}x{args.size}, batch "
        f"{args.batch_size}, SGD; timed after {WARMUP_STEPS} steps; medians of {args.repeats} interleaved "
        "repeats"
    )
    median, best = _measure("cuda", rows, args, workspace)
    reference = median["plain loop, data on the GPU, fp32"]
    best_reference = best["plain loop, data on the GPU, fp32"]
    for label, value in median.items():
        print(
            f"  {label:<58} {value:>9,.0f}/s   {value / reference:.2f}x "
            f"({best[label] / best_reference:.2f}x) the plain on-device loop"
        )
    print(f"default: {median['workbench, default'] / reference:.2f}x the plain on-device loop (goal >= 0.9)")


def user_section(args, workspace) -> None:
    print(
        f"user section: cpu, {torch.get_num_threads()} threads; a user Dataset whose __getitem__ spins 2 ms, "
        f"2 DataLoader workers, a small CNN on 3x32x32, batch {args.batch_size}, SGD; {args.epochs} epoch(s) "
        f"of 2,000 samples a run; medians of {args.repeats} interleaved repeats"
    )
    median, best = _measure("user", user_rows(), args, workspace)
    reference, best_reference = (
        median["plain DataLoader loop, 2 workers"],
        best["plain DataLoader loop, 2 workers"],
    )
    for label, value in median.items():
        print(
            f"  {label:<58} {value:>9,.0f}/s   {value / reference:.2f}x "
            f"({best[label] / best_reference:.2f}x) the plain DataLoader loop"
        )
    ratio = median["workbench, file: dataset, num_workers=2"] / reference
    print(f"file: dataset: {ratio:.2f}x the plain DataLoader loop (goal >= 0.91, i.e. within 1.1x)")


def layer_rows() -> dict:
    return {
        "workbench, layer_stats_every=0": _wb({"layer_stats_every": 0}),
        "workbench, default (layer_stats_every=50)": _wb({}),
        "workbench, layer_stats_every=10": _wb({"layer_stats_every": 10}),
    }


def layers_section(args, workspace) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(
        f"layers section: {device}; {args.model} on {args.size}x{args.size}, batch {args.batch_size}, SGD; "
        f"{args.epochs} epoch(s) of {int(args.samples * 0.8):,} samples a run; medians of {args.repeats} "
        "interleaved repeats"
    )
    median, best = _measure("layers", layer_rows(), args, workspace)
    reference, best_reference = (
        median["workbench, layer_stats_every=0"],
        best["workbench, layer_stats_every=0"],
    )
    for label, value in median.items():
        print(
            f"  {label:<58} {value:>9,.0f}/s   {value / reference:.2f}x "
            f"({best[label] / best_reference:.2f}x) without layer statistics"
        )
    ratio = median["workbench, default (layer_stats_every=50)"] / reference
    print(f"layer statistics at the default interval: {ratio:.3f}x the run without them (goal >= 0.97)")


def lightning_section(args, workspace) -> None:
    if importlib.util.find_spec("lightning") is None:
        print(
            "lightning section skipped: `lightning` is not installed (pip install "
            "'torch-workbench[lightning]')"
        )
        return
    print(
        f"lightning section: cpu, {torch.get_num_threads()} threads; a LightningModule (small CNN on "
        f"3x32x32) with a DataModule, batch {args.batch_size}, {args.epochs} epoch(s) of 1,800 samples a "
        f"run, timed by the module after 20 steps; medians of {args.repeats} interleaved repeats"
    )
    median, best = _measure("lightning", lightning_rows(), args, workspace)
    reference, best_reference = median["bare Lightning Trainer"], best["bare Lightning Trainer"]
    for label, value in median.items():
        print(
            f"  {label:<58} {value:>9,.0f}/s   {value / reference:.2f}x "
            f"({best[label] / best_reference:.2f}x) the bare Trainer"
        )
    ratio = reference / median["workbench, lightning: model"]
    print(f"lightning: model: {ratio:.2f}x the bare Trainer's time per sample (goal <= 1.05)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--section", choices=("host", "cuda", "user", "layers", "lightning", "all"), default="all"
    )
    parser.add_argument("--model", default="torchvision:resnet18")
    parser.add_argument("--size", type=int, default=32, help="image side (fake 3-channel data)")
    parser.add_argument(
        "--samples",
        type=int,
        default=0,
        help="fake images (80%% train); default: 4,000 on the host, 40,000 on CUDA",
    )
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--peers-only",
        action="store_true",
        help="host section: only the tutorial loop, Lightning and the workbench's defaults",
    )
    parser.add_argument("--one-row", nargs=2, metavar=("SECTION", "LABEL"), help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--workspace", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_row:
        return _one_row(args)
    with tempfile.TemporaryDirectory() as workspace:
        if args.section in ("host", "all"):
            host_args = argparse.Namespace(**{**vars(args), "samples": args.samples or 4000})
            host_section(host_args, workspace)
        if args.section in ("cuda", "all"):
            cuda_args = argparse.Namespace(**{**vars(args), "samples": args.samples or 40_000})
            cuda_section(cuda_args, workspace)
        if args.section in ("layers", "all"):
            layers_samples = args.samples or (40_000 if torch.cuda.is_available() else 4000)
            layers_section(argparse.Namespace(**{**vars(args), "samples": layers_samples}), workspace)
        if args.section in ("user", "all"):
            user_section(argparse.Namespace(**{**vars(args), "samples": 2000}), workspace)
        if args.section in ("lightning", "all"):
            lightning_section(
                argparse.Namespace(**{**vars(args), "batch_size": min(args.batch_size, 64)}), workspace
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
