"""How much of a model a quantize run quantizes: attention counts as quantized where its q/k/v and out
projections are, a LayerNorm, an LSTM or what torch.fx keeps whole stays float with the reason, and a model
under 95 % quantized is named with what stays float and why."""

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
    # The attention counts whole: in_proj it holds itself, and out_proj (its child) with it.
    assert kinds["MultiheadAttention"]["parameters"] == 4 * 32 * 32 + 4 * 32
    assert "projections are not among the quantized layers" in kinds["MultiheadAttention"]["reason"]
    assert kinds["LayerNorm"]["parameters"] == 64 and "normalisation" in kinds["LayerNorm"]["reason"]
    assert found["float"][0]["type"] == "MultiheadAttention"  # largest first
    said = warning(found)
    assert said is not None and "MultiheadAttention" in said and f"{found['parameters']:.1%}" in said
    assert kinds["MultiheadAttention"]["reason"] in said  # why the largest float kind stays float


def test_attention_counts_as_quantized_where_its_projections_are():
    model = Attentive()
    projections = {f"attention.{p}_proj" for p in "qkv"} | {"attention.out_proj"}
    found = coverage(model, {"embed", "head"} | projections, {})
    total = sum(p.numel() for p in model.parameters())
    assert found["quantized_parameters"] == total - 64 and found["float"][0]["type"] == "LayerNorm"
    assert found["parameters"] > 0.95 and warning(found) is None
    # q and k only: a third of the packed in-projection (its rows and its bias) per projection.
    partly = coverage(model, {"embed", "head", "attention.q_proj", "attention.k_proj"}, {})
    kinds = {e["type"]: e for e in partly["float"]}
    assert kinds["MultiheadAttention"]["parameters"] == 2 * 32 * 32 + 2 * 32  # v_proj and out_proj
    # Separate q/k/v matrices where kdim and vdim differ from embed_dim.
    other = nn.Sequential(nn.Linear(4, 4))
    other.attention = nn.MultiheadAttention(16, 2, kdim=8, vdim=12)
    found = coverage(other, {"0", "attention.q_proj", "attention.v_proj"}, {})
    kinds = {e["type"]: e for e in found["float"]}
    assert kinds["MultiheadAttention"]["parameters"] == 16 * 8 + 16 + 16 * 16 + 16  # k_proj, out_proj


def test_what_stays_float_says_why():
    model = nn.Module()
    model.embedding = nn.Embedding(50, 8)
    model.lstm = nn.LSTM(8, 32)  # the largest: the warning says why it stays float
    model.block = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32)
    model.biased = nn.MultiheadAttention(16, 2, add_bias_kv=True)
    model.fc = nn.Linear(16, 4)
    model.unused = nn.Linear(4, 4)
    found = coverage(model, {"fc"}, {})
    kinds = {e["type"]: e for e in found["float"]}
    assert kinds["LSTM"]["reason"] == (
        "ONNX's LSTM/GRU/RNN operators take float weights: onnxruntime has no QDQ "
        "kernel for them, so their weights stay float"
    )
    assert "never calls it as a layer" in kinds["Embedding"]["reason"]  # quantizable, but not quantized here
    # A module torch.fx traces as one call counts whole, with all it holds (its attention, linears and norms).
    block = kinds["TransformerEncoderLayer"]
    assert block["parameters"] == sum(p.numel() for p in model.block.parameters()) and block["modules"] == 1
    assert block["reason"] == "torch.fx keeps it whole, so its layers are not seen"
    assert "add_bias_kv" in kinds["MultiheadAttention"]["reason"]
    assert kinds["MultiheadAttention"]["parameters"] == sum(p.numel() for p in model.biased.parameters())
    assert "never calls it as a layer" in kinds["Linear"]["reason"] and kinds["Linear"]["modules"] == 1
    assert found["total_parameters"] == sum(p.numel() for p in model.parameters())
    said = warning(found)
    assert found["float"][0]["type"] == "LSTM" and "no QDQ kernel" in said


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
    # With its projections quantized, only the two score matmuls stay float.
    projections = {f"attention.{p}_proj" for p in "qkv"} | {"attention.out_proj"}
    found = coverage(model, {"embed", "head"} | projections, {}, example=x)
    assert found["total_flops"] == embed + head + attention
    assert found["quantized_flops"] == embed + head + 2 * tokens * width * 4 * width
    # A model the counter cannot run is reported without a FLOPs share, not failed.
    assert "flops" not in coverage(model, {"embed"}, {}, example=torch.randn(1, 3))
