"""What you simulate is what you deploy: small networks with the structures that broke QDQ parity on real
models (residual adds, concatenations, max pooling before a conv, a float output after an average of codes,
depthwise layers, activations that vanish until a bias overflows int32) are quantized and exported, and
onnxruntime, with its graph optimizations on and off, computes the simulation's codes quantizer by quantizer;
a file that does not is caught."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch
from export_helpers import done, export, run

MODELS = """
import torch
from torch import nn


def block(cin, cout, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, groups=groups, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU())


class Residual(nn.Module):  # resnet: a stem, max pooling into a conv, two residual adds, avgpool -> fc
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem, self.pool = block(3, 16), nn.MaxPool2d(2)
        self.a, self.b = block(16, 16), nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.c, self.d = block(16, 16), nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.relu, self.avg, self.fc = nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = self.relu(x + self.b(self.a(x)))
        x = self.relu(x + self.d(self.c(x)))
        return self.fc(torch.flatten(self.avg(x), 1))


class Inception(nn.Module):  # googlenet: branches concatenated, a branch behind max pooling, dropout before fc
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = block(3, 16)
        self.b1, self.b2 = block(16, 8), nn.Sequential(block(16, 8), block(8, 8))
        self.b3 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), block(16, 8))
        self.mix = block(24, 16)
        self.avg, self.drop, self.fc = nn.AdaptiveAvgPool2d(1), nn.Dropout(0.2), nn.Linear(16, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.mix(torch.cat([self.b1(x), self.b2(x), self.b3(x)], 1))
        return self.fc(self.drop(torch.flatten(self.avg(x), 1)))


class Fire(nn.Module):  # squeezenet: squeeze, expand 1x1 and 3x3 concatenated, a float output after averaging
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem, self.squeeze = block(3, 16), nn.Sequential(nn.Conv2d(16, 4, 1), nn.ReLU())
        self.e1, self.e3 = nn.Sequential(nn.Conv2d(4, 8, 1), nn.ReLU()), nn.Sequential(nn.Conv2d(4, 8, 3, padding=1),
                                                                                       nn.ReLU())
        self.head = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(16, num_classes, 1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1))

    def forward(self, x):
        s = self.squeeze(self.stem(x))
        return torch.flatten(self.head(torch.cat([self.e1(s), self.e3(s)], 1)), 1)


class Depthwise(nn.Module):  # mobilenet: expand, depthwise, project, with ReLU6
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = block(3, 8)
        self.expand = nn.Sequential(nn.Conv2d(8, 32, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False), nn.BatchNorm2d(32),
                                nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(32, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.avg, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.dw(self.expand(x)))
        return self.fc(torch.flatten(self.avg(x), 1))


class Vanishing(nn.Module):  # googlenet at random init: activations shrink layer by layer until a bias overflows
    def __init__(self, num_classes=10):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1), nn.ReLU())
                                      for i in range(4)])
        with torch.no_grad():
            for layer in self.layers:
                layer[0].weight.mul_(1e-3)
                layer[0].bias.zero_()
        self.avg, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(8, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.avg(self.layers(x)), 1))
