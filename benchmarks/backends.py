"""Latency of torchvision resnet18 (random weights, random BatchNorm statistics) on each `bench.latency`
backend, as ratios measured in the same run (medians of repeats, jobs interleaved so drifting machine load
hits all alike).

Every number comes from the real task (workbench.worker.bench through the runner), on the CPU, at batch 1 and
32 of 3x224x224 inputs:
  - each backend's p50 latency against eager PyTorch's;
  - eager's p50 against torch.utils.benchmark.Timer timing the same model on the same input (a sanity ratio:
    the task's loop should add nothing, so ~1.0);
  - ONNX Runtime INT8 with our QDQ model (workbench.worker.export.onnx_qdq.write_onnx_qdq from a quantize run)
    against ONNX Runtime FP32, beside onnxruntime's own `quantize_static` (QDQ, per-channel int8 weights,
    uint8 activations, MinMax calibration, after `quant_pre_process`) as the peer. When ours is slower than
    the peer, the node types ORT left in each optimized graph are printed, so the unfused ones show.

The quantize run: `--quant-run ID --workspace W` takes an existing one (of a resnet18 at 3x224x224); otherwise
the script makes one first with `quant.analyze` on a few fake 224x224 images (about half a minute on 2 cores;
its calibration only sets the scales, which do not change the latency). The same run's FP32 model is what
every other backend measures, so all rows share one set of weights.

    .venv/bin/python benchmarks/backends.py [--quick] [--batch-sizes 1,32] [--iters 30] [--warmup 5]
        [--repeats 3] [--threads 0] [--backends eager,compile,...] [--quant-run ID --workspace W] [--show-ops]
"""

from __future__ import annotations

import argparse
import collections
import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

from workbench.specs import BENCH_BACKENDS, BenchSpec
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

FP32_BACKENDS = [b for b in BENCH_BACKENDS if b != "onnxruntime_int8"]
SHAPE = (3, 224, 224)


def random_resnet18() -> torch.nn.Module:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    # Random BN statistics, so folding and ranges see something other than identity BatchNorms.
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def make_quant_run(workspace: Path, images: int) -> str:
    """A quantize run of the random resnet18 (a model spec with its checkpoint; fake images calibrate it)."""
    from workbench.worker.checkpoints import save_state_dict

    path = workspace / "resnet18.pt"
    save_state_dict(random_resnet18().state_dict(), path)
    spec = {
        "model": {
            "name": "torchvision:resnet18",
            "num_classes": 1000,
            "checkpoint": str(path),
            "input_shape": list(SHAPE),
        },
        "dataset": {
            "name": "fake",
            "size": images * 2,
            "image_size": list(SHAPE[1:]),
            "num_classes": 1000,
            "test_fraction": 0.5,
            "val_fraction": 0.0,
        },
        "calibration": {"samples": images},
        "eval_samples": images,
        "batch_size": min(images, 32),
        "device": "cpu",
    }
    result = run_task(get_task("quant.analyze"), spec, emit=lambda *a: None, workspace=workspace)
    if result["status"] != "done":
        sys.exit(f"the quantize run failed: {result.get('error')}")
    return Path(result["run_dir"]).name


class _Ctx:
    """The little of a TaskContext that resolving a source needs."""

    def __init__(self, workspace: Path):
        self.workspace = workspace

    def log(self, text: str, level: str = "info") -> None:
        pass


def source_model(workspace: Path, quant_run: str) -> torch.nn.Module:
    """The FP32 model the quantize run started from, as the bench task loads it."""
    from workbench.worker.bench.source import resolve

    spec = BenchSpec.from_dict({"source": {"run": quant_run}})
    return resolve(spec, _Ctx(workspace)).model


def bench(workspace: Path, spec: dict) -> dict:
    result = run_task(get_task("bench.latency"), spec, emit=lambda *a: None, workspace=workspace)
    if result["status"] != "done":
        sys.exit(f"the bench job failed: {result.get('error')}")
    return {(row["backend"], row["batch_size"]): row for row in result["results"]}


