"""INT8 of a small transformer in ONNX Runtime: our QDQ model against onnxruntime's own `quantize_dynamic`, as
ratios measured in the same run (medians of repeats, the models interleaved so drifting machine load hits all
alike).

The model is the bundled example names_transformer (resources/examples/names_transformer: character ids of a
name through two nn.TransformerEncoder layers to its language). The workbench is driven through its command
line, as a person would (`workbench <verb> ... --json`):
  - `workbench train` the example (or `--run RUN` takes a training run of it);
  - `workbench export format=onnx`: the FP32 ONNX file, the reference;
  - onnxruntime.quantization.quantize_dynamic (int8 weights, activations quantized at run time) of that same
    FP32 file, after `quant_pre_process` where it succeeds: the peer;
  - `workbench quantize` (W8A8, the default) then `workbench export format=onnx_qdq`: ours, static int8.

For each ONNX file it reports p50 latency at batch 1 and 32 in onnxruntime CPU sessions with the same thread
count (warm-up, then timed runs on real test samples), and accuracy on the run's whole test split, the same
samples for every file. Then ours / quantize_dynamic in speed (goal >= 1.0x) and the accuracy of each.

    .venv/bin/python benchmarks/transformer_int8.py [--run RUN --workspace W] [--epochs N] [--threads 1]
        [--batch-sizes 1,32] [--iters 200] [--warmup 20] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "workbench" / "resources" / "examples" / "names_transformer" / "train.toml"
WORKBENCH = [sys.executable, "-m", "workbench.cli"]


class StepFailed(Exception):
    """A workbench command that did not finish: its verb and the error it printed; `run_dir` is the run it
    left."""

    def __init__(self, message: str, run_dir: str = ""):
        super().__init__(message)
        self.run_dir = run_dir


def workbench(verb: str, args: list[str], workspace: Path) -> dict:
    """Run `workbench <verb> ... --json` and return its result; StepFailed with its error when it fails."""
    started = time.perf_counter()
    proc = subprocess.run(
        [*WORKBENCH, verb, *args, "--workspace", str(workspace), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise StepFailed(f"workbench {verb} exited {proc.returncode}: {proc.stderr.strip()[-800:]}") from None
    if proc.returncode != 0 or result.get("status") not in (None, "done"):
        error = result.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else str(error)
        kind = error.get("type", "") if isinstance(error, dict) else ""
        raise StepFailed(
            f"workbench {verb} {' '.join(args)}: {kind} {message}".strip(), result.get("run_dir") or ""
        )
    print(f"  workbench {verb} {' '.join(args)}: {time.perf_counter() - started:.1f} s", flush=True)
    return result


def test_split(run_dir: Path, workspace: Path) -> tuple[np.ndarray, np.ndarray]:
    """The training run's test split (ids, labels), carved by the workbench's own seeded splitter."""
    from workbench.specs import TrainSpec
    from workbench.worker.data.loader import load_dataset

    spec = TrainSpec.load(run_dir / "spec.toml")
    split = load_dataset(spec.dataset, workspace).splits["test"]
    ids, labels = zip(*(split.sample(i) for i in range(len(split))))
    return np.stack([x.numpy() for x in ids]), np.array([int(y) for y in labels])


def session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def accuracy(sess, ids: np.ndarray, labels: np.ndarray, batch: int = 100) -> float:
    name = sess.get_inputs()[0].name
    right = 0
    for start in range(0, len(ids), batch):
        logits = sess.run(None, {name: ids[start : start + batch]})[0]
        right += int((logits.argmax(1) == labels[start : start + batch]).sum())
    return right / len(ids)


def p50_ms(sess, ids: np.ndarray, iters: int, warmup: int) -> float:
    feed = {sess.get_inputs()[0].name: ids}
    for _ in range(warmup):
        sess.run(None, feed)
    times = []
    for _ in range(iters):
        started = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def peer_dynamic(fp32: Path, folder: Path) -> Path:
    """onnxruntime's quantize_dynamic of the FP32 file (int8 weights), pre-processed as its docs recommend."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = fp32
    try:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        source = folder / "fp32-pre.onnx"
        quant_pre_process(str(fp32), str(source))
    except Exception as exc:  # pre-processing is recommended, not required
        print(f"  (quant_pre_process skipped: {type(exc).__name__}: {str(exc)[:200]})")
        source = fp32
    out = folder / "dynamic-int8.onnx"
    quantize_dynamic(str(source), str(out), weight_type=QuantType.QInt8)
    return out


