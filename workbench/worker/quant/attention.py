"""nn.MultiheadAttention rebuilt from four nn.Linear children (q_proj, k_proj, v_proj, out_proj), so torch.fx
sees its projections as call_module nodes and quantize treats them as layers. Worker side; never imports Qt.
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    num_heads: int,
    batch_first: bool,
    key_padding_mask: torch.Tensor | None,
    need_weights: bool,
    attn_mask: torch.Tensor | None,
    average_attn_weights: bool,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What nn.MultiheadAttention computes between its in-projections and its out-projection, in eval mode (no
    dropout): (the heads merged, in the input's layout; the attention weights or None). q, k, v are
    projected."""
    unbatched = q.dim() == 2
    if unbatched:  # (L, E): a batch of one, as torch does it
        q, k, v = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    elif not batch_first:  # (L, N, E) -> (N, L, E)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    batch, target, embed = q.shape
    source = k.shape[1]
    head = embed // num_heads
    q = q.reshape(batch, target, num_heads, head).transpose(1, 2)  # (N, H, L, D)
    k = k.reshape(batch, source, num_heads, head).transpose(1, 2)
    v = v.reshape(batch, source, num_heads, head).transpose(1, 2)
    scores = torch.matmul(q * (1.0 / math.sqrt(head)), k.transpose(-2, -1))  # (N, H, L, S)
    if attn_mask is None and is_causal:
        # torch asks for the mask with the hint; without one, the hint alone means the top-left triangle.
        attn_mask = torch.ones(target, source, dtype=torch.bool, device=q.device).tril().logical_not()
    if attn_mask is not None:
        # 2-D: (L, S) for every batch and head; 3-D: (N * H, L, S). A True entry may not be attended to.
        mask = attn_mask if attn_mask.dim() == 2 else attn_mask.reshape(batch, num_heads, target, source)
        scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    if key_padding_mask is not None:  # (N, S)
        padding = key_padding_mask.reshape(batch, 1, 1, source)
        scores = (
            scores.masked_fill(padding, float("-inf"))
            if padding.dtype == torch.bool
            else scores + padding.to(scores.dtype)
        )
    weights = F.softmax(scores, dim=-1)
    out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, target, embed)
    if unbatched:
        out = out.squeeze(0)
    elif not batch_first:
        out = out.transpose(0, 1)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = weights.mean(dim=1)
    return out, weights.squeeze(0) if unbatched else weights


# fx records attend as one call_function node: its Python branches on masks, dims and dtypes run on real
# tensors.
fx.wrap("attend")


def why_kept(module: nn.MultiheadAttention) -> str | None:
    """Why `module` cannot become a QuantizableAttention, or None where it can."""
    if module.bias_k is not None or module.bias_v is not None:
        return (
            "add_bias_kv appends learned key/value rows that QuantizableAttention does not model; it stays "
            "float"
        )
    if module.add_zero_attn:
        return (
            "add_zero_attn appends a zero key/value row that QuantizableAttention does not model; it stays "
            "float"
        )
    return None


def _linear(weight: torch.Tensor, bias: torch.Tensor | None) -> nn.Linear:
    layer = nn.Linear(
        weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype
    )
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    return layer


class QuantizableAttention(nn.Module):
    """An nn.MultiheadAttention (eval mode) whose projections are nn.Linear children; the same outputs.
    Dropout is left out: quantization runs in eval mode (QAT fine-tuning runs attention without it)."""

    def __init__(self, mha: nn.MultiheadAttention):
        super().__init__()
        reason = why_kept(mha)
        if reason is not None:
            raise ValueError(reason)
        self.embed_dim, self.num_heads, self.batch_first = mha.embed_dim, mha.num_heads, mha.batch_first
        self.kdim, self.vdim, self.dropout = mha.kdim, mha.vdim, mha.dropout
        embed = mha.embed_dim
        with torch.no_grad():
            if mha.in_proj_weight is not None:  # one packed (3E, E) matrix: rows q, then k, then v
                weights = mha.in_proj_weight.detach().split(embed)
            else:  # kdim or vdim differs from embed_dim: three matrices
                weights = (mha.q_proj_weight.detach(), mha.k_proj_weight.detach(), mha.v_proj_weight.detach())
            biases = mha.in_proj_bias.detach().split(embed) if mha.in_proj_bias is not None else (None,) * 3
            self.q_proj, self.k_proj, self.v_proj = (
                _linear(w, b) for w, b in zip(weights, biases, strict=True)
            )
            out = mha.out_proj
            self.out_proj = _linear(out.weight.detach(), None if out.bias is None else out.bias.detach())

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights=True,
        attn_mask=None,
        average_attn_weights=True,
        is_causal=False,
    ):
        found = attend(
            self.q_proj(query),
            self.k_proj(key),
            self.v_proj(value),
            self.num_heads,
            self.batch_first,
            key_padding_mask,
            need_weights,
            attn_mask,
            average_attn_weights,
            is_causal,
        )
        # Indexed, not unpacked: under tracing `found` is one Proxy, and unpacking a Proxy cannot know its
        # length.
        return self.out_proj(found[0]), (found[1] if need_weights else None)


CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


def fx_keeps_whole(module: nn.Module, path: str) -> bool:
    """torch.fx's default tracer (what trace() uses) records a call of `module` as one node: torch.nn's own
    modules. Containers are never called themselves, so fx walks into what they hold."""
    return not isinstance(module, CONTAINERS) and fx.Tracer().is_leaf_module(module, path)


def swap_attention(model: nn.Module, kept: dict[str, str] | None = None) -> list[str]:
    """Replace every nn.MultiheadAttention in `model` (in place) by a QuantizableAttention; the paths
    replaced. Those left alone go into `kept` as path -> reason: add_bias_kv or add_zero_attn, or inside a
    module that torch.fx keeps whole (nn.TransformerEncoderLayer: its fast path reads the packed weights, and
    fx would not see the projections anyway)."""
    swapped: list[str] = []

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in parent.named_children():
            path = f"{prefix}{name}"
            if isinstance(child, nn.MultiheadAttention):
                reason = why_kept(child)
                if reason is None:
                    setattr(parent, name, QuantizableAttention(child))
                    swapped.append(path)
                elif kept is not None:
                    kept[path] = reason
            elif fx_keeps_whole(child, path):
                if kept is not None:
                    for inner, module in child.named_modules(prefix=path):
                        if isinstance(module, nn.MultiheadAttention):
                            kept[inner] = (
                                f"inside {type(child).__name__} {path}, which torch.fx keeps whole, so "
                                "its projections are not seen"
                            )
            else:
                visit(child, f"{path}.")

    visit(model, "")
    return swapped