"""  # noqa: E501
NAMES = ("Residual", "Inception", "Fire", "Depthwise", "Vanishing")
DATA = {"name": "fake", "num_classes": 10, "size": 96, "test_fraction": 0.25, "image_size": [16, 16]}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> tuple[Path, Path, dict]:
    """(workspace, models file, results so far), each model's random weights saved as <name>.pt after
    torch.manual_seed(0)."""
    import importlib.util

    root = tmp_path_factory.mktemp("qdq-structures")
    source = root / "models.py"
    source.write_text(textwrap.dedent(MODELS))
    spec = importlib.util.spec_from_file_location("qdq_structures_models", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in NAMES:
        torch.manual_seed(0)
        torch.save(getattr(module, name)().state_dict(), root / f"{name}.pt")
    return root / "ws", source, {}


def _quantize_and_export(zoo, name: str) -> tuple[dict, dict, list, list]:
    """(quantize result, export result, export logs, quantize logs), each model quantized and exported
    once."""
    workspace, source, done_already = zoo
    if name not in done_already:
        quant_logs: list = []
        quant = run(
            "quant.analyze",
            {
                "model": {"name": f"file:{source}:{name}", "checkpoint": str(source.parent / f"{name}.pt")},
                "dataset": DATA,
                "calibration": {"samples": 32, "seed": 0},
                "eval_samples": 24,
            },
            workspace,
            quant_logs,
        )
        assert quant["status"] == "done", quant.get("error")
        result, logs = export(
            workspace,
            {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq", "parity_samples": 14},
        )
        done_already[name] = (quant, done(result), logs, quant_logs)
    return done_already[name]


@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_computes_the_simulated_codes_as_deployed_and_as_written(zoo, name):
    quant, result, logs, quant_logs = _quantize_and_export(zoo, name)
    parity = result["parity"]
    assert parity["passed"] is True, parity.get("explanation")
    steps = parity["steps"]
    for mode in ("deployed", "as_written"):
        analysis = steps[mode]
        quantizers = analysis["quantizers"]
        assert quantizers["checked"] == len(result["layers"]["activations"]["qdq"]), quantizers
        assert quantizers["two_or_more"] == 0 and quantizers["one_step_elsewhere"] == 0, quantizers
        assert analysis["local_passed"] and analysis["max_steps"] <= analysis["tolerance_steps"] + 1e-3
        assert sum(analysis["output_steps"].values()) > 0
    assert steps["deployed"]["optimized"] is True and steps["as_written"]["optimized"] is False
    # The headline is the deployed difference, the same figure the log gives.
    assert parity["max_abs_diff"] == parity["optimized"]["max_abs_diff"]
    assert "as deployed" in parity["explanation"] and "as written" in parity["explanation"]
    assert result["accuracy"]["equal"] is True, result["accuracy"]
    if name == "Fire":  # a float output: differences counted in steps of the last quantizer before it
        assert "last quantizer before the float output" in steps["unit"]
    else:
        assert steps["unit"] == "the output quantizer's step"
        assert steps["step"] == pytest.approx(result["output_scale"])
    # Vanishing activations: the fc's bias saturates int32, in the simulation and in the file, and both say
    # so.
    for said in (quant_logs, logs):
        warned = [text for level, text in said if level == "warning" and "does not fit int32" in text]
        assert bool(warned) == (name == "Vanishing"), warned
        assert all(text.startswith("fc: ") for text in warned)


def test_a_file_that_computes_something_else_is_caught_at_the_first_quantizer_that_differs(zoo, tmp_path):
    import onnx
    from onnx import numpy_helper

    from workbench.worker.export import onnx_qdq, qdq_steps

    quant, result, _, _ = _quantize_and_export(zoo, "Residual")
    proto = onnx.load(result["artifact"])
    # Move one activation quantizer's scale by a quarter in the file only: its codes no longer match.
    node = next(
        n
        for n in proto.graph.node
        if n.op_type == "QuantizeLinear" and qdq_steps._quantizer_of(n) == "_quant_act_2"
    )
    target = node.input[1]
    for init in proto.graph.initializer:
        if init.name == target:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * 1.25, init.name))
    tampered = tmp_path / "tampered.onnx"
    onnx.save(proto, tampered)
    run_ = onnx_qdq.read_quant_run(Path(quant["run_dir"]), None, say=lambda *a, **k: None)
    build = onnx_qdq.build_qdq(run_, say=lambda *a, **k: None)
    x = torch.randn(7, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    for optimize in (False, True):
        analysis = qdq_steps.analyse(
            build.sim, tampered, [("random", x)], result["output_scale"], optimize=optimize
        )
        assert analysis["local_passed"] is False and analysis["passed"] is False
        off = analysis["quantizers"]["off"]
        assert off and off[0]["point"] == build.sim.gm.get_submodule("_quant_act_2").point, off
        assert "not rounding" in qdq_steps.explain(analysis, result["output_scale"])
