"""A model's life made with RunStore alone (no torch): a training run, a quantize run, exports and benchmarks
whose report.json files have the shapes the real tasks write. Used by the report tests, and by hand to dress a
copy of a real workspace with exports and benchmarks for a look at the page."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from workbench.runs import RunStore

SCRIPT = "<script>alert('x')</script>"


def make_run(
    workspace: Path | str,
    kind: str,
    task: str,
    spec: dict,
    report: dict | Callable[[Path], dict] | None,
    *,
    status: str = "done",
    message: str = "",
    metrics: list[tuple[int, str, float, float]] = (),
) -> str:
    """A finished run; `report` may be a function of the run's folder (for paths inside it)."""
    with RunStore(workspace).create_run(kind, spec, task=task) as run:
        if metrics:
            run.log_metrics(metrics)
        if callable(report):
            report = report(run.dir)
        if report is not None:
            run.write_report({"status": status, "run_dir": str(run.dir), **report})
        run.set_status(status, message)
        return run.id


def training_run(
    workspace: Path | str, *, model: str = "cnn", dataset: str = "digits", epochs: int = 4, note: str = ""
) -> str:
    metrics = []
    for step in range(10, 10 * epochs * 5 + 1, 10):
        metrics.append((step, "train/loss", 2.3 * math.exp(-step / 40) + 0.05, 0.0))
        metrics.append((step, "train/acc", 1 - 0.9 * math.exp(-step / 35), 0.0))
        metrics.append((step, "lr", 0.01 * min(step / 50, 1.0), 0.0))
    for epoch in range(1, epochs + 1):
        step = epoch * 50
        metrics.append((step, "val/loss", 2.0 * math.exp(-step / 45) + 0.08, 0.0))
        metrics.append((step, "val/acc", 1 - 0.85 * math.exp(-step / 40), 0.0))
        metrics.append((step, "epoch", float(epoch), 0.0))
    spec = {
        "epochs": epochs,
        "batch_size": 32,
        "lr": 0.01,
        "model": {"name": model, "num_classes": 10},
        "dataset": {"name": dataset, "root": note},
    }
    report = {
        "epochs_completed": epochs,
        "final": {"train_loss": 0.061, "val_loss": 0.093, "val_accuracy": 0.9722, "test_accuracy": 0.9811},
        "parameters": {"total": 19562, "trainable": 19562},
        "device": "cpu",
        "amp": "none",
        "best_val_accuracy": 0.9722,
        "best_epoch": epochs,
        "global_steps": epochs * 50,
        "elapsed_s": 4.2,
    }
    return make_run(workspace, "train", "train.classifier", spec, report, metrics=metrics)


def quantize_run(
    workspace: Path | str, source: str, *, w_bits: int = 4, quantized: float = 0.9733, status: str = "done"
) -> str:
    spec = {
        "source": {"run": source, "file": ""},
        "weights": {"bits": w_bits, "granularity": "per_channel", "range": "mse"},
        "activations": {"bits": 8, "range": "mse"},
        "cle": True,
        "bias_correction": "empirical",
        "sensitivity": True,
        "mixed_precision": {"target_drop": 0.005, "layers": []},
    }
    steps = [
        {"step": "fp32", "accuracy": 0.9811, "loss": 0.06},
        {"step": "fold_bn", "accuracy": 0.9811, "loss": 0.06},
        {"step": "cle", "accuracy": 0.9811, "loss": 0.061},
        {"step": "weight_ranges", "accuracy": 0.9644, "loss": 0.09},
        {"step": "bias_correction", "accuracy": 0.9700, "loss": 0.08},
        {"step": "activation_ranges", "accuracy": quantized, "loss": 0.075},
    ]
    layers = [
        {
            "name": "features.0",
            "tensor": "weight",
            "bits": w_bits,
            "granularity": "per_channel",
            "range_method": "mse",
            "sqnr_db": 23.9,
            "cosine": 0.998,
        },
        {
            "name": "features.4",
            "tensor": "weight",
            "bits": w_bits,
            "granularity": "per_channel",
            "range_method": "mse",
            "sqnr_db": 12.25,
            "cosine": 0.9937,
        },
        {
            "name": "classifier",
            "tensor": "activation",
            "bits": 8,
            "granularity": "per_tensor",
            "range_method": "mse",
            "sqnr_db": 44.5,
            "cosine": 0.99998,
            "error": {"held_out": {"accumulated": {"sqnr_db": 24.66}}},
        },
    ]
    report = {
        "fp32": {"accuracy": 0.9811, "loss": 0.06},
        "quantized": {"accuracy": quantized, "loss": 0.075, "logit_sqnr_db": 24.66},
        "steps": steps,
        "layers": layers,
        "sensitivity": [
            {"layer": "features.0", "only_this": 0.9800, "all_but_this": 0.9711},
            {"layer": "features.4", "only_this": 0.9655, "all_but_this": 0.9790},
        ],
        "mixed_precision": {
            "target_drop": 0.005,
            "layers": ["features.4"],
            "accuracy": 0.9788,
            "size_bytes": 12104,
            "met": True,
            "fp32_accuracy": 0.9811,
            "fp32_size_bytes": 77864,
        },
        "source": {"run": str(RunStore(workspace).resolve(source))},
    }
    return make_run(workspace, "quant", "quant.analyze", spec, report, status=status)


