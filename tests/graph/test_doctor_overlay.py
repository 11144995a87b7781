"""A quantize run's doctor findings as a graph overlay: each layer by the severity of its worst finding,
written beside the SQNR overlays, on the node Model Explorer shows for that module; nothing without a doctor
block."""

from __future__ import annotations

import json

import torch

from workbench.worker.graph.me_json import graph_from_program
from workbench.worker.graph.overlays import (
    DOCTOR_OVERLAY,
    doctor_nodes,
    doctor_values,
    finding_node,
    write_quant_overlays,
)


def _graph() -> dict:
    nodes = [
        {"id": node, "attrs": [{"key": "module", "value": module}]}
        for node, module in (("conv", "conv1"), ("relu", "relu1"), ("fc", "fc"))
    ]
    return {"graphs": [{"id": "graph", "nodes": nodes}]}


LAYERS = [
    {"name": "conv1", "tensor": "weight", "sqnr_db": 20.0},
    {"name": "fc", "tensor": "weight", "sqnr_db": 30.0},
]
DOCTOR = {
    "findings": [
        {"id": "conv1:weight:outlier_channels", "layer": "conv1", "severity": 7.5},
        {"id": "conv1:activation:clipping", "layer": "conv1", "severity": 2.0},
        {"id": "fc:activation:bias_shift", "layer": "fc", "severity": None},
        {"id": "gone:weight:clipping", "layer": "gone", "severity": 9.0},
        "not a finding",
    ]
}


def test_each_layer_takes_its_worst_findings_severity():
    assert doctor_values(DOCTOR, {"conv1", "fc", "relu1"}) == {"conv1": 7.5, "fc": 0.0}
    assert doctor_values(None, {"conv1"}) == {} and doctor_values({"findings": None}, {"conv1"}) == {}


def test_the_overlay_is_written_beside_the_sqnr_and_names_its_run(tmp_path):
    written = write_quant_overlays(tmp_path, _graph(), LAYERS, quant_run="q1", doctor=DOCTOR)
    metric, label = DOCTOR_OVERLAY
    assert set(written) == {"quant_weight_sqnr", metric}
    index = json.loads((tmp_path / "overlays.json").read_text())["overlays"][metric]
    assert index["label"] == label and index["quant_run"] == "q1" and index["doctor"] is True
    assert index["values"] == {"conv1": 7.5, "fc": 0.0} and not index["higher_is_better"]
    data = json.loads((tmp_path / index["path"]).read_text())
    # darkest
    assert data["results"]["conv"]["value"] == 7.5 and data["results"]["conv"]["bgColor"] == "#8c2d04"
    assert set(data["results"]) == {"conv", "fc"}


def test_no_doctor_block_no_overlay(tmp_path):
    assert set(write_quant_overlays(tmp_path, _graph(), LAYERS, quant_run="q1")) == {"quant_weight_sqnr"}


class Branchy(torch.nn.Module):
    """Two branches concatenated, then a residual add of a layer's output to the concat's consumer."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.branch_a = torch.nn.Conv2d(16, 8, 1)
        self.branch_b = torch.nn.Conv2d(16, 8, 3, padding=1)
        self.conv3 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        y = torch.cat([torch.relu(self.branch_a(x)), torch.relu(self.branch_b(x))], dim=1)
        y = self.conv3(y) + x
        return self.fc(y.mean((2, 3)))


def _exported_graph() -> dict:
    program = torch.export.export(Branchy().eval(), (torch.randn(1, 1, 8, 8),), strict=False)
    return graph_from_program(program, 16)


def _concat(layer: str, op: str, inputs: list[str], severity: float) -> dict:
    return {
        "id": f"{layer}:activation:mixed_range_concat",
        "layer": layer,
        "cause": "mixed_range_concat",
        "severity": severity,
        "evidence": {"op": op, "inputs": [{"name": n, "lo": 0.0, "hi": 1.0} for n in inputs]},
    }


def test_concat_and_add_findings_paint_their_ops_node_and_name_it(tmp_path):
    """The quantizer's trace names a concat `cat` and an add `add`; the graph is torch.export's, where no
    module owns them: each is found by its op and the modules that feed it, and its node carries the
    finding."""
    graph = _exported_graph()
    names = {"conv1", "branch_a", "branch_b", "conv3", "fc"}
    doctor = {
        "findings": [
            {"id": "conv1:weight:outlier_channels", "layer": "conv1", "severity": 2.0},
            # the trace's name differs from the graph's: found by its inputs all the same
            _concat("cat_7", "cat", ["branch_a", "branch_b"], 12.0),
            _concat("add", "add", ["conv3", "conv1"], 4.0),
            _concat("nowhere", "cat", ["fc", "branch_a"], 9.0),  # no concat of those: left out
        ]
    }
    by_id = {node["id"]: node for node in graph["graphs"][0]["nodes"]}
    placed = doctor_nodes(doctor, graph, names)
    assert set(placed) == {"cat", "add"}
    assert by_id["cat"]["label"] == "aten.cat" and placed["cat"] == ("cat_7", 12.0)
    assert by_id["add"]["label"].startswith("aten.add") and placed["add"] == ("add", 4.0)
    written = write_quant_overlays(
        tmp_path,
        graph,
        [{"name": "conv1", "tensor": "weight", "sqnr_db": 20.0}],
        quant_run="q1",
        doctor=doctor,
    )
    index = json.loads((tmp_path / "overlays.json").read_text())["overlays"][DOCTOR_OVERLAY[0]]
    assert DOCTOR_OVERLAY[0] in written
    assert index["node_findings"] == {"cat": "cat_7", "add": "add"}
    data = json.loads((tmp_path / index["path"]).read_text())["results"]
    assert data["cat"]["value"] == 12.0 and data["cat"]["bgColor"] == "#8c2d04"  # the worst: darkest
    assert data["add"]["value"] == 4.0 and data["conv2d"]["value"] == 2.0  # conv1's own node


def test_a_finding_named_as_the_graphs_node_is_found_without_inputs():
    graph = _exported_graph()
    assert finding_node({"layer": "cat", "evidence": {}}, graph) == "cat"
    assert finding_node({"layer": "gone", "evidence": {}}, graph) is None
