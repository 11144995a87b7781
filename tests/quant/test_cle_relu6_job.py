"""quant.analyze with cle on a net whose layers are joined by ReLU6 (expand -> depthwise -> project): by
default the ReLU6s between layers become ReLUs, the job logs it with the float change measured on the held-out
data, and cle_report lists them with that change; cle_relu6 = keep leaves them and names the pairs they
block."""

from __future__ import annotations

import textwrap

import pytest
import torch
from event_recorder import Events

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

MODEL = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        torch.manual_seed(0)
        self.expand = nn.Conv2d(1, 16, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.act1 = nn.ReLU6()
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.project = nn.Conv2d(16, 8, 1)
        self.head = nn.Linear(8, num_classes)
        with torch.no_grad():
            self.bn1.bias[:4] = 7.0  # these channels pass 6: ReLU6 -> ReLU changes the float model

    def forward(self, x):
        x = self.act1(self.bn1(self.expand(x)))
        x = torch.nn.functional.relu6(self.bn2(self.dw(x)))
        x = self.project(x)
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))
"""


@pytest.fixture(scope="module")
def quantize(tmp_path_factory):
    root = tmp_path_factory.mktemp("relu6")
    (root / "net.py").write_text(textwrap.dedent(MODEL))
    namespace: dict = {}
    exec(compile(MODEL, str(root / "net.py"), "exec"), namespace)
    torch.save(namespace["Net"]().state_dict(), root / "net.pt")  # untrained: the job needs weights to load

    def run(**parts) -> tuple[dict, Events]:
        spec = {
            "model": {"name": f"file:{root / 'net.py'}:Net", "checkpoint": str(root / "net.pt")},
            "dataset": {"name": "digits", "test_fraction": 0.25},
            "calibration": {"samples": 128, "seed": 0},
            "cle": True,
            **parts,
        }
        events = Events()
        result = run_task(get_task("quant.analyze"), spec, emit=events, workspace=root / "ws")
        assert result["status"] == "done", (result.get("error"), result.get("traceback"))
        return result, events

    return run


def log_lines(events: Events) -> list[str]:
    return [e.get("message", e.get("text", "")) for e in events.of("log")]


def test_relu6_between_layers_becomes_relu_and_the_float_change_is_reported(quantize):
    result, events = quantize()
    report = result["cle"]
    assert report["relu6_replaced"] == ["act1", "relu6"]  # the module by its path, the call by its node name
    assert ["expand", "dw", "project"] in report["triplets"] and report["clipped"] == []
    change = report["float_change"]
    assert set(change) == {"measure", "before", "after", "logit_sqnr_db"}
    assert change["before"] == result["fp32"]["accuracy"]
    assert change["logit_sqnr_db"] is not None and change["logit_sqnr_db"] < 80  # the model did change
    line = next(text for text in log_lines(events) if "ReLU6 by ReLU" in text)
    assert line.startswith("CLE: replaced 2 ReLU6 by ReLU (white paper 4.1); float accuracy ")
    # CLE itself keeps the ReLU model: its rung measures what the float change measured.
    assert result["steps"][2]["step"] == "cle" and result["steps"][2]["accuracy"] == change["after"]


def test_cle_relu6_keep_leaves_them_and_names_the_blocked_pairs(quantize):
    result, _ = quantize(cle_relu6="keep")
    report = result["cle"]
    assert report["relu6_replaced"] == [] and report["float_change"] is None
    assert {(c["first"], c["second"]) for c in report["clipped"]} == {("expand", "dw"), ("dw", "project")}
    assert report["triplets"] == []