def timer_p50_ms(model: torch.nn.Module, batch: int, threads: int, min_run_time: float) -> float:
    """torch.utils.benchmark's own measurement of the same eager forward (median of its blocks)."""
    from torch.utils import benchmark

    x = torch.randn(batch, *SHAPE, generator=torch.Generator().manual_seed(batch))
    timer = benchmark.Timer(
        stmt="with torch.inference_mode(): model(x)",
        globals={"model": model, "x": x, "torch": torch},
        num_threads=threads,
    )
    return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def peer_qdq(model: torch.nn.Module, folder: Path, images: int) -> Path:
    """onnxruntime.quantization.quantize_static's QDQ model of the same network: the peer."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from workbench.worker.bench.backends import export_onnx

    fp32 = export_onnx(model, torch.randn(2, *SHAPE), folder / "peer-fp32.onnx", dynamic_batch=True)
    source = fp32
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        source = folder / "peer-fp32-pre.onnx"
        quant_pre_process(str(fp32), str(source))
    except Exception as exc:  # pre-processing is recommended, not required
        print(f"  (quant_pre_process skipped: {type(exc).__name__}: {exc})")
        source = fp32

    class Reader(CalibrationDataReader):
        def __init__(self):
            g = torch.Generator().manual_seed(1)
            self.batches = iter(
                [{"input": torch.randn(1, *SHAPE, generator=g).numpy()} for _ in range(images)]
            )

        def get_next(self):
            return next(self.batches, None)

    out = folder / "peer-qdq.onnx"
    quantize_static(
        str(source),
        str(out),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )
    return out


def optimized_ops(path: Path, folder: Path, threads: int) -> collections.Counter:
    """Node types in the graph ORT actually runs (after its fusions), from the optimized model it saves."""
    import onnx

    from workbench.worker.bench.backends import ort_session

    optimized = folder / f"{path.stem}-optimized.onnx"
    ort_session(path, device=torch.device("cpu"), threads=threads, optimized_path=optimized)
    model = onnx.load(str(optimized), load_external_data=False)
    return collections.Counter(node.op_type for node in model.graph.node)


def median_p50(runs: list[dict], key) -> float | None:
    values = [r[key]["latency_ms"]["p50"] for r in runs if key in r and r[key]["status"] == "ok"]
    return statistics.median(values) if values else None


def reason(runs: list[dict], key) -> str:
    for r in runs:
        if key in r and r[key]["status"] != "ok":
            return f"{r[key]['status']}: {r[key]['reason']}"
    return "not measured"


def fmt(value: float | None, width: int = 9, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else " " * (width - 1) + "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run: 5 iterations, 2 warm-up, 1 repeat")
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--threads", type=int, default=0, help="torch and onnxruntime threads; 0 keeps defaults"
    )
    parser.add_argument(
        "--backends", default=",".join(FP32_BACKENDS), help="FP32 backends to compare with eager"
    )
    parser.add_argument(
        "--quant-run", default="", help="an existing quantize run of resnet18 (with --workspace)"
    )
    parser.add_argument("--workspace", default="", help="the workspace of --quant-run")
    parser.add_argument(
        "--images", type=int, default=32, help="calibration images (our quantize run and the peer)"
    )
    parser.add_argument(
        "--show-ops", action="store_true", help="print ORT's node types even when ours is faster"
    )
    args = parser.parse_args()
    if args.quick:
        args.iters, args.warmup, args.repeats, args.images = 5, 2, 1, 16
    batches = [int(b) for b in args.batch_sizes.split(",")]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "eager" not in backends:
        backends.insert(0, "eager")
    threads = args.threads or torch.get_num_threads()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")

    with tempfile.TemporaryDirectory(prefix="bench-backends-") as tmp:
        tmp = Path(tmp)
        workspace = Path(args.workspace) if args.workspace else tmp / "ws"
        workspace.mkdir(parents=True, exist_ok=True)
        quant_run = args.quant_run
        if not quant_run:
            started = time.perf_counter()
            quant_run = make_quant_run(workspace, args.images)
            print(
                f"quantize run {quant_run} made in {time.perf_counter() - started:.1f} s "
                f"({args.images} fake images)"
            )
        model = source_model(workspace, quant_run)
        started = time.perf_counter()
        peer = peer_qdq(model, tmp, args.images)
        print(f"peer QDQ model (onnxruntime quantize_static) made in {time.perf_counter() - started:.1f} s")
        common = {
            "batch_sizes": batches,
            "iters": args.iters,
            "warmup": args.warmup,
            "threads": args.threads,
            "device": "cpu",
        }
        ours_runs, peer_runs, timer = [], [], collections.defaultdict(list)
        for _ in range(args.repeats):
            ours_runs.append(
                bench(
                    workspace,
                    {**common, "source": {"run": quant_run}, "backends": [*backends, "onnxruntime_int8"]},
                )
            )
            peer_runs.append(
                bench(workspace, {**common, "source": {"file": str(peer)}, "backends": ["onnxruntime_int8"]})
            )
            for batch in batches:
                timer[batch].append(
                    timer_p50_ms(model, batch, threads, min_run_time=0.5 if args.quick else 2.0)
                )
        slower = report(args, batches, backends, threads, ours_runs, peer_runs, timer)
        if slower or args.show_ops:
            show_ops(workspace, quant_run, peer, tmp, args.threads)


def report(args, batches, backends, threads, ours_runs, peer_runs, timer) -> bool:
    """Print the tables; True when our INT8 model is slower than the peer's at some batch size."""
    slower = False
    print(
        f"\nresnet18 (random weights), 3x224x224, cpu, {threads} threads, float32, {args.iters} iterations "
        f"after {args.warmup} warm-up, median of {args.repeats} job(s)"
    )
    for batch in batches:
        eager = median_p50(ours_runs, ("eager", batch))
        print(f"\nbatch {batch}")
        print(f"  {'backend':<34}{'p50 ms':>9}   {'ratio':>14}")
        for backend in backends:
            p50 = median_p50(ours_runs, (backend, batch))
            if p50 is None:
                print(f"  {backend:<34}{'-':>9}   {reason(ours_runs, (backend, batch))}")
                continue
            print(f"  {backend:<34}{fmt(p50)}   {fmt(p50 / eager if eager else None, 14)}  (to eager)")
        reference = statistics.median(timer[batch])
        print(f"  {'torch.utils.benchmark.Timer':<34}{fmt(reference)}")
        print(f"  {'eager (task) / Timer':<34}{fmt(eager / reference if eager else None)}   (sanity: ~1.0)")
        fp32 = median_p50(ours_runs, ("onnxruntime", batch))
        ours = median_p50(ours_runs, ("onnxruntime_int8", batch))
        theirs = median_p50(peer_runs, ("onnxruntime_int8", batch))
        for label, value, runs in (
            ("ORT INT8, ours (write_onnx_qdq)", ours, ours_runs),
            ("ORT INT8, peer (quantize_static)", theirs, peer_runs),
        ):
            if value is None:
                print(f"  {label:<34}{'-':>9}   {reason(runs, ('onnxruntime_int8', batch))}")
            else:
                print(f"  {label:<34}{fmt(value)}   {fmt(value / fp32 if fp32 else None, 14)}  (to ORT FP32)")
        if ours is not None and theirs is not None:
            print(f"  {'INT8 ours / peer':<34}{fmt(ours / theirs)}   (goal <= 1.0)")
            slower = slower or ours > theirs * 1.05
    return slower


def show_ops(workspace: Path, quant_run: str, peer: Path, folder: Path, threads: int) -> None:
    """Node types of the graphs ORT runs for both INT8 models: QuantizeLinear/DequantizeLinear left over, or
    float Conv/Gemm where the other has QLinearConv, are what ORT could not fuse."""
    from workbench.runs import RunStore
    from workbench.worker.export.onnx_qdq import write_onnx_qdq

    ours_path = folder / "ours-qdq.onnx"
    write_onnx_qdq(RunStore(workspace).resolve(quant_run), ours_path, log=lambda *a, **k: None)
    ours, theirs = optimized_ops(ours_path, folder, threads), optimized_ops(peer, folder, threads)
    print("\nnode types in the graphs ORT runs (its optimized models):")
    print(f"  {'op type':<28}{'ours':>6}{'peer':>6}")
    for op in sorted(set(ours) | set(theirs)):
        mark = "  <-" if ours[op] != theirs[op] else ""
        print(f"  {op:<28}{ours[op]:>6}{theirs[op]:>6}{mark}")


if __name__ == "__main__":
    main()
