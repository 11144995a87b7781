"""`workbench quantize` headless: one JSON object with the report contract, from a training run named by its
id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import expect, no_traceback, one_json, wb

pytestmark = pytest.mark.slow


def test_quantize_a_run_by_its_id_prints_one_json_report(digits_run, tmp_path):
    workspace, run_dir = digits_run
    run_id = Path(run_dir).name
    proc = wb(
        tmp_path,
        "quantize",
        "--set",
        f"source.run={run_id}",
        "--set",
        "calibration.samples=64",
        "--set",
        "weights.bits=4",
        "--json",
        workspace=workspace,
        timeout=300,
    )
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done"
    assert {"run_dir", "status", "fp32", "quantized", "steps", "layers"} <= set(result)
    assert result["source"]["run"] == str(Path(run_dir))
    assert result["calibration"] == {"samples": 64, "seed": 0}
    assert result["quantized"]["accuracy"] >= result["fp32"]["accuracy"] - 0.02
    quant_run = Path(result["run_dir"])
    assert json.loads((quant_run / "report.json").read_text())["steps"] == result["steps"]  # saved in the run
    assert (quant_run / "spec.toml").read_text().count(run_id) == 1  # the run can be repeated
    assert {p.name for p in (quant_run / "artifacts").iterdir()} >= {
        "quantized.pt",
        "quant_params.json",
        "histograms.npz",
    }


def test_quantize_without_a_model_or_with_a_bad_value_fails_cleanly(tmp_path):
    proc = wb(tmp_path, "quantize", "--json", timeout=120)
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert "nothing to quantize" in result["error"]["message"] and "source.run" in result["error"]["message"]
    proc = wb(tmp_path, "quantize", "--set", "weights.granularity=per_row", "--json")
    expect(proc, 2)
    result = one_json(proc)
    assert result["error"]["type"] == "SpecError" and "weights.granularity" in result["error"]["message"]
