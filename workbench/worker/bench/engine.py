"""`run_bench`: a BenchSpec to one result row per backend and batch size (latency percentiles, throughput,
peak memory, transfer time), each sent live as it finishes, with every row's per-iteration samples kept in the
run's artifacts/samples.npz. A row's status is "ok" (measured), "unavailable" (it could not be built or run
here: a missing package, a device or dtype the backend does not take, an export that fails; `reason` says
which) or "failed" (it built, then failed while being timed, e.g. out of memory at a large batch). One backend
that cannot run never fails the job. Worker side; never imports Qt.
"""

from __future__ import annotations

import gc
import io
import json
from pathlib import Path

import numpy as np
import torch

from workbench.errors import JobCancelled, JobError
from workbench.runs import atomic_write_bytes, atomic_write_json
from workbench.specs import BenchSpec
from workbench.worker.bench.backends import BUILDERS, BuildContext, Unavailable, first_line, new_tmp, prepare
from workbench.worker.bench.source import resolve
from workbench.worker.bench.stats import MemoryProbe, summarize, throughput_per_s
from workbench.worker.bench.timing import measure
from workbench.worker.detection_source import detection_quant_run, detection_run
from workbench.worker.devices import describe, resolve_device

SAMPLES_FILE = "samples.npz"
RESULTS_FILE = "results.json"
ROWS_KEY = "__rows__"  # in samples.npz: the result rows as JSON, so a reader knows what each array measured
RESULT_COLUMNS = (
    "p50",
    "p90",
    "p99",
    "mean",
    "std",
    "min",
    "throughput_per_s",
    "peak_memory_bytes",
    "transfer_ms",
)
MEMORY_NOTE = {
    "cuda": "peak bytes torch allocated on the device while the row ran (resident weights included); "
    "onnxruntime's own allocations are not seen",
    "other": "growth of the process's resident memory while the row was built and run (what it needed beyond "
    "what the process already held)",
}


def samples_key(backend: str, batch_size: int) -> str:
    """The name of a row's samples in samples.npz (and, prefixed, of its live array)."""
    return f"{backend}/{batch_size}"


def array_name(backend: str, batch_size: int) -> str:
    return f"bench/{samples_key(backend, batch_size)}:samples"


def new_row(backend: str, batch_size: int, device: torch.device, dtype: str) -> dict:
    return {
        "backend": backend,
        "batch_size": batch_size,
        "device": str(device),
        "dtype": dtype,
        "status": "unavailable",
        "reason": "",
        "latency_ms": None,
        "throughput_per_s": None,
        "peak_memory_bytes": None,
        "transfer_ms": None,
        "iters": 0,
        "source": None,
    }


class Publisher:
    """Sends each finished row as it comes: its samples as an array (with the row), the table so far as the
    array bench/results (with every row), a log line, and the table to artifacts/results.json, so a cancelled
    job still leaves the rows it finished."""

    def __init__(self, ctx, total: int):
        self.ctx = ctx
        self.total = total
        self.rows: list[dict] = []
        self.samples: dict[str, np.ndarray] = {}

    def add(self, row: dict, samples: np.ndarray | None) -> None:
        self.rows.append(row)
        ctx = self.ctx
        if samples is not None:
            self.samples[samples_key(row["backend"], row["batch_size"])] = samples
            ctx.array(array_name(row["backend"], row["batch_size"]), samples, unit="ms", row=row)
        ctx.array(
            "bench/results",
            self.table(),
            columns=list(RESULT_COLUMNS),
            rows=list(self.rows),
            planned=self.total,
        )
        ctx.log(describe_row(row), "info" if row["status"] == "ok" else "warning")
        if ctx.run is not None:
            folder = ctx.run.artifacts_dir
            folder.mkdir(parents=True, exist_ok=True)
            atomic_write_json(folder / RESULTS_FILE, {"results": self.rows})

    def table(self) -> np.ndarray:
        table = np.full((len(self.rows), len(RESULT_COLUMNS)), np.nan)
        for i, row in enumerate(self.rows):
            values = {**(row["latency_ms"] or {}), **row}
            for j, column in enumerate(RESULT_COLUMNS):
                value = values.get(column)
                if isinstance(value, (int, float)):
                    table[i, j] = value
        return table

    def save_samples(self) -> Path | None:
        if self.ctx.run is None or not self.samples:
            return None
        folder = self.ctx.run.artifacts_dir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / SAMPLES_FILE
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **self.samples, **{ROWS_KEY: np.asarray(json.dumps(self.rows))})
        atomic_write_bytes(path, buffer.getvalue())
        self.ctx.artifact("samples", path, kind="arrays")
        return path


def describe_row(row: dict) -> str:
    head = f"{row['backend']} batch {row['batch_size']} ({row['dtype']}, {row['device']})"
    if row["status"] != "ok":
        return f"{head}: {row['status']}: {row['reason']}"
    lat = row["latency_ms"]
    text = (
        f"{head}: p50 {lat['p50']:.3f} ms, p90 {lat['p90']:.3f} ms, p99 {lat['p99']:.3f} ms over "
        f"{row['iters']} iterations; {row['throughput_per_s']:,.1f} samples/s"
    )
    if row["peak_memory_bytes"] is not None:
        text += f"; peak memory {row['peak_memory_bytes'] / 2**20:,.1f} MiB"
    if row["transfer_ms"] is not None:
        text += f"; transfer {row['transfer_ms']:.3f} ms"
    return text


