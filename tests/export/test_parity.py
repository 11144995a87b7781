"""When the export goes wrong: the first divergent layer of a model broken in one module, the fallback to the
TorchScript-based ONNX exporter, an operator no exporter knows (named, with its module and the next format),
and torchvision's resnet18 exported and checked."""

from __future__ import annotations

import pytest
import torch
from export_helpers import BAKED, BRANCHY, MYSTERY, SNEAKY, done, export, failed, user_model

from workbench.worker.export import parity


@pytest.mark.parametrize("fmt", ["onnx", "exported_program"])
def test_the_first_divergent_layer_is_the_broken_module(digits_run, tmp_path, fmt):
    workspace, _ = digits_run
    result, logs = export(
        workspace, {"model": user_model(tmp_path, "sneaky", SNEAKY), "format": fmt, "parity_samples": 7}
    )
    done(result)  # the file is written; the result says it is wrong
    check = result["parity"]
    assert check["passed"] is False and check["max_abs_diff"] > check["tolerance"]
    assert check["first_divergent_layer"] == "sneaky"
    layers = {entry["name"]: entry for entry in check["layers"]}
    assert layers["conv1"]["max_abs_diff"] <= layers["conv1"]["tolerance"]  # the layers before it agree
    assert layers["act1"]["max_abs_diff"] <= layers["act1"]["tolerance"]
    assert list(layers)[-1] == "sneaky"
    assert any(level == "warning" and "first divergent layer: sneaky" in text for level, text in logs)


def test_torchscript_says_why_it_names_no_layer(digits_run, tmp_path):
    workspace, _ = digits_run
    result, _ = export(
        workspace,
        {"model": user_model(tmp_path, "sneaky", SNEAKY), "format": "torchscript", "parity_samples": 7},
    )
    check = done(result)["parity"]
    assert check["passed"] is False and check["first_divergent_layer"] is None
    assert "forward hooks" in check["first_divergent_layer_reason"]


def test_check_flags_the_first_failing_input():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    exported = lambda x: model(x) + 1  # noqa: E731 - a stand-in for a wrong export
    checked = parity.check(model, exported, parity.random_inputs((4,), (1, 7)), parity.FP32)
    assert not checked["passed"] and checked["failing_input"].shape == (1, 4)
    out = parity.finish(checked, [1, 7], 0)
    assert out["max_abs_diff"] == pytest.approx(1.0) and "failing_input" not in out


def test_onnx_falls_back_to_the_torchscript_exporter_and_says_why(digits_run, tmp_path):
    workspace, _ = digits_run
    result, logs = export(
        workspace, {"model": user_model(tmp_path, "branchy", BRANCHY), "format": "onnx", "parity_samples": 7}
    )
    done(result)
    assert result["exporter"] == "torchscript"
    assert "data-dependent" in result["fallback_reason"] and "branchy.py, line" in result["fallback_reason"]
    assert result["parity"]["passed"] is True
    assert any(level == "warning" and "trying the TorchScript-based exporter" in text for level, text in logs)


def test_a_baked_batch_size_fails_parity_per_input_and_is_refused_by_torch_export(digits_run, tmp_path):
    workspace, _ = digits_run
    model = user_model(tmp_path, "baked", BAKED)
    result, _ = export(workspace, {"model": model, "format": "onnx", "parity_samples": 3})
    done(result)  # the TorchScript-based exporter wrote it, with the example's batch size as a constant
    assert result["exporter"] == "torchscript" and "dynamic_batch=false" in result["fallback_reason"]
    check = result["parity"]
    assert check["passed"] is False and check["max_abs_diff"] is None
    assert all("Dimension mismatch" in entry["error"] for entry in check["checks"])
    assert check["first_divergent_layer"] is None and check["first_divergent_layer_reason"]
    message = failed(export(workspace, {"model": model, "format": "exported_program"})[0])
    assert "Constraints violated" in message and "set dynamic_batch=false" in message
    result, _ = export(
        workspace, {"model": model, "format": "exported_program", "dynamic_batch": False, "parity_samples": 3}
    )
    assert done(result)["parity"]["passed"] is True and result["parity"]["batches"] == [1]