def export_run(
    workspace: Path | str,
    source: str,
    *,
    fmt: str = "onnx",
    passed: bool = True,
    divergent: str | None = None,
    status: str = "done",
    message: str = "",
) -> str:
    spec = {"source": {"run": source, "file": ""}, "format": fmt, "opset": 18, "verify": True}

    # the artifact lives in the export run's own folder, as the task writes it
    def report(run_dir: Path) -> dict:
        return {
            "format": fmt,
            "artifact": str(run_dir / "artifacts" / f"model.{fmt}"),
            "size_bytes": 80_123 if fmt == "onnx" else 24_870,
            "parity": {
                "max_abs_diff": 3.1e-6 if passed else 0.41,
                "max_rel_diff": 2.2e-6 if passed else 0.93,
                "tolerance": 1e-4,
                "passed": passed,
                "first_divergent_layer": divergent,
            },
            "accuracy": 0.9811 if passed else 0.9,
        }

    failed = {"error": {"type": "JobError", "message": message}}  # what the runner writes for a failed job
    return make_run(
        workspace,
        "export",
        "export.model",
        spec,
        report if status == "done" else failed,
        status=status,
        message=message,
    )


def bench_run(
    workspace: Path | str,
    source: str,
    *,
    backends=("eager", "onnxruntime"),
    batch_sizes=(1, 8, 64),
    device: str = "cpu",
    unavailable: dict[str, str] | None = None,
) -> str:
    spec = {
        "source": {"run": source, "file": ""},
        "backends": list(backends) + list(unavailable or {}),
        "batch_sizes": list(batch_sizes),
        "dtype": "float32",
    }
    results = []
    for b_index, backend in enumerate(backends):
        for batch in batch_sizes:
            p50 = (0.35 + 0.15 * b_index) * batch**0.7
            results.append(
                {
                    "backend": backend,
                    "batch_size": batch,
                    "device": device,
                    "dtype": "float32",
                    "status": "ok",
                    "reason": "",
                    "latency_ms": {
                        "p50": p50,
                        "p90": p50 * 1.1,
                        "p99": p50 * 1.3,
                        "mean": p50 * 1.05,
                        "std": p50 * 0.05,
                        "min": p50 * 0.9,
                    },
                    "throughput_per_s": batch / p50 * 1000,
                    "peak_memory_bytes": 3_000_000 * batch,
                }
            )
    for backend, reason in (unavailable or {}).items():
        results.append(
            {
                "backend": backend,
                "batch_size": batch_sizes[0],
                "device": device,
                "dtype": "float32",
                "status": "unavailable",
                "reason": reason,
                "latency_ms": None,
                "throughput_per_s": None,
                "peak_memory_bytes": None,
            }
        )
    report = {
        "results": results,
        "model": "cnn",
        "input_shape": [1, 8, 8],
        "device": f"{device} (x86_64)",
        "dtype": "float32",
        "threads": 4,
        "memory": "peak resident memory of this process while measuring",
    }
    return make_run(workspace, "bench", "bench.latency", spec, report)


def full_story(workspace: Path | str, train_id: str | None = None) -> dict:
    """A training run (or the one given) with a quantize run, two exports (one failing parity), a failed
    export and two benchmarks; returns their ids by step."""
    train_id = train_id or training_run(workspace, note=SCRIPT)
    quant_id = quantize_run(workspace, train_id)
    onnx_id = export_run(workspace, train_id, fmt="onnx", passed=True)
    qdq_id = export_run(workspace, quant_id, fmt="onnx_qdq", passed=False, divergent="features.4")
    broken_id = export_run(
        workspace, train_id, fmt="tensorrt", status="failed", message="torch_tensorrt is not installed"
    )
    bench_train = bench_run(
        workspace,
        train_id,
        backends=("eager", "compile", "onnxruntime"),
        unavailable={"tensorrt": "torch_tensorrt is not installed"},
    )
    bench_export = bench_run(workspace, onnx_id, backends=("onnxruntime",), batch_sizes=(1, 32))
    return {
        "train": train_id,
        "quantize": [quant_id],
        "export": [onnx_id, qdq_id, broken_id],
        "bench": [bench_train, bench_export],
    }
