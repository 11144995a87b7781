"""How much of a model a quantize run quantizes: attention's own projections and a LayerNorm stay float, and a
model under 95 % quantized is named with what stays float."""

from __future__ import annotations

import torch
from torch import nn

from workbench.worker.quant.coverage import coverage, warning


class Attentive(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 32)
        self.norm = nn.LayerNorm(32)
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = self.norm(self.embed(x))
        return self.head(self.attention(h, h, h)[0].mean(1))


def test_attention_projections_and_norms_count_as_float_and_are_named():
    model = Attentive()
    found = coverage(model, {"embed", "head"}, {})
    total = sum(p.numel() for p in model.parameters())
    quantized = sum(p.numel() for m in (model.embed, model.head) for p in m.parameters())
    assert found["total_parameters"] == total and found["quantized_parameters"] == quantized
    assert found["parameters"] == quantized / total < 0.95
    kinds = {e["type"]: e for e in found["float"]}
    # MultiheadAttention holds in_proj itself and out_proj as a child (NonDynamicallyQuantizableLinear).
    assert kinds["MultiheadAttention"]["parameters"] == 3 * 32 * 32 + 3 * 32
    assert kinds["LayerNorm"]["parameters"] == 64
    assert found["float"][0]["type"] == "MultiheadAttention"  # largest first
    said = warning(found)
    assert said is not None and "MultiheadAttention" in said and f"{found['parameters']:.1%}" in said


def test_a_folded_batchnorm_counts_as_quantized():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU())
    found = coverage(model, {"0"}, {"0": {"bn": "1", "mean": torch.zeros(8), "std": torch.ones(8)}})
    assert found["parameters"] == 1.0 and found["float"] == [] and warning(found) is None


def test_the_flops_share_counts_what_the_quantized_layers_compute():
    model = Attentive()
    x = torch.randn(2, 6, 8)  # one sample is counted
    found = coverage(model, {"embed", "head"}, {}, example=x)
    tokens, width = 6, 32
    embed, head = 2 * tokens * 8 * width, 2 * width * 10
    # Attention: its q, k, v and out projections and the two score matmuls, all float.
    attention = 2 * tokens * width * 3 * width + 2 * tokens * width * width + 2 * 2 * tokens * tokens * width
    assert found["quantized_flops"] == embed + head
    assert found["total_flops"] == embed + head + attention
    assert found["flops"] == (embed + head) / (embed + head + attention) < 0.95
    assert "and {:.1%} of its FLOPs".format(found["flops"]) in warning(found)
    # A model the counter cannot run is reported without a FLOPs share, not failed.
    assert "flops" not in coverage(model, {"embed"}, {}, example=torch.randn(1, 3))