def test_an_unknown_operator_is_named_with_its_module_and_an_earlier_file_survives(digits_run, tmp_path):
    workspace, _ = digits_run
    out = tmp_path / "model.onnx"
    out.write_bytes(b"an earlier export")
    result, _ = export(
        workspace, {"model": user_model(tmp_path, "mystery", MYSTERY), "format": "onnx", "output": str(out)}
    )
    message = failed(result)
    assert "wbexporttest" in message and "mystery" in message and "(in module odd)" in message
    assert "Try format=exported_program or torchscript" in message
    assert out.read_bytes() == b"an earlier export"
    # (__pycache__ is Python's own, where bytecode writing is on: importing mystery.py may leave one)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__") == [
        "model.onnx",
        "mystery.py",
    ]


def test_tolerances_scale_with_the_output():
    assert parity.FP32.bound(0.0) == pytest.approx(1e-4)
    assert parity.FP32.bound(100.0) == pytest.approx(1e-4 + 1e-3)
    assert parity.FP16.bound(1.0) == pytest.approx(2e-2)
    step = parity.quant_step(0.1)
    assert step.bound(50.0) == pytest.approx(0.1, rel=1e-3)
    assert parity.diff(torch.zeros(2), torch.tensor([0.0, float("nan")]))[0] == float("inf")
    assert parity.diff(torch.zeros(2, 3), torch.zeros(3, 2))[0] == float("inf")


@pytest.mark.slow
def test_resnet18_onnx(digits_run):
    import onnx
    import onnxruntime as ort

    workspace, _ = digits_run
    result, _ = export(
        workspace,
        {
            "model": {"name": "torchvision:resnet18", "input_shape": [3, 32, 32]},
            "format": "onnx",
            "parity_samples": 4,
        },
    )
    done(result)
    assert result["exporter"] == "dynamo"
    onnx.checker.check_model(result["artifact"])
    check = result["parity"]
    assert check["passed"] is True and check["batches"] == [1, 7] and check["random_samples"] == 4, check
    session = ort.InferenceSession(result["artifact"], providers=["CPUExecutionProvider"])
    for batch in (1, 7):
        (out,) = session.run(None, {"input": torch.randn(batch, 3, 32, 32).numpy()})
        assert out.shape == (batch, 10)


# A branch on the input's mean: random and real (normalised) inputs all take the second one, which is what the
# TorchScript-based exporter traces; inputs shifted by +3 take the first in eager PyTorch.
MEAN_BRANCH = BRANCHY.replace("if x.mean() > -100:", "if x.mean() > 1:")


def test_a_frozen_branch_is_named_and_caught_by_inputs_of_another_distribution(digits_run, tmp_path):
    workspace, _ = digits_run
    result, logs = export(
        workspace,
        {"model": user_model(tmp_path, "mean_branch", MEAN_BRANCH), "format": "onnx", "parity_samples": 7},
    )
    done(result)
    assert result["exporter"] == "torchscript"
    assert result["frozen_control_flow"].startswith(
        "forward() has data-dependent control flow (torch.export said "
        "so), and the TorchScript-based ONNX exporter (the fallback) "
        "traced one run of forward()"
    )
    assert any(level == "warning" and text == result["frozen_control_flow"] for level, text in logs)
    check = result["parity"]
    assert check["passed"] is False
    failing = [entry["input"] for entry in check["checks"] if not entry["passed"]]
    assert failing == ["random batch 7 shifted by +3"]  # every input like the example agrees with the file
    # The model whose branch never flips (threshold -100) passes on every input, the new ones included.
    steady, _ = export(workspace, {"model": user_model(tmp_path, "steady", BRANCHY), "format": "onnx"})
    names = [entry["input"] for entry in done(steady)["parity"]["checks"]]
    assert "random batch 7 scaled x5" in names and "random batch 7 shifted by +3" in names
    assert steady["parity"]["passed"] is True and "frozen_control_flow" in steady
