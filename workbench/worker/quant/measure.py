"""Quantization error measures: SQNR, MSE split into clipping and rounding error, cosine similarity, and the
histogram of a tensor with the error each bin contributes. Worker side; never imports Qt.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from workbench.worker.quant.quantizer import QParams, quant_dequant

HISTOGRAM_BINS = 256


def sqnr_db(signal: float, noise: float) -> float | None:
    """10 log10(signal / noise); None where it is infinite, with no noise or no signal (JSON has no infinity:
    the mse beside it, zero or not, tells which)."""
    if noise <= 0 or signal <= 0:
        return None
    return 10.0 * math.log10(signal / noise)


def clipped_mask(values: torch.Tensor, qp: QParams) -> torch.Tensor:
    """Where values lie outside the grid's extent [s (qmin - z), s (qmax - z)]: their error is clipping
    error."""
    low, high = qp.extent()
    if qp.axis is not None:
        shape = [1] * values.dim()
        shape[qp.axis] = -1
        low, high = low.view(shape), high.view(shape)
    return (values < low) | (values > high)


def tensor_error(values: torch.Tensor, qp: QParams, quantized: torch.Tensor | None = None) -> dict:
    """mse, clipping_mse, rounding_mse (they add up to mse), sqnr_db and cosine of `values` quantized with
    `qp`.

    `quantized` gives the values as actually quantized (AdaRound's rounding, say); default: rounded to
    nearest. Values outside the grid's extent carry clipping error, the rest rounding error.
    """
    x = values.detach().float()
    q = quantized.detach().float() if quantized is not None else quant_dequant(x, qp)
    err = (q - x).pow_(2)
    clipped = clipped_mask(x, qp)
    n = max(x.numel(), 1)
    total = float(err.sum())
    clip = float(err[clipped].sum())
    norm = float(x.norm() * q.norm())
    return {
        "mse": total / n,
        "clipping_mse": clip / n,
        "rounding_mse": (total - clip) / n,
        "sqnr_db": sqnr_db(float(x.pow(2).sum()), total),
        "cosine": float((x * q).sum()) / norm if norm > 0 else None,
    }


@dataclass
class ErrorSums:
    """Running sums that compare a reference tensor x with an approximation y, batch by batch."""

    xx: float = 0.0
    ee: float = 0.0
    xy: float = 0.0
    yy: float = 0.0
    count: int = 0
    extra: dict = field(default_factory=dict)

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        # Dot products of the flat float32 tensors: no float64 copies of whole activation batches (hundreds of
        # MB for a ResNet), and blocked accumulation keeps the sums accurate enough for dB and MSE.
        x, y = x.detach().float().reshape(-1), y.detach().float().reshape(-1)
        e = x - y
        self.xx += float(torch.dot(x, x))
        self.ee += float(torch.dot(e, e))
        self.xy += float(torch.dot(x, y))
        self.yy += float(torch.dot(y, y))
        self.count += x.numel()

    def result(self) -> dict:
        norm = math.sqrt(self.xx * self.yy)
        return {
            "sqnr_db": sqnr_db(self.xx, self.ee),
            "mse": self.ee / max(self.count, 1),
            "cosine": self.xy / norm if norm > 0 else None,
        }


def histogram_edges(
    values: torch.Tensor, ranges: list[tuple[float, float]], bins: int = HISTOGRAM_BINS
) -> torch.Tensor:
    """Bin edges spanning the values and every candidate range, so each range's lines fall on the plot."""
    lo = min([float(values.min())] + [r[0] for r in ranges])
    hi = max([float(values.max())] + [r[1] for r in ranges])
    if hi <= lo:
        hi = lo + 1e-6
    return torch.linspace(lo, hi, bins + 1, dtype=torch.float64)


def bin_index(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """The bin of each value (edges are uniform): a multiply and a floor, not a search; values on or past the
    last edge fall in the last bin, values before the first in the first."""
    bins = len(edges) - 1
    lo, hi = float(edges[0]), float(edges[-1])
    index = ((values.detach().reshape(-1).double() - lo) * (bins / (hi - lo))).floor_()
    return index.clamp_(0, bins - 1).long()


def histogram(values: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    """Counts per bin (int64) over uniform edges."""
    return torch.bincount(bin_index(values, edges), minlength=len(edges) - 1)


def error_by_bin(
    values: torch.Tensor, qp: QParams, edges: torch.Tensor, quantized: torch.Tensor | None = None
) -> torch.Tensor:
    """(2, bins) float64: the squared clipping error and the squared rounding error of the values in each
    bin."""
    x = values.detach().float()
    q = quantized.detach().float() if quantized is not None else quant_dequant(x, qp)
    err = (q - x).pow_(2).double().reshape(-1)
    clipped = clipped_mask(x, qp).reshape(-1)
    index = bin_index(x, edges)
    bins = len(edges) - 1
    clip = torch.bincount(index[clipped], weights=err[clipped], minlength=bins)
    rounding = torch.bincount(index[~clipped], weights=err[~clipped], minlength=bins)
    return torch.stack([clip, rounding])
