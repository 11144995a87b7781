"""Range estimators: the MSE grid search is exhaustive, the registry names them all, each does its job."""

from __future__ import annotations

import math

import pytest
import torch

from workbench.errors import JobError
from workbench.worker.quant.measure import tensor_error
from workbench.worker.quant.quantizer import Grid, qparams_from_range
from workbench.worker.quant.ranges import (
    Observed,
    estimate,
    list_range_estimators,
    squared_error,
)


def heavy_tailed(rows: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    # Student-t like: a few large values that minmax wastes its grid on.
    return torch.randn(rows, n, generator=g) / torch.rand(rows, n, generator=g).clamp(min=0.05).sqrt()


def samples(kind: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "heavy":
        return heavy_tailed(6, 3000, seed)
    if kind == "gauss":
        return torch.randn(6, 3000, generator=g)
    if kind == "laplace":
        return torch.empty(6, 3000).exponential_(generator=g) * torch.randint(
            0, 2, (6, 3000), generator=g
        ).mul(2).sub(1)
    return torch.rand(6, 3000, generator=g).pow(3) * 5  # skewed, all positive


@pytest.mark.parametrize("kind", ["heavy", "gauss", "laplace", "skewed"])
@pytest.mark.parametrize(("bits", "symmetric"), [(2, True), (3, False), (4, True), (8, True), (8, False)])
def test_mse_search_finds_no_better_clip_on_a_finer_grid(kind, bits, symmetric):
    values = samples(kind, bits)
    obs = Observed(values, values.min(1).values, values.max(1).values)
    grid = Grid.for_weights(bits, symmetric)
    lo, hi = estimate("mse", obs, grid)
    objective = squared_error(values, grid)
    found = objective(lo, hi)
    # Ten times finer than the search's coarse grid, everywhere (not only near the answer).
    alphas = (torch.arange(1, 1001) / 1000).unsqueeze(1)
    finer = torch.cat([objective(a * obs.lo, a * obs.hi) for a in alphas.split(100)]).min(dim=0).values
    assert torch.all(found <= finer * (1 + 1e-6)), (found, finer)
    if kind == "heavy":
        assert torch.all(found < objective(obs.lo, obs.hi))  # heavy tails: clipping pays


def test_mse_is_vectorised_over_channels():
    values = heavy_tailed(5, 2000)
    values[2] *= 10  # a channel with a wider range gets its own clip
    obs = Observed(values, values.min(1).values, values.max(1).values)
    grid = Grid.for_weights(4, True)
    lo, hi = estimate("mse", obs, grid)
    for c in range(5):
        one = Observed(values[c : c + 1], obs.lo[c : c + 1], obs.hi[c : c + 1])
        lo1, hi1 = estimate("mse", one, grid)
        assert torch.allclose(lo[c], lo1[0]) and torch.allclose(hi[c], hi1[0])


def test_percentile_minmax_and_the_registry():
    values = torch.arange(1, 10001, dtype=torch.float32).reshape(1, -1)
    obs = Observed(values, values.min(1).values, values.max(1).values)
    grid = Grid.for_weights(8, False)
    lo, hi = estimate("percentile", obs, grid, 99.0)
    assert float(hi) == 9900 and float(lo) == 101
    assert [float(v) for v in estimate("minmax", obs, grid)] == [1.0, 10000.0]
    names = [e.name for e in list_range_estimators("activation")]
    assert names == ["bn", "cross_entropy", "minmax", "mse", "percentile"]
    assert [e.name for e in list_range_estimators("weight")] == ["minmax", "mse", "percentile"]
    with pytest.raises(JobError, match="did you mean 'mse'"):
        estimate("mes", obs, grid)
    with pytest.raises(JobError, match="does not apply"):
        estimate("bn", obs, grid)


def test_bn_range_is_beta_plus_minus_six_gamma_clipped_by_relu():
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([1.0, 0.25])
    obs = Observed(torch.zeros(1, 4), torch.zeros(1), torch.ones(1), bn=(mean, std), relu=True)
    lo, hi = estimate("bn", obs, Grid.for_activations(8, False, True))
    assert float(lo) == 0 and float(hi) == pytest.approx(6.5)
    obs.relu = False
    lo, hi = estimate("bn", obs, Grid.for_activations(8, False, False))
    assert float(lo) == pytest.approx(-5.5) and float(hi) == pytest.approx(6.5)


def test_cross_entropy_keeps_the_winning_logit_better_than_mse():
    g = torch.Generator().manual_seed(0)
    # Many classes: a crowd of small logits and one large winner per sample (paper section 3.4).
    logits = torch.randn(256, 100, generator=g)
    logits[torch.arange(256), torch.randint(0, 100, (256,), generator=g)] += 12
    flat = logits.reshape(1, -1)
    obs = Observed(flat, flat.min(1).values, flat.max(1).values, logits=logits)
    grid = Grid.for_activations(4, False, False)

    def kept(name):
        lo, hi = estimate(name, obs, grid)
        q = torch.fake_quantize_per_tensor_affine(
            logits,
            float(qparams_from_range(lo[0], hi[0], grid).scale),
            int(qparams_from_range(lo[0], hi[0], grid).zero_point),
            0,
            15,
        )
        return float((q.argmax(1) == logits.argmax(1)).float().mean())

    assert kept("cross_entropy") >= kept("mse")
    assert kept("cross_entropy") > 0.95


def test_error_split_adds_up_and_sqnr_rises_about_six_db_per_bit():
    values = torch.randn(1, 20_000, generator=torch.Generator().manual_seed(1))
    obs = Observed(values, values.min(1).values, values.max(1).values)
    sqnr = []
    for bits in (4, 5, 6, 7, 8):
        grid = Grid.for_weights(bits, True)
        lo, hi = estimate("mse", obs, grid)
        err = tensor_error(values, qparams_from_range(lo, hi, grid, axis=0))
        assert err["mse"] == pytest.approx(err["clipping_mse"] + err["rounding_mse"], rel=1e-6)
        assert err["clipping_mse"] > 0 and err["rounding_mse"] > 0  # mse clips a gaussian a little
        sqnr.append(err["sqnr_db"])
    steps = [b - a for a, b in zip(sqnr, sqnr[1:])]
    assert all(5.0 < s < 7.0 for s in steps), steps
    assert not math.isnan(sum(sqnr))
