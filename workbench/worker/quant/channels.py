"""Per-channel ranges of a layer's output activation, and how unevenly they are spread: the ratio of the
widest channel's range to the median channel's, and which channels are widest. One per-tensor activation scale
must cover the widest channel, so a large ratio means the other channels get few integer levels (outlier
channels, common in transformers). Worker side; never imports Qt.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.worker.quant.graph import EMBEDDINGS

TOP = 3  # how many of the widest channels the report names


def channel_dim(module: nn.Module) -> int:
    """Where a layer's output keeps its channels: last for linear and embedding outputs (..., features), dim 1
    for conv-like outputs (N, C, ...)."""
    return -1 if isinstance(module, (nn.Linear, *EMBEDDINGS)) else 1


class ChannelExtremes:
    """Running per-channel minimum and maximum of one tensor over the calibration batches (on its device)."""

    def __init__(self, dim: int):
        self.dim = dim
        self.lo: torch.Tensor | None = None
        self.hi: torch.Tensor | None = None

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if x.dim() < 2 or x.numel() == 0:
            return
        # Reduced along memory order without copying: moving the channels first would copy the whole
        # activation each batch, and reducing over several strided dimensions at once is several times slower
        # on the CPU.
        if self.dim % x.dim() == x.dim() - 1:  # (..., features)
            lo, hi = torch.aminmax(x.reshape(-1, x.shape[-1]), dim=0)
        else:  # (N, C, ...): each sample's channel first, then across the batch
            lo, hi = torch.aminmax(x.reshape(x.shape[0], x.shape[1], -1), dim=2)
            lo, hi = lo.amin(dim=0), hi.amax(dim=0)
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
