"""Export and benchmark from the window with the real worker subprocess: a digits CNN exported to ONNX with
its parity verdict, then measured on eager and onnxruntime, with TensorRT listed as unavailable and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.specs import BenchSpec, ExportSpec, TrainSpec

pytestmark = pytest.mark.slow


def _wait_done(window, qtbot, record, timeout=180_000) -> str:
    qtbot.waitUntil(lambda: not window.manager.jobs.get(record.job_id).active, timeout=timeout)
    final = window.manager.jobs.get(record.job_id)
    assert final.state == "done", final.error_message
    return Path(final.run_dir).name


def test_the_real_worker_exports_and_benchmarks_from_the_gui(qtbot, real_window):
    window = real_window
    window.start_training(TrainSpec.from_dict({"epochs": 1}))
    training = window.training_panel
    qtbot.waitUntil(lambda: bool(training.job_of_run), timeout=60_000)
    train_id = next(iter(training.job_of_run))
    qtbot.waitUntil(lambda: not training.job_of_run, timeout=120_000)

    panel = window.export_panel
    window.show_tab(panel)
    export_id = _wait_done(
        window,
        qtbot,
        panel.start_export(
            ExportSpec.from_dict({"source": {"run": train_id}, "format": "onnx", "parity_samples": 8})
        ),
    )
    qtbot.waitUntil(
        lambda: (
            panel.current is not None
            and panel.current.run_id == export_id
            and bool(panel.current.report.get("parity"))
        ),
        timeout=10_000,
    )
    parity = panel.current.report["parity"]
    assert parity["passed"] is True and parity["max_abs_diff"] <= parity["tolerance"]

    bench_id = _wait_done(
        window,
        qtbot,
        panel.start_benchmark(
            BenchSpec.from_dict(
                {
                    "source": {"run": train_id},
                    "backends": ["eager", "onnxruntime", "tensorrt"],
                    "batch_sizes": [1, 4],
                    "iters": 20,
                    "warmup": 2,
                }
            )
        ),
    )
    qtbot.waitUntil(
        lambda: (
            panel.current is not None
            and panel.current.run_id == bench_id
            and bool(panel.current.report.get("results"))
        ),
        timeout=10_000,
    )
    rows = panel.current.report["results"]
    measured = [r for r in rows if r["backend"] in ("eager", "onnxruntime")]
    assert len(measured) == 4 and all(r["status"] == "ok" for r in measured)
    assert all(r["latency_ms"]["p50"] <= r["latency_ms"]["p99"] for r in measured)
    tensorrt = [r for r in rows if r["backend"] == "tensorrt"]
    assert tensorrt and all(r["status"] == "unavailable" and r["reason"] for r in tensorrt)
