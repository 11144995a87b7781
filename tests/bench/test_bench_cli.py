"""`workbench bench` headless: one JSON object with the result contract, from a training run named by its
id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench_helpers import stored_training_run
from cli_helpers import expect, no_traceback, one_json, wb

pytestmark = pytest.mark.slow


def test_bench_a_run_by_its_id_prints_one_json_result(tmp_path):
    workspace = tmp_path / "ws"
    run_id = stored_training_run(workspace)
    proc = wb(
        tmp_path,
        "bench",
        "--set",
        f"source.run={run_id}",
        "--set",
        "backends=eager,onnxruntime,tensorrt",
        "--set",
        "batch_sizes=1,8",
        "--set",
        "iters=3",
        "--set",
        "warmup=1",
        "--set",
        "threads=1",
        "--json",
        workspace=workspace,
        timeout=240,
    )
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done"
    table = {(r["backend"], r["batch_size"]): r for r in result["results"]}
    assert list(table) == [
        ("eager", 1),
        ("eager", 8),
        ("onnxruntime", 1),
        ("onnxruntime", 8),
        ("tensorrt", 1),
        ("tensorrt", 8),
    ]
    for key in [("eager", 1), ("eager", 8), ("onnxruntime", 1), ("onnxruntime", 8)]:
        row = table[key]
        assert row["status"] == "ok", row
        assert row["latency_ms"]["min"] <= row["latency_ms"]["p50"] <= row["latency_ms"]["p99"]
        assert row["throughput_per_s"] == pytest.approx(row["batch_size"] / (row["latency_ms"]["p50"] / 1000))
    assert table["tensorrt", 1]["status"] == "unavailable" and table["tensorrt", 1]["reason"]
    bench_run = Path(result["run_dir"])
    assert json.loads((bench_run / "report.json").read_text())["results"] == result["results"]
    assert (bench_run / "spec.toml").read_text().count(run_id) == 1  # the run can be repeated
    assert (bench_run / "artifacts" / "samples.npz").is_file()


def test_bench_of_a_run_of_another_kind_fails_cleanly(tmp_path):
    workspace = tmp_path / "ws"
    run_id = stored_training_run(workspace)
    first = one_json(
        wb(
            tmp_path,
            "bench",
            "--set",
            f"source.run={run_id}",
            "--set",
            "iters=1",
            "--set",
            "warmup=0",
            "--json",
            workspace=workspace,
            timeout=240,
        )
    )
    proc = wb(
        tmp_path,
        "bench",
        "--set",
        f"source.run={Path(first['run_dir']).name}",
        "--json",
        workspace=workspace,
        timeout=240,
    )
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert "source.run" in result["error"]["message"] and "bench" in result["error"]["message"]
    proc = wb(tmp_path, "bench", "--set", "backends=eager,tflite", "--json", workspace=workspace)
    expect(proc, 2)
    assert "backends" in one_json(proc)["error"]["message"]