def make_models(args, workspace: Path, folder: Path) -> tuple[Path, dict[str, Path], dict[str, str]]:
    """The training run, the ONNX files by label, and notes by label: why a file could not be made, or what
    went wrong after it was written."""
    if args.run:
        run_dir = Path(args.run) if Path(args.run).is_dir() else workspace / "runs" / args.run
    else:
        extra = ["--set", f"epochs={args.epochs}"] if args.epochs else []
        trained = workbench("train", [str(EXAMPLE), *extra], workspace)
        run_dir = Path(trained["run_dir"])
        print(f"  trained {run_dir.name}: test accuracy {trained['monitor']['test']:.4f}")
    files, notes = {}, {}
    fp32 = workbench("export", ["--set", f"source.run={run_dir}", "--set", "format=onnx"], workspace)
    files["FP32"] = Path(fp32["artifact"])
    started = time.perf_counter()
    files["ORT quantize_dynamic INT8"] = peer_dynamic(files["FP32"], folder)
    print(f"  quantize_dynamic: {time.perf_counter() - started:.1f} s")
    ours = "ours, QDQ INT8 (W8A8)"
    try:
        quant = workbench("quantize", ["--set", f"source.run={run_dir}"], workspace)
        qdq = workbench(
            "export", ["--set", f"source.run={quant['run_dir']}", "--set", "format=onnx_qdq"], workspace
        )
        files[ours] = Path(qdq["artifact"])
    except StepFailed as exc:
        notes[ours] = str(exc)
        print(f"  FAILED: {exc}", flush=True)
        # An export that failed in its own checks after writing the file still leaves the model to measure.
        written = Path(exc.run_dir) / "artifacts" / "model_qdq.onnx" if exc.run_dir else None
        if written is not None and written.is_file():
            files[ours] = written
            print(f"  measuring the file it wrote anyway: {written}")
    return run_dir, files, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run",
        default="",
        help="a training run of names_transformer (its folder, or id with "
        "--workspace); trained first when not given",
    )
    parser.add_argument(
        "--workspace", default="", help="the workspace for the runs (default: a temporary one)"
    )
    parser.add_argument(
        "--epochs", type=int, default=0, help="epochs of the training (default: the example's)"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="onnxruntime intra-op threads, every session alike"
    )
    parser.add_argument("--batch-sizes", default="1,32")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="a short run: 30 iterations, 5 warm-up, 1 repeat"
    )
    args = parser.parse_args()
    if args.quick:
        args.iters, args.warmup, args.repeats = 30, 5, 1
    batches = [int(b) for b in args.batch_sizes.split(",")]

    with tempfile.TemporaryDirectory(prefix="bench-transformer-int8-") as tmp:
        tmp = Path(tmp)
        if args.workspace:
            workspace = Path(args.workspace)
        elif args.run and Path(args.run).is_dir():
            workspace = Path(args.run).resolve().parents[1]  # <workspace>/runs/<id>
        else:
            workspace = tmp / "ws"
        workspace.mkdir(parents=True, exist_ok=True)
        print(f"workspace {workspace}", flush=True)
        run_dir, files, notes = make_models(args, workspace, tmp)
        ids, labels = test_split(run_dir, workspace)
        sessions = {label: session(path, args.threads) for label, path in files.items()}
        accuracies = {label: accuracy(sess, ids, labels) for label, sess in sessions.items()}
        latency: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.repeats):
            for batch in batches:
                # real names, repeated if few
                sample = np.ascontiguousarray(np.resize(ids, (batch, ids.shape[1])))
                for label, sess in sessions.items():
                    latency.setdefault((label, batch), []).append(
                        p50_ms(sess, sample, args.iters, args.warmup)
                    )
        report(args, run_dir, files, notes, accuracies, latency, batches, len(labels))
    return 1 if notes else 0


def report(args, run_dir, files, notes, accuracies, latency, batches, samples) -> None:
    import onnxruntime

    print(
        f"\nnames_transformer (run {run_dir.name}), int64 ids [batch, 16], onnxruntime "
        f"{onnxruntime.__version__} CPU, {args.threads} thread(s), p50 of {args.iters} runs after "
        f"{args.warmup} warm-up, median of {args.repeats} repeat(s); accuracy on the {samples} test samples"
    )
    head = "".join(f"{f'p50 ms @{b}':>13}" for b in batches)
    print(f"\n  {'model':<28}{'size KB':>9}{'accuracy':>10}{head}")
    for label in [*files, *(n for n in notes if n not in files)]:
        if label not in files:
            print(f"  {label:<28}  failed: {notes[label]}")
            continue
        cells = "".join(f"{statistics.median(latency[label, b]):13.3f}" for b in batches)
        print(f"  {label:<28}{files[label].stat().st_size / 1024:9.0f}{accuracies[label]:10.4f}{cells}")
    fp32, peer, ours = "FP32", "ORT quantize_dynamic INT8", "ours, QDQ INT8 (W8A8)"
    print()
    for batch in batches:
        base = statistics.median(latency[fp32, batch])
        theirs = statistics.median(latency[peer, batch])
        line = f"  batch {batch}: FP32 / quantize_dynamic {base / theirs:.2f}x"
        if ours in files:
            mine = statistics.median(latency[ours, batch])
            line += (
                f", FP32 / ours {base / mine:.2f}x, ours speed / quantize_dynamic's speed "
                f"{theirs / mine:.2f}x (goal >= 1.0)"
            )
        print(line)
    if ours in files:
        print(
            f"  accuracy: ours {accuracies[ours]:.4f}, quantize_dynamic {accuracies[peer]:.4f}, "
            f"FP32 {accuracies[fp32]:.4f} (goal: ours >= quantize_dynamic)"
        )
    for label, note in notes.items():
        if label in files:
            print(f"  note: {label} is the file its export wrote before the job failed: {note}")


if __name__ == "__main__":
    sys.exit(main())
