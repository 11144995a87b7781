"""A torch-free export.model and bench.latency for panel tests: the real tasks' result contracts (see
ExportSpec and BenchSpec in workbench/specs/jobs.py), progress, the live `bench/<backend>/<batch>:samples`
arrays and the run's artifacts/samples.npz, on made-up numbers. `dataset.seed` doubles as a per-step delay
(ms) for tests."""

from __future__ import annotations

import io
import json
import time

import numpy as np

from workbench.errors import JobError, WorkbenchError
from workbench.runs import RunStore

EXTENSIONS = {
    "torchscript": "pt",
    "exported_program": "pt2",
    "onnx": "onnx",
    "onnx_qdq": "onnx",
    "tensorrt": "ep",
}
EXPORTERS = {
    "torchscript": "torch.jit.trace",
    "exported_program": "torch.export",
    "onnx": "torch.onnx (dynamo)",
    "onnx_qdq": "torch.onnx + QDQ",
    "tensorrt": "torch_tensorrt",
}
# Milliseconds per sample of the fake model on each backend, and a fixed cost per call: batch 1 is dominated
# by the fixed cost, large batches by the per-sample one (the shape a real latency-vs-batch curve has).
BACKEND_COST = {
    "eager": (0.40, 0.030),
    "compile": (0.25, 0.022),
    "torchscript": (0.32, 0.027),
    "exported_program": (0.30, 0.026),
    "onnxruntime": (0.15, 0.018),
    "onnxruntime_int8": (0.12, 0.011),
}
DTYPE_FACTOR = {"float32": 1.0, "float16": 0.7, "bfloat16": 0.75}
TENSORRT_REASON = "TensorRT runs on CUDA devices only (this benchmark runs on cpu)"


def _model_name(spec, ctx) -> str:
    """The model's name: model.name, or the source run's (a quantize run's training run's) when there is
    one."""
    name = spec.model.name
    run_ref = spec.source.run
    for _ in range(2):  # a quantize run names its training run
        if not run_ref or ctx.workspace is None:
            break
        try:
            with RunStore(ctx.workspace).open_run(run_ref) as run:
                data = run.read_spec()
        except WorkbenchError:
            break
        name = (data.get("model") or {}).get("name", name)
        run_ref = (data.get("source") or {}).get("run", "")
    return name


def _pause(spec) -> None:
    time.sleep(spec.dataset.seed / 1000)


def fake_export_model(spec, ctx):
    """Speaks like export.model: writes a small file, checks parity, reports the contract."""
    steps = (
        ["loading the model", "exporting", "checking parity"]
        if spec.verify
        else ["loading the model", "exporting"]
    )
    for index, text in enumerate(steps[:2]):
        ctx.progress(index, len(steps), text, force=True)
        _pause(spec)
        yield
    if spec.format == "tensorrt":
        raise JobError(
            "TensorRT is not available here: torch_tensorrt is not installed and TensorRT runs on CUDA "
            "devices only"
        )
    folder = ctx.run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model.{EXTENSIONS[spec.format]}"
    path.write_bytes(b"fake " + spec.format.encode() + bytes(4096))
    ctx.artifact("model", path, kind="model")
    report = {
        "artifact": str(path),
        "format": spec.format,
        "size_bytes": path.stat().st_size,
        "exporter": EXPORTERS[spec.format],
    }
    if not spec.verify:
        report["parity"] = {"skipped": True, "passed": None, "reason": "verify=false"}
    else:
        ctx.progress(2, len(steps), steps[2], force=True)
        _pause(spec)
        yield
        broken = "broken" in _model_name(spec, ctx)
        if broken and spec.format == "onnx":  # as a model with a branch on its input's values exports
            report.update(
                exporter="torchscript",
                fallback_reason="data-dependent control flow in forward",
                frozen_control_flow="forward() has data-dependent control flow (torch.export said so), "
                "and the TorchScript-based ONNX exporter (the fallback) traced one "
                "run of forward()",
            )
        tolerance = 1e-2 if spec.format == "onnx_qdq" else 1e-4
        report["parity"] = {
            "max_abs_diff": 0.37 if broken else 2.4e-6,
            "max_rel_diff": 0.82 if broken else 8.1e-6,
            "tolerance": tolerance,
            "passed": not broken,
            "first_divergent_layer": "features.2" if broken else None,
            "first_divergent_layer_reason": "" if broken else "parity passed",
            "batches": [1, 7] if spec.dynamic_batch else [1],
            "samples": spec.parity_samples,
        }
    if spec.format == "onnx_qdq":
        report["accuracy"] = _qdq_accuracy(spec, ctx)
        if spec.verify:
            report["parity"]["steps"] = {
                mode: _qdq_steps(mode, broken) for mode in ("deployed", "as_written")
            }
            report["by_module"] = _qdq_by_module(broken)
            report["tensorrt_by_module"] = {
                "available": False,
                "rows": [],
                "reason": "TensorRT comparison: not available here (no CUDA)",
            }
            report["parity"]["explanation"] = (
                "as deployed: 3 rounding flips moved the output by up to 2 step(s)."
            )
    ctx.progress(len(steps), len(steps), "done")
    return report


