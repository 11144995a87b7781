"""A graph shows any model, whatever its outputs: no trial forward pass checks them for a task (a segmentation
map was refused as "not (batch, num_classes) scores"), and a model that cannot run says why, from the one
forward pass the graph makes."""

from __future__ import annotations

from graph_helpers import build, done, modules

SEGMENTER = """
import torch
from torch import nn


class Segmenter(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.body = nn.Conv2d(1, 8, 3, padding=1)
        self.head = nn.Conv2d(8, num_classes, 1)

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))
"""


def test_a_segmentation_models_graph_is_built(tmp_path):
    (tmp_path / "seg.py").write_text(SEGMENTER)
    result = done(
        build(
            tmp_path / "ws",
            {
                "model": {
                    "name": f"file:{tmp_path / 'seg.py'}:Segmenter",
                    "num_classes": 3,
                    "input_shape": [1, 16, 16],
                }
            },
        )
    )
    assert modules(result)["head"]["output_shape"] == [3, 16, 16]


def test_a_model_that_cannot_take_the_input_says_so(tmp_path):
    (tmp_path / "seg.py").write_text(SEGMENTER)
    result = build(
        tmp_path / "ws",
        {"model": {"name": f"file:{tmp_path / 'seg.py'}:Segmenter", "input_shape": [3, 16, 16]}},
    )
    assert result["status"] == "failed"
    message = result["error"]["message"]
    assert "cannot run on an input of shape 3,16,16" in message and "model.input_shape" in message, message
