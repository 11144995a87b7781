"""The MSE activation range is searched on every calibration value (issue #22): a streaming histogram keeps
them all, exactly in count and sum, and the range it picks is within 0.5 % of an exhaustive search over the
raw values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from workbench.worker.quant.histogram import StreamingHistogram
from workbench.worker.quant.quantizer import Grid
from workbench.worker.quant.ranges import binned_squared_error, grid_search, squared_error
from workbench.worker.quant.sim import SAMPLE_CAP, Observer


def batches(seed: int, count: int = 8, size: int = 2**16) -> list[torch.Tensor]:
    """Heavy-tailed activations whose extremes grow batch by batch (the histogram widens as they arrive), with
    a few rare outliers, as a post-GELU or residual tensor has: where a clipped range pays off, and a sample
    misses tails."""
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


# --- lumpy activations: narrow dips in the error that a 1/1000 grid steps over ------------------------------


def lumpy(
    seed: int,
    n: int = 200_000,
    zeros: float = 0.49,
    distinct: int = 14_000,
    clusters: int = 40,
    width: float = 0.0008,
    floor: float = 0.4,
) -> torch.Tensor:
    """`zeros` of the values exactly 0 (a ReLU's), the rest drawn from about `distinct` values in `clusters`
    narrow clusters (relative `width`) between `floor` and 1 of the max, unevenly weighted: a few clusters
    line up with the 8-bit grid's levels for only a narrow band of ranges."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(clusters, generator=g) * (1 - floor) + floor
    pool = centres[torch.randint(0, clusters, (distinct,), generator=g)]
    pool = pool + torch.randn(distinct, generator=g) * width
    pool = pool.clamp(min=1e-3) * 6
    weights = torch.rand(distinct, generator=g) ** 3
    positive = pool[torch.multinomial(weights, n - int(n * zeros), replacement=True, generator=g)]
    return torch.cat([torch.zeros(int(n * zeros)), positive])


def exhaustive_best(values: torch.Tensor, grid: Grid, steps: int = 20_000) -> float:
    """The least squared error over every upper bound alpha * max, alpha on the grid 1/steps .. 1 (lower bound
    alpha * min), each evaluated on every distinct value weighted by its count: the same sum as over all
    values."""
    distinct, counts = torch.unique(values.double(), return_counts=True)
    objective = binned_squared_error(distinct.unsqueeze(0), counts.double().unsqueeze(0), grid)
    lo, hi = values.min().double().reshape(1), values.max().double().reshape(1)
    alphas = (torch.arange(1, steps + 1, dtype=torch.float64) / steps).unsqueeze(1)
    per_call = max(1, 2**22 // len(distinct))
    return float(torch.cat([objective(a * lo, a * hi) for a in alphas.split(per_call)]).min())


def chosen_error(values: torch.Tensor, grid: Grid, batches: int = 4) -> float:
    """The squared error over all values of the range the mse estimator picks from the calibration
    histogram."""
    from workbench.worker.quant.ranges import estimate

    observer = Observer(batches, seed=0, keep_rows=False, histogram=True)
    shuffled = values[torch.randperm(len(values), generator=torch.Generator().manual_seed(1))]
    for part in shuffled.chunk(batches):
        observer.update(part)
    lo, hi = estimate("mse", observer.observed(), grid)
    return mse(values.double(), lo.double(), hi.double(), grid)


@pytest.mark.parametrize("seed", [2, 6, 7])  # where the 1/1000 grid came out 1.0 % to 1.5 % above it
def test_a_lumpy_activation_gets_within_half_a_percent_of_the_exhaustive_best(seed):
    values = lumpy(seed)
    distinct = len(torch.unique(values))
    assert 9_000 < distinct < 11_000 and float((values == 0).float().mean()) == pytest.approx(0.49, abs=1e-3)
    grid = Grid.for_activations(8, symmetric=False, nonnegative=True)
    assert chosen_error(values, grid) <= exhaustive_best(values, grid) * 1.005


@settings(max_examples=30, derandomize=True)
# A dip 0.0045 below the max that the 1/1000 fine grid stepped over (1.37 % above the exhaustive best).
@example(
    seed=269962144,
    bits=8,
    zeros=0.37490984016458984,
    clusters=39,
    width=0.012448322858140773,
    floor=0.7533301951125683,
    signed=False,
)
@given(
    seed=st.integers(0, 2**31 - 1),
    bits=st.sampled_from([4, 6, 8]),
    zeros=st.floats(0.0, 0.6),
    clusters=st.integers(2, 60),
    width=st.floats(1e-4, 2e-2),
    floor=st.floats(0.0, 0.9),
    signed=st.booleans(),
)
def test_the_mse_range_of_random_lumpy_activations_is_within_half_a_percent(
    seed, bits, zeros, clusters, width, floor, signed
):
    values = lumpy(seed, n=20_000, zeros=zeros, distinct=2_000, clusters=clusters, width=width, floor=floor)
    if signed:  # a few clusters below zero too, so the zero point moves with the range
        values = torch.where(torch.arange(len(values)) % 3 == 0, -0.4 * values, values)
    grid = Grid.for_activations(bits, symmetric=False, nonnegative=not signed)
    assert chosen_error(values, grid) <= exhaustive_best(values, grid) * 1.005