def _qdq_accuracy(spec, ctx) -> dict:
    """As the real export measures the QDQ model: accuracy, or, where the quantize run measured another task's
    monitor (its report's `metric`: val MAE, mIoU), that monitor under the same keys with the metric named."""
    quantized = {}
    if ctx.workspace is not None and spec.source.run:
        try:
            with RunStore(ctx.workspace).open_run(spec.source.run) as run:
                quantized = run.read_report() or {}
        except WorkbenchError:
            pass
    metric = quantized.get("metric")
    if not isinstance(metric, dict):
        return {"onnxruntime": 0.9878, "simulated": 0.9878, "equal": True}
    value = (quantized.get("quantized") or {}).get("accuracy")
    return {"onnxruntime": value, "simulated": value, "samples": 66, "split": "test split", "metric": metric}


def _qdq_steps(mode: str, broken: bool) -> dict:
    """A step analysis as the real onnx_qdq export reports it (qdq_steps.analyse)."""
    return {
        "optimized": mode == "deployed",
        "max_steps": 9.0 if broken else 2.0,
        "tolerance_steps": 5,
        "quantizers": {
            "checked": 6,
            "values": 120_000,
            "one_step": 3,
            "one_step_at_a_tie": 3,
            "one_step_elsewhere": 40 if broken else 0,
            "two_or_more": 0,
            "off": [],
        },
        "local_passed": not broken,
        "passed": not broken,
    }


def _qdq_by_module(broken: bool) -> list[dict]:
    """The step analysis per PyTorch module, as the real onnx_qdq export reports it (backend_compare), worst
    first; its deployed numbers sum to _qdq_steps'."""
    rows = [
        ("features.3", ["features.3"], 40_000, 42 if broken else 2, 2, 3 if broken else 1),
        ("features.0", ["features.0"], 50_000, 1, 1, 1),
        ("(input)", ["input"], 20_000, 0, 0, 0),
        ("classifier", ["classifier", "classifier@1"], 10_000, 0, 0, 0),
    ]
    out = []
    for module, quantizers, codes, off, ties, worst in rows:
        numbers = {"codes": codes, "codes_off": off, "ties": ties, "worst_step": worst}
        out.append(
            {
                "module": module,
                "quantizers": quantizers,
                **numbers,
                "configuration": "deployed",
                "by_configuration": {"deployed": numbers, "as written": dict(numbers)},
            }
        )
    return out


def _samples(backend: str, batch: int, iters: int, dtype: str, rng) -> np.ndarray:
    fixed, per_sample = BACKEND_COST[backend]
    centre = (fixed + per_sample * batch) * DTYPE_FACTOR[dtype]
    noise = rng.lognormal(0.0, 0.08, iters)
    spikes = rng.random(iters) < 0.03  # the rare slow iteration that makes p99 worth reading
    return (centre * noise * np.where(spikes, 1.6, 1.0)).astype(np.float64)


def fake_bench_latency(spec, ctx):
    """Speaks like bench.latency: one samples array per backend and batch size as it is measured, a row
    each."""
    rng = np.random.default_rng(0)
    cells = [(backend, batch) for backend in spec.backends for batch in spec.batch_sizes]
    rows, saved = [], {}
    for index, (backend, batch) in enumerate(cells):
        ctx.progress(index, len(cells), f"{backend}, batch {batch}", force=True)
        row = {
            "backend": backend,
            "batch_size": batch,
            "device": spec.device,
            "dtype": spec.dtype,
            "status": "done",
            "reason": "",
            "latency_ms": {},
            "throughput_per_s": None,
            "peak_memory_bytes": None,
            "transfer_ms": None,
        }
        if backend == "tensorrt":
            row.update(status="unavailable", reason=TENSORRT_REASON)
        elif backend == "onnxruntime_int8" and not spec.source.run:
            row.update(status="unavailable", reason="onnxruntime_int8 needs a quantize run as source.run")
        else:
            samples = _samples(backend, batch, spec.iters, spec.dtype, rng)
            saved[f"{backend}/{batch}"] = samples
            p50, p90, p99 = np.percentile(samples, [50, 90, 99])
            row.update(
                latency_ms={
                    "p50": float(p50),
                    "p90": float(p90),
                    "p99": float(p99),
                    "mean": float(samples.mean()),
                    "std": float(samples.std()),
                    "min": float(samples.min()),
                },
                throughput_per_s=float(batch * 1000.0 / p50),
                peak_memory_bytes=int(2**20 * (3 + 0.25 * batch)),
                transfer_ms=0.0,
            )
            # As the real engine: the samples with their row, then every row so far (unavailable ones too).
            ctx.array(f"bench/{backend}/{batch}:samples", samples, unit="ms", row=row)
        rows.append(row)
        ctx.array("bench/results", np.full((len(rows), 1), np.nan), rows=list(rows), planned=len(cells))
        folder = ctx.run.artifacts_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "results.json").write_text(json.dumps({"results": rows}))  # a cancelled job keeps these
        _pause(spec)
        yield
    folder = ctx.run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(buffer, **saved)
    (folder / "samples.npz").write_bytes(buffer.getvalue())
    ctx.artifact("samples", folder / "samples.npz", kind="arrays")
    ctx.progress(len(cells), len(cells), "done")
    return {"results": rows}
