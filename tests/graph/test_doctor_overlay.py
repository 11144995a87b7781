"""A quantize run's doctor findings as a graph overlay: each layer by the severity of its worst finding,
written beside the SQNR overlays, on the node Model Explorer shows for that module; nothing without a doctor
block."""

from __future__ import annotations

import json

from workbench.worker.graph.overlays import DOCTOR_OVERLAY, doctor_values, write_quant_overlays


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
