"""`workbench export` headless: one JSON object with the result contract, from a training run named by its
id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import expect, no_traceback, one_json, wb

pytestmark = pytest.mark.slow


def test_export_a_run_by_its_id_prints_one_json_result(digits_run, tmp_path):
    import onnx

    workspace, run_id = digits_run
    proc = wb(
        tmp_path,
        "export",
        "--set",
        f"source.run={run_id}",
        "--set",
        "format=onnx",
        "--set",
        "parity_samples=8",
        "--json",
        workspace=workspace,
        timeout=300,
    )
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done" and result["format"] == "onnx"
    assert {"run_dir", "status", "artifact", "format", "size_bytes", "parity", "exporter"} <= set(result)
    assert result["parity"]["passed"] is True and result["parity"]["samples"] == 8
    onnx.checker.check_model(result["artifact"])
    run_dir = Path(result["run_dir"])
    assert json.loads((run_dir / "report.json").read_text())["artifact"] == result["artifact"]
    assert (run_dir / "spec.toml").read_text().count(run_id) == 1  # the run can be repeated


def test_export_failure_is_one_json_error(tmp_path):
    proc = wb(tmp_path, "export", "--set", "source.file=model.onnx", "--json", timeout=120)
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert "source.file: model.onnx is already an exported model" in result["error"]["message"]