def _release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def measure_row(
    spec: BenchSpec, bctx: BuildContext, backend: str, batch: int, ctx, *, index: int, total: int
) -> tuple[dict, np.ndarray | None]:
    """One row: build the backend at this batch size, warm it up, time it. Never raises but to cancel."""
    device = bctx.device
    row = new_row(backend, batch, device, spec.dtype)
    ctx.progress(index, total, f"{backend}, batch {batch}: building", force=True)
    try:
        prepare(bctx, backend, batch)
    except JobCancelled:
        raise
    except Exception as exc:
        row["reason"] = f"preparing {backend} failed ({first_line(exc)})"
        return row, None
    _release(device)
    memory = MemoryProbe(device)
    memory.start()
    try:
        runnable = BUILDERS[backend](bctx, batch)
    except JobCancelled:
        raise
    except Unavailable as exc:
        row["reason"] = str(exc)
        return row, None
    except Exception as exc:  # an unexpected failure while building: this row's problem, not the job's
        row["reason"] = f"building {backend} failed ({first_line(exc)})"
        return row, None
    row["source"] = runnable.source
    text = f"{backend}, batch {batch}: timing"

    def on_iteration(done: int, planned: int) -> None:
        ctx.progress(index + min(done / planned, 0.999), total, text)

    try:
        ctx.check_stop()
        memory.running()
        measured = measure(
            runnable,
            warmup=spec.warmup,
            iters=spec.iters,
            min_time_s=spec.min_time_s,
            check_stop=ctx.check_stop,
            on_iteration=on_iteration,
            after_iteration=memory.sample,
        )
    except JobCancelled:
        raise
    # out of memory at a large batch, a kernel error: the row says so, the job goes on
    except Exception as exc:
        row.update(
            status="failed", reason=f"{backend} failed while running at batch {batch} ({first_line(exc)})"
        )
        return row, None
    finally:
        try:
            runnable.close()
        finally:
            del runnable
    latency = summarize(measured.samples_ms)
    row.update(
        status="ok",
        latency_ms=latency,
        iters=int(measured.samples_ms.size),
        # throughput at the median latency: batch_size / (p50 in seconds)
        throughput_per_s=throughput_per_s(batch, latency["p50"]),
        peak_memory_bytes=memory.peak_bytes(),
        transfer_ms=float(np.median(measured.transfer_ms)) if measured.transfer_ms is not None else None,
    )
    return row, measured.samples_ms


def run_bench(spec: BenchSpec, ctx) -> dict:
    """The `bench.latency` task: measure every backend at every batch size; returns the result contract."""
    detection = detection_run(spec.source.run, ctx.workspace)
    if detection is not None:  # the whole detector and its network alone
        from workbench.worker.bench.detection import run_detection_bench

        train_dir, trained = detection
        return run_detection_bench(spec, ctx, trained, train_dir)
    quantized = detection_quant_run(spec.source.run, ctx.workspace)
    if quantized is not None:  # a quantized detector: its FP32 one in eager, both in onnxruntime
        from workbench.worker.bench.detection import run_detection_bench

        if quantized.train_dir is None:
            raise JobError(
                f"source.run: the training run quantize run {quantized.id} started from is gone; its "
                "detector and data come from there"
            )
        return run_detection_bench(spec, ctx, quantized.train, quantized.train_dir, quantized)
    device = resolve_device(spec.device)
    backends = list(dict.fromkeys(spec.backends))
    batch_sizes = list(dict.fromkeys(spec.batch_sizes))
    total = len(backends) * len(batch_sizes)
    ctx.progress(0, total, "loading the model", force=True)
    source = resolve(spec, ctx)
    ctx.check_stop()
    ctx.log(
        f"measuring {source.label} with inputs of {source.shapes_text()} on {describe(device)} in "
        f"{spec.dtype}: {', '.join(backends)} at batch {', '.join(map(str, batch_sizes))}"
    )
    threads_before = torch.get_num_threads()
    publisher = Publisher(ctx, total)
    # Each row collects the garbage of the one before it. Everything older (torch, the model, the process's
    # own objects) is set aside first, so each collection walks only this job's new objects: a full collection
    # of a process with torch loaded took over a second a row on a slow machine.
    gc.freeze()
    try:
        if spec.threads > 0:
            torch.set_num_threads(spec.threads)
        with new_tmp() as tmp:
            bctx = BuildContext(source, device, spec.dtype, spec.threads, Path(tmp), log=ctx.log)
            index = 0
            for backend in backends:
                for batch in batch_sizes:
                    ctx.check_stop()
                    row, samples = measure_row(spec, bctx, backend, batch, ctx, index=index, total=total)
                    publisher.add(row, samples)
                    index += 1
            bctx._model = None
    finally:
        gc.unfreeze()
        torch.set_num_threads(threads_before)
        samples_path = publisher.save_samples()  # also on cancel: the rows that finished keep their samples
    ctx.progress(total, total, "done", force=True)
    kind = "cuda" if device.type == "cuda" else "other"
    return {
        "results": publisher.rows,
        "model": source.label,
        "input_shape": list(source.input_shape),
        **source.named_inputs(),
        "source": source.describe(),
        "device": describe(device),
        "dtype": spec.dtype,
        "threads": spec.threads or threads_before,
        "memory": MEMORY_NOTE[kind],
        "samples": str(samples_path) if samples_path else None,
    }
