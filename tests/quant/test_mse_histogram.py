"""The MSE activation range is searched on every calibration value (issue #22): a streaming histogram keeps them
all, exactly in count and sum, and the range it picks is within 0.5 % of an exhaustive search over the raw values."""

from __future__ import annotations

import pytest
import torch

from workbench.worker.quant.histogram import StreamingHistogram
from workbench.worker.quant.quantizer import Grid
from workbench.worker.quant.ranges import grid_search, squared_error
from workbench.worker.quant.sim import SAMPLE_CAP, Observer


def batches(seed: int, count: int = 8, size: int = 2**16) -> list[torch.Tensor]:
    """Heavy-tailed activations whose extremes grow batch by batch (the histogram widens as they arrive), with a
    few rare outliers, as a post-GELU or residual tensor has: where a clipped range pays off, and a sample misses
    tails."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(count):
        x = torch.distributions.Laplace(0.0, 1.0).sample((size,)) * (1 + i / 4)
        x[torch.randint(0, size, (8,), generator=g)] *= 12
        out.append(x)
    return out


def mse(values: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, grid: Grid) -> float:
    return float(squared_error(values.reshape(1, -1), grid)(lo, hi)[0])


def test_the_histogram_keeps_every_value_in_count_and_sum():
    histogram = StreamingHistogram(bins=1024)
    data = [torch.zeros(100), torch.linspace(-1, 1, 1000), torch.linspace(50, 60, 10), torch.tensor([-300.0])]
    for x in data:
        histogram.update(x)
    centroids, counts = histogram.centroids()
    everything = torch.cat(data).double()
    assert counts.sum() == everything.numel()
    assert torch.isclose((centroids * counts).sum(), everything.sum(), atol=1e-9)
    assert centroids.min() >= -300 - 1e-9 and centroids.max() <= 60 + 1e-9
    assert histogram.lo <= -300 and histogram.lo + histogram.width > 60


def test_non_finite_values_are_left_out_rather_than_widening_forever():
    histogram = StreamingHistogram(bins=64)
    histogram.update(torch.tensor([1.0, float("inf"), float("nan"), 2.0]))
    assert histogram.centroids()[1].sum() == 2


@pytest.mark.parametrize("bits,nonnegative", [(8, False), (4, False), (8, True)])
def test_the_mse_range_is_within_half_a_percent_of_an_exhaustive_search(bits, nonnegative):
    data = batches(seed=bits)
    if nonnegative:
        data = [x.clamp(min=0) for x in data]
    everything = torch.cat(data)
    assert everything.numel() > 2**18
    grid = Grid.for_activations(bits, symmetric=False, nonnegative=nonnegative)
    observer = Observer(len(data), seed=0, keep_rows=False, histogram=True)
    for x in data:
        observer.update(x)
    observed = observer.observed()
    assert observed.values.numel() <= SAMPLE_CAP < everything.numel()  # the sample alone sees under half

    from workbench.worker.quant.ranges import estimate

    chosen = estimate("mse", observed, grid)
    lo, hi = everything.min().reshape(1), everything.max().reshape(1)
    exhaustive = grid_search(squared_error(everything.reshape(1, -1), grid), lo, hi)
    best = mse(everything, *exhaustive, grid)
    assert mse(everything, *chosen, grid) <= best * 1.005
