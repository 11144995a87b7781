"""`graph.build` on torchvision's resnet18 (10 classes, 3x224x224), and `workbench graph` on the command
line."""

from __future__ import annotations

import pytest
import torch
from cli_helpers import expect, no_traceback, one_json, wb
from graph_helpers import CONTRACT_KEYS, build, done, graph_nodes, modules
from torch.utils.flop_counter import FlopCounterMode


@pytest.mark.slow
def test_resnet18_counts_shapes_and_nodes(tmp_path):
    import torchvision

    result = done(
        build(
            tmp_path,
            {"model": {"name": "torchvision:resnet18", "num_classes": 10, "input_shape": [3, 224, 224]}},
        )
    )
    reference = torchvision.models.resnet18(num_classes=10).eval()
    assert (
        result["params_total"] == result["params_trainable"] == sum(p.numel() for p in reference.parameters())
    )
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        reference(torch.zeros(1, 3, 224, 224))
    assert result["flops"] == counter.get_total_flops()
    assert result["capture"] == "non_strict"
    assert result["nodes"] == len(graph_nodes(result)) >= 150
    rows = modules(result)
    assert rows["layer1.0.conv1"]["output_shape"] == [64, 56, 56]
    assert rows["layer1.0.conv1"]["flops"] == 2 * 64 * 56 * 56 * 64 * 9
    assert rows["fc"]["output_shape"] == [10] and rows["layer4"]["output_shape"] == [512, 7, 7]
    assert rows["layer1.0.relu"]["calls"] == 2  # BasicBlock calls its one ReLU twice


def test_cli_graph_prints_one_json_object(tmp_path):
    proc = wb(tmp_path, "graph", "--set", "model.name=cnn", "--json", timeout=120)
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert CONTRACT_KEYS <= set(result) and result["status"] == "done"
    assert result["input_shape"] == [1, 8, 8]  # model.input_shape empty: the default dataset's (digits) shape
    assert result["flops"] == 2 * 32 * 8 * 8 * 9 + 2 * 64 * 4 * 4 * 32 * 9 + 2 * 64 * 10
