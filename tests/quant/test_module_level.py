"""Module-level quantization: a model whose forward branches on a tensor's value (torch.fx cannot trace it) is
quantized layer by layer through hooks, says which ops stayed float, saves and reloads, and its ONNX QDQ
export agrees with the simulation in onnxruntime."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import onnx
import pytest
import torch
from event_recorder import Events
from onnx import numpy_helper

from workbench.worker.quant.artifacts import load_quantized
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

BRANCHY = """
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.unused = nn.Linear(3, 3)  # never called: not a layer to quantize
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        if h.mean() > 1e6:  # a branch on a value: torch.fx cannot trace this
            h = h / 2
        h = torch.relu(self.conv2(h)) + h
        return self.fc(h.mean((2, 3)))
"""


def _run(task: str, spec: dict, workspace: Path, events: Events | None = None) -> dict:
    result = run_task(get_task(task), spec, emit=events or Events(), workspace=workspace)
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    """(workspace, quantize result, its events, the model file) of the branchy model, trained one epoch on
    digits."""
    root = tmp_path_factory.mktemp("module-level")
    (root / "branchy.py").write_text(textwrap.dedent(BRANCHY))
    workspace = root / "ws"
    trained = _run(
        "train.classifier",
        {
            "dataset": {"name": "digits", "test_fraction": 0.25},
            "model": {"name": f"file:{root / 'branchy.py'}:Branchy"},
            "epochs": 8,
            "batch_size": 32,
            "lr": 2e-2,
            "scheduler": "onecycle",
            "keep_best": False,
        },
        workspace,
    )
    events = Events()
    # Every rung: what needs the graph (folding, CLE) is skipped with a rung of its own, the rest runs on
    # hooks.
    result = _run(
        "quant.analyze",
        {
            "source": {"run": trained["run_dir"]},
            "calibration": {"samples": 128},
            "fold_bn": True,
            "cle": True,
            "adaround": {"enabled": True, "iterations": 20},
            "bias_correction": "analytical",
        },
        workspace,
        events,
    )
    return workspace, result, events


def test_an_untraceable_model_is_quantized_module_by_module(quantized):
    _, result, events = quantized
    said = [
        e["text"] for e in events.of("log") if e["level"] == "warning" and "module by module" in e["text"]
    ]
    assert said and "torch.fx" in said[0] and "relu" in said[0] and "add" in said[0], events.of("log")
    ops = {entry["op"]: entry["calls"] for entry in result["module_level"]["float_ops"]}
    assert ops["relu"] == 2 and ops["add"] == 1 and "mean" in ops  # what one forward pass left in float
    assert "conv2d" not in ops and "linear" not in ops  # the layers' own ops are the quantized ones
    weights = [e["name"] for e in result["layers"] if e["tensor"] == "weight"]
    points = [e["name"] for e in result["layers"] if e["tensor"] == "activation"]
    assert weights == ["conv1", "conv2", "fc"]  # in call order; the never-called layer is not among them
    # conv2 takes an unfolded BatchNorm's output and fc a mean, neither on a grid: each gets an input
    # quantizer, as integer kernels take 8-bit inputs.
    assert points == ["input", "conv1", "conv2.input", "conv2", "fc.input", "fc"]
    assert result["cle"]["skipped"] and result["cle"]["pairs"] == []
    assert [s["step"] for s in result["steps"]] == [
        "fp32",
        "fold_bn",
        "cle",
        "weight_ranges",
        "adaround",
        "bias_correction",
        "activation_ranges",
    ]
    assert {e["rounding"] for e in result["layers"] if e["tensor"] == "weight"} == {"adaround"}
    kinds = {e["type"] for e in result["coverage"]["float"]}
    assert "BatchNorm2d" in kinds and result["coverage"]["parameters"] < 1.0  # unfolded, so it stays float
    # The ladder says what module-level quantization left float, and quantizing costs little accuracy.
    ladder = events.arrays("quant/ladder")[-1]
    assert any("functional ops stay float" in note for note in ladder["notes"])
    fp32, quant = result["fp32"]["accuracy"], result["quantized"]["accuracy"]
    assert fp32 > 0.8 and quant > fp32 - 0.03, (fp32, quant)


def test_a_module_level_run_reloads_to_the_same_outputs(quantized, tmp_path):
    workspace, result, _ = quantized
    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model

    artifacts = Path(result["artifacts"]["weights"]).parent
    params = json.loads((artifacts / "quant_params.json").read_text())
    assert params["tracing"] == "modules"
    model = build_model(
        ModelSpec.from_dict(params["model"]),
        input_shape=(1, 8, 8),
        log=lambda *a, **k: None,
        pretrained=False,
        checkpoint=False,
        task="custom",
    ).eval()
    sim = load_quantized(model, artifacts, params=params)
    x = torch.rand(16, 1, 8, 8)
    out = sim(x)
    # Each layer's output is on its quantizer's grid: the hooks are back with the saved scales.
    for info in params["activations"]:
        if info["kind"] != "layer":
            continue
        seen = []
        handle = sim.structure.layers[info["name"]].module.register_forward_hook(
            lambda m, a, o, seen=seen: seen.append(o)
        )
        sim(x)
        handle.remove()
        codes = (seen[0] / info["scale"]) + info["zero_point"]
        assert torch.allclose(codes, codes.round(), atol=1e-3), info["name"]
    sim.fp32()
    assert not torch.allclose(out, sim(x))  # and switching the quantizers off changes the outputs


def test_the_qdq_export_of_a_module_level_run_keeps_parity_in_onnxruntime(quantized):
    workspace, result, _ = quantized
    logs: list = []

    def emit(msg_type, content, buffers):
        if msg_type == "log":
            logs.append(content["text"])

    exported = run_task(
        get_task("export.model"),
        {"source": {"run": Path(result["run_dir"]).name}, "format": "onnx_qdq"},
        emit=emit,
        workspace=workspace,
    )
    assert exported["status"] == "done", (exported.get("error"), logs)
    assert exported["parity"]["passed"], exported["parity"]
    # The branch on a value makes the torch.export-based exporter give way to the tracing one, which says so.
    assert exported["exporter"] != "dynamo" and exported["fallback_reason"]
    proto = onnx.load(exported["artifact"])
    ops = [node.op_type for node in proto.graph.node]
    assert ops.count("QuantizeLinear") == 6  # the input, each layer's output, conv2's and fc's inputs
    int8 = [
        name
        for name, init in ((i.name, numpy_helper.to_array(i)) for i in proto.graph.initializer)
        if init.dtype in ("int8", "uint8") and init.ndim >= 2
    ]
    assert len(int8) == 3, int8  # conv1, conv2 and fc weights as 8-bit codes
