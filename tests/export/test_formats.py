"""`export.model` for TorchScript, torch.export and ONNX on a trained digits cnn: the file lands in the run,
passes its format's own checks, runs at batch 1 and 7 when read back independently, and matches eager
PyTorch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from export_helpers import CONTRACT_KEYS, PARITY_KEYS, done, export, failed

BATCHES = (1, 7)


def _check_contract(result: dict, fmt: str, suffix: str) -> Path:
    assert CONTRACT_KEYS <= set(result)
    assert result["format"] == fmt
    path = Path(result["artifact"])
    assert path.is_file() and path.suffix == suffix
    assert path.parent == Path(result["run_dir"]) / "artifacts"
    assert result["size_bytes"] == path.stat().st_size > 0
    # The report on disk is the result, without the runner's traceback.
    saved = json.loads((Path(result["run_dir"]) / "report.json").read_text())
    assert saved["artifact"] == result["artifact"] and saved["parity"]["passed"] is True
    return path


def _check_parity(parity: dict, *, samples: int = 32) -> None:
    assert PARITY_KEYS <= set(parity)
    assert parity["passed"] is True, parity
    assert parity["batches"] == [1, 7] and parity["samples"] == samples
    # float32's bound, 1e-4 plus 1e-5 of the output's scale: the inputs scaled x5 give logits of about 100.
    assert parity["max_abs_diff"] <= parity["tolerance"] < 2e-3
    assert parity["first_divergent_layer"] is None
    assert {c["batch"] for c in parity["checks"]} >= {1, 7}
    assert all(c["passed"] for c in parity["checks"])


def _inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(b, 1, 8, 8, generator=generator) for b in BATCHES]


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")
def test_torchscript(exported):
    result, logs = exported("torchscript")
    done(result)
    path = _check_contract(result, "torchscript", ".pt")
    _check_parity(result["parity"])
    assert result["exporter"] == "trace"
    module = torch.jit.load(str(path))
    for x in _inputs():
        assert module(x).shape == (len(x), 10)
    assert any("parity: max |diff|" in text for _, text in logs)


def test_torchscript_script_mode(exported):
    result, _ = exported("torchscript", script=True)
    done(result)
    assert result["exporter"] == "script"
    _check_parity(result["parity"])


def test_exported_program(exported):
    result, _ = exported("exported_program")
    done(result)
    path = _check_contract(result, "exported_program", ".pt2")
    _check_parity(result["parity"])
    program = torch.export.load(str(path))
    module = program.module()
    for x in _inputs():
        assert module(x).shape == (len(x), 10)


def test_onnx_passes_the_checker_and_runs_at_any_batch(exported):
    import onnx
    import onnxruntime as ort

    result, logs = exported("onnx")
    done(result)
    path = _check_contract(result, "onnx", ".onnx")
    _check_parity(result["parity"])
    assert result["exporter"] == "dynamo" and result["fallback_reason"] is None and result["opset"] == 18
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert {o.domain: o.version for o in proto.opset_import}[""] == 18
    batch = proto.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch.dim_param and not batch.dim_value  # a symbolic batch dimension
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input"]
    for x in _inputs():
        (out,) = session.run(None, {"input": x.numpy()})
        assert out.shape == (len(x), 10) and np.isfinite(out).all()
    assert not any(level == "warning" for level, _ in logs), logs


def test_onnx_with_a_fixed_batch_and_another_opset(digits_run, tmp_path):
    import onnx

    workspace, run_id = digits_run
    out = tmp_path / "deploy" / "digits.onnx"
    result, _ = export(
        workspace,
        {
            "source": {"run": run_id},
            "format": "onnx",
            "dynamic_batch": False,
            "opset": 17,
            "output": str(out),
            "parity_samples": 5,
        },
    )
    done(result)
    assert result["artifact"] == str(out) and out.is_file()
    assert not list(out.parent.glob(".*"))  # the staging folder is gone
    proto = onnx.load(str(out))
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    assert {o.domain: o.version for o in proto.opset_import}[""] == 17
    # The torch.export-based exporter writes opset 18 and up; for 17 the TorchScript-based one takes over.
    assert result["exporter"] == "torchscript" and "opset 18" in result["fallback_reason"]
    assert result["opset"] == 17
    parity = result["parity"]
    assert parity["passed"] and parity["batches"] == [1] and parity["samples"] == 5
    assert {c["batch"] for c in parity["checks"]} == {1}


def test_verify_false_skips_parity(digits_run):
    workspace, run_id = digits_run
    result, _ = export(workspace, {"source": {"run": run_id}, "format": "torchscript", "verify": False})
    assert done(result)["parity"] == {"skipped": True, "passed": None, "reason": "verify=false"}


@pytest.mark.parametrize(
    "parts, expected",
    [
        ({"source": {"file": "model.onnx"}}, "source.file: model.onnx is already an exported model"),
        ({"output": "model.txt"}, "output: "),
        ({"format": "onnx_qdq"}, "is a train.model run; onnx_qdq takes the scales"),
    ],
)
def test_refusals_name_the_field(digits_run, parts, expected):
    workspace, run_id = digits_run
    spec = {"source": {"run": run_id}, "format": "onnx", "verify": False}
    spec.update(parts)
    if "file" in parts.get("source", {}):
        spec["source"] = parts["source"]
    message = failed(export(workspace, spec)[0])
    assert expected in message
