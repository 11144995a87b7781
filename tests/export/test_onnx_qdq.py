"""onnx_qdq: a quantize run's model as ONNX with QuantizeLinear/DequantizeLinear, its int8 weights and scales
as the run saved them, parity with the simulated model within one output step, and the accuracy in onnxruntime
beside the simulated one; `write_onnx_qdq` as the benchmark calls it; what cannot go into 8-bit ONNX."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from export_helpers import CONTRACT_KEYS, PARITY_KEYS, done, export, failed, run

from workbench.worker.export.onnx_qdq import write_onnx_qdq


@pytest.fixture(scope="module")
def qdq(quant_run):
    workspace, quant = quant_run
    result, logs = export(workspace, {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq"})
    return done(result), logs, quant


def _initializers(proto) -> dict:
    from onnx import numpy_helper

    return {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}


def test_qdq_graph_holds_the_runs_int8_weights_and_scales(qdq):
    import onnx

    result, _, quant = qdq
    assert CONTRACT_KEYS <= set(result) and result["format"] == "onnx_qdq"
    assert result["exporter"] == "dynamo" and result["fallback_reason"] is None
    path = Path(result["artifact"])
    assert path.name == "model_qdq.onnx" and path.stat().st_size == result["size_bytes"]
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    params = json.loads((Path(quant["run_dir"]) / "artifacts" / "quant_params.json").read_text())
    inits = _initializers(proto)
    nodes = list(proto.graph.node)
    quantize = [n for n in nodes if n.op_type == "QuantizeLinear"]
    dequantize = [n for n in nodes if n.op_type == "DequantizeLinear"]
    # One Q/DQ pair per activation point, one DQ per weight and one per bias (every layer here has quantized
    # input).
    assert len(quantize) == len(params["activations"]) == result["nodes"]["QuantizeLinear"]
    assert len(dequantize) == len(params["activations"]) + 2 * len(params["weights"])
    weight_dq = [n for n in dequantize if n.input[0] in inits and inits[n.input[0]].dtype != np.int32]
    assert len(weight_dq) == len(params["weights"])
    # The biases are int32 codes on the grid of input scale x weight scale, as int8 kernels add them.
    bias_dq = [n for n in dequantize if n.input[0] in inits and inits[n.input[0]].dtype == np.int32]
    assert len(bias_dq) == len(params["weights"])
    weight_scales = sorted(tuple(inits[n.input[1]].round(12).tolist()) for n in weight_dq)
    activation_scales = {float(inits[n.input[1]]) for n in quantize}
    for node in bias_dq:
        codes, scale, zero_point = (inits[name] for name in node.input)
        assert zero_point.dtype == np.int32 and not zero_point.any() and scale.shape == codes.shape
        assert any(
            np.allclose(scale / np.array(w), s_in, rtol=1e-5)
            for w in weight_scales
            for s_in in activation_scales
            if len(w) == len(scale)
        ), "a bias scale that is no input scale x weight scale"
    saved = torch.load(Path(quant["run_dir"]) / "artifacts" / "quantized.pt", weights_only=True)
    expected_codes = sorted(tuple(t.flatten().tolist()) for t in saved["weight_int"].values())
    found_codes = []
    for node in weight_dq:
        codes, scale, zero_point = (inits[name] for name in node.input)
        axis = next(a.i for a in node.attribute if a.name == "axis")
        # Symmetric weights: int8 with zero point 0, or the same values as uint8 with zero point 128 (written
        # so where onnxruntime's u8 x s8 kernels saturate: an x86 CPU without VNNI).
        assert codes.dtype == zero_point.dtype and codes.dtype in (np.int8, np.uint8)
        if codes.dtype == np.uint8:
            assert (zero_point == 128).all()
            codes, zero_point = codes.astype(np.int16) - 128, zero_point.astype(np.int16) - 128
        assert not zero_point.any() and axis == 0 and scale.shape == (codes.shape[0],)
        assert np.abs(codes).max() <= 127  # the restricted grid of the run
        found_codes.append(tuple(codes.flatten().tolist()))
    assert sorted(found_codes) == expected_codes
    scales = sorted(float(inits[n.input[1]]) for n in quantize)
    assert scales == pytest.approx(sorted(a["scale"] for a in params["activations"]))
    assert all(inits[n.input[2]].dtype == np.uint8 for n in quantize)  # activations: unsigned 8-bit grids
    assert result["layers"]["weights"]["float"] == [] and result["layers"]["activations"]["float"] == []


def test_qdq_parity_and_accuracy_in_onnxruntime(qdq):
    result, logs, quant = qdq
    parity = result["parity"]
    assert PARITY_KEYS <= set(parity)
    assert parity["passed"] is True, parity
    assert parity["batches"] == [1, 7] and parity["samples"] == 32
    # The tolerance is whole steps of the logits' quantizer, derived from the rounding flips the analysis
    # measured.
    deployed = parity["steps"]["deployed"]
    assert parity["tolerance"] == pytest.approx(
        deployed["tolerance_steps"] * result["output_scale"], rel=1e-3
    )
    assert "simulated" in parity["tolerance_rule"] and "flips" in parity["tolerance_rule"]
    assert parity["max_abs_diff"] == parity["optimized"]["max_abs_diff"] <= parity["tolerance"]
    assert parity["as_written"]["within_tolerance"] and deployed["local_passed"]
    accuracy = result["accuracy"]
    assert accuracy["simulated"] == quant["quantized"]["accuracy"]
    assert accuracy["samples"] == quant["held_out"]["samples"]  # the samples the quantize run measured
    assert abs(accuracy["onnxruntime"] - accuracy["simulated"]) <= 0.01
    assert any("accuracy in onnxruntime" in text for _, text in logs)


def test_qdq_runs_at_batch_1_and_7(qdq):
    import onnxruntime as ort

    result, _, _ = qdq
    session = ort.InferenceSession(result["artifact"], providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        (out,) = session.run(
            None, {"input": np.random.default_rng(0).standard_normal((batch, 1, 8, 8), dtype=np.float32)}
        )
        assert out.shape == (batch, 10)


def test_write_onnx_qdq_is_callable_on_a_run_folder(quant_run, tmp_path):
    assert str(inspect.signature(write_onnx_qdq)) == (
        "(quant_run_dir: 'Path', out_path: 'Path', *, opset: 'int' = 18, dynamic_batch: 'bool' = True, "
        "log=<built-in function print>, example=None) -> 'dict'"
    )
    _, quant = quant_run
    lines: list[str] = []
    out = tmp_path / "int8" / "digits_qdq.onnx"
    info = write_onnx_qdq(Path(quant["run_dir"]), out, opset=17, dynamic_batch=False, log=lines.append)
    assert out.is_file() and info["path"] == str(out) and info["size_bytes"] == out.stat().st_size
    # opset 17: the TorchScript-based exporter
    assert info["opset"] == 17 and info["exporter"] == "torchscript"
    assert "opset 18" in info["fallback_reason"] and any(
        "trying the TorchScript-based" in line for line in lines
    )
    assert info["quant_run"] == Path(quant["run_dir"]).name
    assert (info["input_name"], info["output_name"], info["input_shape"]) == ("input", "output", [1, 8, 8])
    assert info["dynamic_batch"] is False and len(info["warnings"]) == 1  # the fallback's
    assert info["weights"]["qdq"] == ["features.0", "features.4", "classifier"]
    # input, features.0, features.4, pool (the classifier's input, off the grid after averaging), classifier
    assert info["nodes"]["QuantizeLinear"] == 5 and info["output_scale"] > 0


def test_a_16_bit_mixed_precision_layer_stays_float_with_a_warning(digits_run):
    workspace, run_id = digits_run
    quant = run(
        "quant.analyze",
        {
            "source": {"run": run_id},
            "calibration": {"samples": 64},
            "eval_samples": 64,
            "mixed_precision": {"layers": [{"name": "classifier", "bits": 16}]},
        },
        workspace,
    )
    assert quant["status"] == "done", quant.get("error")
    result, logs = export(
        workspace, {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq", "parity_samples": 8}
    )
    done(result)
    assert result["layers"]["weights"] == {"qdq": ["features.0", "features.4"], "float": ["classifier"]}
    assert result["layers"]["activations"]["float"] == ["classifier"]
    assert any(level == "warning" and "classifier" in text and "16 bits" in text for level, text in logs)
    assert result["warnings"] and result["nodes"]["QuantizeLinear"] == 4  # all but the classifier's output
    assert result["output_scale"] is None  # the output is float (clipped to its 16-bit range)
    assert result["parity"]["passed"] is True, result["parity"]
    assert "16-bit grid" in result["parity"]["tolerance_rule"]


def test_other_bit_widths_are_refused_with_the_fix(digits_run):
    workspace, run_id = digits_run
    quant = run(
        "quant.analyze",
        {
            "source": {"run": run_id},
            "calibration": {"samples": 64},
            "eval_samples": 64,
            "weights": {"bits": 4},
        },
        workspace,
    )
    assert quant["status"] == "done", quant.get("error")
    message = failed(
        export(workspace, {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq"})[0]
    )
    assert "4-bit weights" in message and "weights.bits=8" in message


def test_qdq_needs_opset_13(quant_run):
    workspace, quant = quant_run
    message = failed(
        export(
            workspace, {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq", "opset": 12}
        )[0]
    )
    assert message.startswith("opset: 12") and "13" in message
