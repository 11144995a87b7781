"""format=tensorrt: refused with the reason where torch_tensorrt or CUDA is missing (here: always); the real
path where both are; and the code path's calls checked against a stand-in torch_tensorrt module."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch
from export_helpers import done, export, failed

from workbench.worker.export import formats

AVAILABLE = importlib.util.find_spec("torch_tensorrt") is not None and torch.cuda.is_available()


@pytest.mark.skipif(AVAILABLE, reason="torch_tensorrt and CUDA are here: the real export runs instead")
def test_tensorrt_reports_why_it_is_unavailable(digits_run):
    workspace, run_id = digits_run
    message = failed(export(workspace, {"source": {"run": run_id}, "format": "tensorrt"})[0])
    assert message.startswith("TensorRT is not available here: ")
    if importlib.util.find_spec("torch_tensorrt") is None:
        assert "torch-tensorrt is not installed" in message
    else:
        assert "CUDA" in message
    assert message.endswith("try format=onnx")


@pytest.mark.skipif(not AVAILABLE, reason="needs torch_tensorrt and a CUDA device")
def test_tensorrt_export_on_cuda(digits_run):
    workspace, run_id = digits_run
    result, _ = export(
        workspace, {"source": {"run": run_id}, "format": "tensorrt", "device": "cuda", "precision": "fp16"}
    )
    done(result)
    assert result["exporter"] == "torch_tensorrt" and Path(result["artifact"]).suffix == ".pt2"
    assert result["parity"]["passed"] is True and "float16" in result["parity"]["tolerance_rule"]


class _StandIn(types.ModuleType):
    """Just enough of torch_tensorrt's API to check what the exporter calls: compile returns the model
    itself."""

    __version__ = "0.0-stand-in"

    def __init__(self):
        super().__init__("torch_tensorrt")
        self.calls: list[tuple[str, dict]] = []
        calls = self.calls

        class Input:
            def __init__(self, **kwargs):
                self.kwargs = kwargs

        self.Input = Input

        def compile(module, **kwargs):
            calls.append(("compile", kwargs))
            return module

        def save(module, path, **kwargs):
            calls.append(("save", kwargs))
            Path(path).write_bytes(b"an engine")

        self.compile, self.save = compile, save


@pytest.fixture
def stand_in(monkeypatch):
    module = _StandIn()
    monkeypatch.setitem(sys.modules, "torch_tensorrt", module)
    monkeypatch.setattr(formats, "tensorrt_status", lambda device: (True, ""))
    return module


def test_tensorrt_code_path(digits_run, stand_in):
    workspace, run_id = digits_run
    result, _ = export(
        workspace, {"source": {"run": run_id}, "format": "tensorrt", "precision": "fp16", "parity_samples": 7}
    )
    done(result)
    assert Path(result["artifact"]).name == "model_tensorrt.pt2" and result["size_bytes"] == len(b"an engine")
    assert result["exporter"] == "torch_tensorrt" and result["precision"] == "fp16"
    (_, compiled), (_, saved) = stand_in.calls
    assert compiled["ir"] == "dynamo" and compiled["enabled_precisions"] == {torch.float32, torch.float16}
    shapes = compiled["inputs"][0].kwargs
    assert shapes["min_shape"] == (1, 1, 8, 8) and shapes["max_shape"][0] >= 7
    assert saved["output_format"] == "exported_program"
    assert result["parity"]["passed"] is True and "float16" in result["parity"]["tolerance_rule"]
    assert result["parity"]["first_divergent_layer"] is None


def test_tensorrt_int8_asks_for_a_quantize_run(digits_run, stand_in):
    workspace, run_id = digits_run
    message = failed(
        export(workspace, {"source": {"run": run_id}, "format": "tensorrt", "precision": "int8"})[0]
    )
    assert message.startswith("precision: int8") and "onnx_qdq" in message
