"""Speed of the quantization analysis on torchvision resnet18 (random weights) against torch.ao's
HistogramObserver calibration on the same data, as a ratio measured in the same run (medians of repeats).
Goal: ratio <= 1.0.

Workbench: BN folding, MSE ranges for all weights (per channel) and for every activation (one calibration
pass, then the grid search on each tensor's sample), and the histogram, every estimator's range with its SQNR,
and the clipping/rounding error split of every tensor, as the task sends them. Reference: a HistogramObserver
at each of the same activation points and a PerChannelMinMaxObserver on each weight (what a torch.ao user
would calibrate with), the same forward passes, then calculate_qparams. Accuracy evaluations (the ladder) are
not in either side; a final line times the whole `quant.analyze` task on the same images for reference, with
each stage's share of it.

    .venv/bin/python benchmarks/quant_speed.py [--images 256] [--size 224] [--batch-size 32] [--repeats 3]
        [--threads 0] [--skip-task]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import torch
from backends import random_resnet18  # the same model, random BatchNorm statistics included

from workbench.specs import ActivationQuantSpec, WeightQuantSpec
from workbench.worker.quant import analysis
from workbench.worker.quant.graph import find_structure, fold_batchnorms, trace
from workbench.worker.quant.sim import QuantSim, parallel_map


def images(count: int, size: int, batch: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 3, size, size, generator=g)
    return [
        (x[i : i + batch], torch.zeros(len(x[i : i + batch]), dtype=torch.int64))
        for i in range(0, count, batch)
    ]


def workbench_analysis(model, batches) -> tuple[float, int]:
    started = time.perf_counter()
    gm = trace(model)
    folded = fold_batchnorms(gm)
    sim = QuantSim(
        gm,
        find_structure(gm),
        folded,
        weights=WeightQuantSpec(range="mse"),
        activations=ActivationQuantSpec(range="mse"),
    )
    sim.set_weight_ranges()
    sim.calibrate(batches, seed=0)
    sim.all()
    # As the task does it: tensors side by side, one torch thread each.
    entries = parallel_map(analysis.weight_entry, sim.weights.values(), "cpu")
    entries += parallel_map(lambda state: analysis.activation_entry(sim, state), sim.points.values(), "cpu")
    arrays = sum(len(a) for a in parallel_map(lambda e: analysis.tensor_arrays(sim, e), entries, "cpu"))
    return time.perf_counter() - started, arrays


def histogram_observer_calibration(model, batches) -> float:
    from torch.ao.quantization.observer import HistogramObserver, PerChannelMinMaxObserver

    started = time.perf_counter()
    gm = trace(model)
    folded = fold_batchnorms(gm)
    structure = find_structure(gm)
    observers = {}
    for i, point in enumerate(structure.points.values()):
        observer = HistogramObserver()
        name = f"_observer_{i}"
        gm.add_submodule(name, observer)
        with gm.graph.inserting_after(point.node):
            new = gm.graph.call_module(name, (point.node,))
        point.node.replace_all_uses_with(new)
        new.args = (point.node,)
        observers[point.name] = observer
    gm.recompile()
    with torch.no_grad():
        for layer in structure.layers.values():
            weight_observer = PerChannelMinMaxObserver(
                ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric
            )
            weight_observer(layer.module.weight)
            weight_observer.calculate_qparams()
        for x, _ in batches:
            gm(x)
        for observer in observers.values():
            observer.calculate_qparams()
    del folded
    return time.perf_counter() - started


def whole_task(count: int, size: int, batch: int) -> tuple[float, dict[str, float]]:
    from workbench.worker.checkpoints import save_state_dict
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    with tempfile.TemporaryDirectory() as workspace:
        path = f"{workspace}/resnet18.pt"
        save_state_dict(random_resnet18().state_dict(), path)
        spec = {
            "model": {"name": "torchvision:resnet18", "num_classes": 1000, "checkpoint": path},
            "dataset": {
                "name": "fake",
                "size": count * 2,
                "image_size": [size, size],
                "num_classes": 1000,
                "test_fraction": 0.5,
                "val_fraction": 0.0,
            },
            "calibration": {"samples": count},
            "eval_samples": count,
            "batch_size": batch,
            "device": "cpu",
        }
        started = time.perf_counter()
        result = run_task(get_task("quant.analyze"), spec, emit=lambda *a: None, workspace=workspace)
        elapsed = time.perf_counter() - started
        assert result["status"] == "done", result.get("error")
    return elapsed, result.get("stage_s") or {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default")
    parser.add_argument("--skip-task", action="store_true", help="leave out the whole-task line")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    model = random_resnet18()
    batches = images(args.images, args.size, args.batch_size)
    ours, theirs, arrays = [], [], 0
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both sides alike
        elapsed, arrays = workbench_analysis(model, batches)
        ours.append(elapsed)
        theirs.append(histogram_observer_calibration(model, batches))
    mine, reference = statistics.median(ours), statistics.median(theirs)
    print(
        f"resnet18 (random weights), {args.images} images of 3x{args.size}x{args.size}, batch "
        f"{args.batch_size}, {torch.get_num_threads()} threads, median of {args.repeats}"
    )
    print(
        f"  workbench: MSE ranges (weights, activations), histograms + SQNR  {mine:8.2f} s   ({arrays} "
        "arrays)"
    )
    print(f"  torch.ao HistogramObserver calibration (reference)             {reference:8.2f} s")
    print(
        f"  ratio workbench / HistogramObserver                            {mine / reference:8.2f}   (goal "
        "<= 1.0)"
    )
    if not args.skip_task:
        elapsed, stages = whole_task(args.images, args.size, args.batch_size)
        print(f"  whole quant.analyze task (ladder, per-layer errors, artifacts) {elapsed:8.2f} s")
        total = sum(stages.values()) or 1.0
        for stage, seconds in sorted(stages.items(), key=lambda item: -item[1]):  # where the time went
            print(f"    {stage:<20} {seconds:8.2f} s  {seconds / total:6.1%}")


if __name__ == "__main__":
    main()
