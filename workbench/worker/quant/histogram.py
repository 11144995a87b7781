"""Every calibration value of an activation, kept as a fine streaming histogram (count and sum per bin), so
the MSE range search sees all of them rather than a sample. Worker side; never imports Qt.

Each bin keeps its count and the sum of its values, hence its centroid c. The squared error of quantizing the
bin's values x to q is sum (x - c)^2 + n (c - q)^2, and the first term does not depend on the range whenever
the whole bin rounds to one level: the search minimises sum n (c - q(c))^2 over the bins, exact but for the
few bins that straddle a rounding or clipping boundary (2^15 bins put at least 128 of them in every 8-bit
step).
"""

from __future__ import annotations

import math

import torch

BINS = 2**15


class StreamingHistogram:
    """Counts and sums of values in BINS equal bins over [lo, lo + width), widened by doubling as values
    outside arrive: merging neighbouring bins adds their counts and sums, so nothing is lost or
    approximated."""

    def __init__(self, bins: int = BINS):
        self.bins = bins
        self.lo: float | None = None
        self.width = 0.0
        self.count: torch.Tensor | None = None  # float64: exact counts to 2^53, and bincount's weights type
        self.total: torch.Tensor | None = None

    @torch.no_grad()
    def update(self, x: torch.Tensor, extremes: tuple[float, float] | None = None) -> None:
        """Add every value of `x`; `extremes` (its min and max, when the caller has them) saves a pass. The
        values are binned and summed in their own float32 (a bin index off by one at a bin's edge moves a
        value by less than a bin, and each batch's sums are added in float64): converting every value to
        float64 first took as long as the binning."""
        flat = x.detach().reshape(-1)
        if flat.numel() == 0:
            return
        if flat.dtype not in (torch.float32, torch.float64):  # integers and half precision bin as float32
            flat = flat.float()
        low, high = extremes if extremes is not None else (float(v) for v in torch.aminmax(flat))
        if not (math.isfinite(low) and math.isfinite(high)):  # an inf or nan would widen the bins forever
            flat = flat[torch.isfinite(flat)]
            if flat.numel() == 0:
                return
            low, high = (float(v) for v in torch.aminmax(flat))
        if self.lo is None:
            self.lo = low
            # A first batch of one value (a dead ReLU's zeros) still gets a width, widened later if needed.
            self.width = (high - low) * (1 + 2**-20) or max(abs(low), 1.0) * 2**-20
            self.count = torch.zeros(self.bins, dtype=torch.float64, device=flat.device)
            self.total = torch.zeros_like(self.count)
        while low < self.lo or high >= self.lo + self.width:
            self._double(downward=low < self.lo)
        index = (flat - self.lo).mul_(self.bins / self.width).clamp_(0, self.bins - 1).to(torch.int32)
        self.count += torch.bincount(index, minlength=self.bins)
        self.total += torch.bincount(index, weights=flat, minlength=self.bins)

    def _double(self, *, downward: bool) -> None:
        """Twice the width, the old bins merged in pairs into one half: the upper half when growing
        downward."""
        half = self.bins // 2
        merged = [t.view(half, 2).sum(dim=1) for t in (self.count, self.total)]
        for old, new in zip((self.count, self.total), merged):
            old.zero_()
            if downward:
                old[half:] = new
            else:
                old[:half] = new
        if downward:
            self.lo -= self.width
        self.width *= 2

    def centroids(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(centroid, count) of each bin that holds values, on the CPU in float64."""
        if self.count is None:
            return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
        held = self.count > 0
        count, total = self.count[held].cpu(), self.total[held].cpu()
        return total / count, count
