"""Per-channel ranges of a layer's output activation, and how unevenly they are spread: the ratio of the widest
channel's range to the median channel's, and which channels are widest. One per-tensor activation scale must
cover the widest channel, so a large ratio means the other channels get few integer levels (outlier channels,
common in transformers). Worker side; never imports Qt.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.worker.quant.graph import EMBEDDINGS

TOP = 3  # how many of the widest channels the report names


def channel_dim(module: nn.Module) -> int:
    """Where a layer's output keeps its channels: last for linear and embedding outputs (..., features), dim 1 for
    conv-like outputs (N, C, ...)."""
    return -1 if isinstance(module, (nn.Linear, *EMBEDDINGS)) else 1


class ChannelExtremes:
    """Running per-channel minimum and maximum of one tensor over the calibration batches (on its device)."""

    def __init__(self, dim: int):
        self.dim = dim
        self.lo: torch.Tensor | None = None
        self.hi: torch.Tensor | None = None

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            return
        rows = x.movedim(self.dim, 0).reshape(x.shape[self.dim], -1)
        if rows.shape[1] == 0:
            return
        lo, hi = torch.aminmax(rows, dim=1)
        if self.lo is None or self.lo.shape != lo.shape:
            self.lo, self.hi = lo, hi  # a first batch (or a changed width, which a layer's output never has)
        else:
            self.lo, self.hi = torch.minimum(self.lo, lo), torch.maximum(self.hi, hi)


def range_ratio(lo: torch.Tensor, hi: torch.Tensor, top: int = TOP) -> tuple[float | None, list[int]]:
    """(max over median of the per-channel ranges hi - lo, the widest `top` channels, widest first). The ratio
    is None where the median channel spans nothing (most channels dead): no ratio describes that."""
    ranges = (hi.float() - lo.float()).cpu()
    if ranges.numel() == 0:
        return None, []
    order = torch.argsort(ranges, descending=True)[:top]
    median = float(ranges.median())
    ratio = float(ranges.max()) / median if median > 0 else None
    return ratio, [int(i) for i in order]
