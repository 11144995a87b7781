"""The QDQ export's code comparison per PyTorch module: a real quantize run of the digits cnn exported to
onnx_qdq, its `by_module` rows named after the model's own modules and summing to the step analysis's totals;
the doctor's `backend_mismatch` findings drawn from rows; TensorRT's comparison where it can run, and why not
where it cannot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from export_helpers import done, export
from test_qdq_structures import _quantize_and_export, zoo  # noqa: F401, F811 (zoo: the fixture)

from workbench.quant_findings import backend_findings
from workbench.specs import ModelSpec
from workbench.worker.export import backend_compare
from workbench.worker.models import build_model

TENSORRT = importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()


@pytest.fixture(scope="module")
def qdq(quant_run):
    workspace, quant = quant_run
    result, _ = export(workspace, {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq"})
    return done(result)


def test_by_module_rows_name_the_models_modules_and_sum_to_the_step_analysis(qdq):
    rows = qdq["by_module"]
    assert rows
    model = build_model(
        ModelSpec(name="cnn"),
        input_shape=tuple(qdq["input_shape"]),
        pretrained=False,
        checkpoint=False,
        classes=10,
        task="custom",
    )
    modules = {name for name, _ in model.named_modules() if name} | {backend_compare.INPUT_MODULE}
    assert {r["module"] for r in rows} <= modules, [r["module"] for r in rows]
    assert len({r["module"] for r in rows}) == len(rows)  # one row per module
    # Every weighted layer of the cnn owns a quantizer (its output's), so each has a row.
    weighted = {n for n, m in model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))}
    assert weighted <= {r["module"] for r in rows}
    for mode, label in (("deployed", "deployed"), ("as_written", "as written")):
        totals = qdq["parity"]["steps"][mode]["quantizers"]
        numbers = [r["by_configuration"][label] for r in rows]
        assert sum(n["codes"] for n in numbers) == totals["values"]
        assert sum(n["ties"] for n in numbers) == totals["one_step_at_a_tie"]
        assert sum(n["codes_off"] for n in numbers) == totals["one_step"] + totals["two_or_more"]
        assert sum(len(r["quantizers"]) for r in rows) == totals["checked"]
    for row in rows:
        assert row["configuration"] in ("deployed", "as written")
        assert row["by_configuration"][row["configuration"]]["codes_off"] == row["codes_off"]
        assert row["codes_off"] >= row["ties"] >= 0 and row["worst_step"] >= (1 if row["codes_off"] else 0)
    beyond = [r["codes_off"] - r["ties"] for r in rows]
    assert beyond == sorted(beyond, reverse=True)  # worst first


@pytest.mark.skipif(TENSORRT, reason="TensorRT and CUDA are here: the comparison runs instead")
def test_tensorrt_comparison_says_why_it_cannot_run_here(qdq):
    tensorrt = qdq["tensorrt_by_module"]
    assert tensorrt["available"] is False and tensorrt["rows"] == []
    if not torch.cuda.is_available():
        assert tensorrt["reason"] == "TensorRT comparison: not available here (no CUDA)"


@pytest.mark.skipif(not TENSORRT, reason="needs tensorrt and a CUDA device")
def test_tensorrt_compares_the_worst_modules_one_at_a_time(qdq):
    tensorrt = qdq["tensorrt_by_module"]
    assert tensorrt["available"] is True and tensorrt["rows"]
    modules = [r["module"] for r in qdq["by_module"] if r["module"] != backend_compare.INPUT_MODULE]
    for row in tensorrt["rows"]:
        assert row["module"] in modules and row["configuration"] == "TensorRT"
        assert "error" in row or row["codes"] > 0


def _row(module: str, codes: int, codes_off: int, ties: int, worst: int) -> dict:
    numbers = {"codes": codes, "codes_off": codes_off, "ties": ties, "worst_step": worst}
    return {
        "module": module,
        "quantizers": [module],
        **numbers,
        "configuration": "deployed",
        "by_configuration": {"deployed": numbers},
    }


def test_backend_findings_come_from_codes_off_beyond_ties_only():
    rows = [_row("features.3", 1000, 40, 2, 3), _row("head", 500, 7, 1, 1), _row("features.0", 800, 5, 5, 1)]
    findings = backend_findings(rows)
    assert [f["layer"] for f in findings] == ["features.3", "head"]  # ties alone are expected: no finding
    first, second = findings
    assert first["cause"] == "backend_mismatch" and first["tensor"] == "activation"
    assert first["id"] == "features.3:activation:backend_mismatch"
    assert first["evidence"]["codes_off"] == 40 and first["evidence"]["ties"] == 2
    assert first["evidence"]["worst_step"] == 3 and first["evidence"]["module"] == "features.3"
    assert first["fix"] == "keep_float" and second["fix"] == "requantize_step"
    # An error row, a row without a module and a non-dict (a file from another build) are no findings.
    assert backend_findings([{"module": "x", "error": "failed"}, {"codes_off": 9}, "junk"]) == []
    assert all(f["gain"] is None and "step analysis" in f["fix_text"] and f["summary"] for f in findings)


def test_codes_by_module_gathers_a_modules_quantizers_and_keeps_its_worse_configuration():
    tally = {"codes": 100, "equal": 97, "ties": 1, "elsewhere": 2, "two_or_more": 0, "worst_step": 1}
    clean = {"codes": 100, "equal": 100, "ties": 0, "elsewhere": 0, "two_or_more": 0, "worst_step": 0}
    rows = backend_compare.codes_by_module(
        {
            "deployed": {"layer1": tally, "layer1@1": clean, "fc": clean},
            "as written": {
                "layer1": clean,
                "layer1@1": clean,
                "fc": {**tally, "two_or_more": 1, "worst_step": 2},
            },
        },
        {"layer1": "layer1", "layer1@1": "layer1", "fc": "fc"},
    )
    assert [r["module"] for r in rows] == ["fc", "layer1"]
    fc, layer1 = rows
    assert fc["configuration"] == "as written" and fc["worst_step"] == 2 and fc["codes_off"] == 4
    assert layer1["quantizers"] == ["layer1", "layer1@1"] and layer1["codes"] == 200
    assert layer1["configuration"] == "deployed" and layer1["codes_off"] == 3 and layer1["ties"] == 1


def test_a_residual_nets_adds_and_pooling_belong_to_its_modules(zoo):  # noqa: F811
    _, result, _, _ = _quantize_and_export(zoo, "Residual")
    rows = {r["module"]: r for r in result["by_module"]}
    # The adds, written in the model's own forward(), quantize the output of the ReLU module after them; the
    # fc's averaged input belongs to `avg`.
    expected = {backend_compare.INPUT_MODULE, "stem.0", "a.0", "b.0", "c.0", "d.0", "relu", "avg", "fc"}
    assert set(rows) == expected, sorted(rows)
    assert sorted(rows["relu"]["quantizers"]) == ["add", "add_1"]
    totals = result["parity"]["steps"]["deployed"]["quantizers"]
    assert sum(r["by_configuration"]["deployed"]["codes"] for r in rows.values()) == totals["values"]
