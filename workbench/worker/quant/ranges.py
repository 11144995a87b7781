"""Range setting (paper section 3.4): the registry of range estimators (minmax, mse, percentile,
cross_entropy, bn) and what each one sees of a tensor (`Observed`). An estimator returns the clipping range
(lo, hi) per row.

Every estimator is vectorised over rows: one row per output channel for per-channel weights, one row
otherwise. Worker side; never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from workbench.errors import JobError
from workbench.registry import Registry
from workbench.worker.quant.quantizer import Grid, qparams_from_range, quant_dequant

COARSE_STEPS = 100  # candidate clipping ranges alpha * (lo, hi), alpha = 1/100 .. 1
FINE_STEPS = 20  # then a grid ten times finer (1/1000) within one coarse step either side of ...
# ... and twenty times (1/2000) for an activation's histogram: 1/1000 missed a dip at alpha 0.9945, 1.4 %
# better than the 0.990 it chose, on a lumpy activation (test_mse_histogram.py); weights are smooth enough.
ACTIVATION_FINE_STEPS = 40
REFINED = 3  # ... each of the three best local minima of the coarse errors
FINEST_STEPS = 10  # then grids five times finer again (1/5000, 1/25000), each within one step of the best
FINER_STAGES = 2
BN_SIGMAS = 6.0  # the paper's BN-based range: beta +- 6 gamma


@dataclass
class Observed:
    """What a range estimator sees of one tensor.

    `values` is (C, N): the whole weight tensor (one row per output channel, or one row), or for an activation
    a random sample of the calibration values; `lo`/`hi` (C,) are the true extremes of everything seen, and
    `histogram` (centroids, counts), each (1, M), every calibration value in M fine bins (see histogram.py).
    `logits` (N, K) is set for the network's output, `bn` (mean, std per channel of the pre-activation, from a
    folded BatchNorm) where one precedes the tensor, and `relu` when a ReLU follows that BatchNorm. For a
    layer's output, `channel_lo`/`channel_hi` are each channel's extremes over the calibration batches.
    """

    values: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor
    logits: torch.Tensor | None = None
    bn: tuple[torch.Tensor, torch.Tensor] | None = None
    relu: bool = False
    histogram: tuple[torch.Tensor, torch.Tensor] | None = None
    channel_lo: torch.Tensor | None = None
    channel_hi: torch.Tensor | None = None

    @classmethod
    def of_weight(cls, weight: torch.Tensor, per_channel: bool, axis: int = 0) -> Observed:
        """One row per channel along `axis` (1 for a transposed conv's output channels), or one row."""
        weight = weight.detach().float()
        rows = (
            weight.movedim(axis, 0).reshape(weight.shape[axis], -1) if per_channel else weight.reshape(1, -1)
        )
        return cls(rows, rows.min(dim=1).values, rows.max(dim=1).values)


Estimator = Callable[[Observed, Grid, float], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class RangeEstimator:
    name: str
    fn: Estimator
    tensors: tuple[str, ...]  # "weight" and/or "activation"
    applies: Callable[[Observed], bool]
    description: str


RANGE_ESTIMATORS: Registry[RangeEstimator] = Registry(
    "range estimator", error=JobError, missing=lambda name, hint: f"no range estimator named {name!r}; {hint}"
)


def register_range_estimator(
    name: str,
    *,
    tensors: tuple[str, ...] = ("weight", "activation"),
    applies: Callable[[Observed], bool] | None = None,
    description: str = "",
) -> Callable:
    def decorator(fn: Estimator) -> Estimator:
        RANGE_ESTIMATORS.add(
            name,
            RangeEstimator(
                name,
                fn,
                tensors,
                applies or (lambda obs: True),
                description or (fn.__doc__ or "").strip().split("\n")[0],
            ),
        )
        return fn

    return decorator


def get_range_estimator(name: str) -> RangeEstimator:
    return RANGE_ESTIMATORS.get(name)


def list_range_estimators(tensor: str | None = None) -> list[RangeEstimator]:
    return [e for e in RANGE_ESTIMATORS.entries() if tensor is None or tensor in e.tensors]


def estimate(
    name: str, obs: Observed, grid: Grid, percentile: float = 99.99
) -> tuple[torch.Tensor, torch.Tensor]:
    estimator = get_range_estimator(name)
    if not estimator.applies(obs):
        raise JobError(f"range estimator {name!r} does not apply to this tensor")
    lo, hi = estimator.fn(obs, grid, percentile)
    return lo.float(), hi.float()


# --- the search both mse and cross_entropy use --------------------------------------------------------------


def grid_search(
    objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    lo: torch.Tensor,
    hi: torch.Tensor,
    coarse: int = COARSE_STEPS,
    fine: int = FINE_STEPS,
    top: int = REFINED,
    chunk: int = 1,
    check_stop: Callable[[], None] | None = None,
    finest: int = FINEST_STEPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipping range alpha * (lo, hi) per row that minimises `objective(lo, hi) -> error`, where lo and
    hi are (K, C): K candidates for each of the C rows at once, `chunk` candidates per call.

    In stages: every alpha on the grid 1/coarse .. 1 for every row; then the grid `fine / 2` times finer
    within one coarse step either side of each row's `top` best local minima of the coarse errors (the error
    is not convex in alpha: at low bit widths it has several dips, and near alpha = 1 it ripples with the zero
    point's rounding); then FINER_STAGES grids each `finest / 2` times finer again, within one step of the
    previous grid of the best alpha so far, as a lumpy tensor (clusters of values that line up with the grid's
    levels) has dips narrower than a fine step.
    """

    def evaluate(alphas: torch.Tensor) -> torch.Tensor:
        errors = []
        for start in range(0, alphas.shape[0], chunk):
            if check_stop is not None:
                check_stop()
            alpha = alphas[start : start + chunk]
            errors.append(objective(alpha * lo, alpha * hi))
        return torch.cat(errors)

    def around(centres: torch.Tensor, steps: int, half_width: float) -> torch.Tensor:
        """(len(centres) * (steps + 1), C): `steps + 1` alphas evenly over centre +- half_width, each
        centre."""
        offsets = (2 * torch.arange(steps + 1, dtype=lo.dtype, device=lo.device) / steps - 1) * half_width
        return (centres.unsqueeze(1) + offsets.view(1, -1, 1)).reshape(-1, rows).clamp(1e-4, 1.0)

    rows = lo.numel()
    coarse_alphas = (torch.arange(1, coarse + 1, dtype=lo.dtype, device=lo.device) / coarse).unsqueeze(1)
    coarse_alphas = coarse_alphas.expand(-1, rows)
    coarse_errors = evaluate(coarse_alphas)
    fine_alphas = around(coarse_alphas.gather(0, _best_minima(coarse_errors, top)), fine, 1 / coarse)
    fine_errors = evaluate(fine_alphas)
    alphas, errors = torch.cat([coarse_alphas, fine_alphas]), torch.cat([coarse_errors, fine_errors])
    # The first finer grid goes around the `top` best local minima of the fine errors (dips a ripple apart, in
    # one window or several, differ by less than their depth), later ones around the best so far.
    centres = fine_alphas.gather(0, _best_minima(fine_errors, top))
    step = 2 / (coarse * fine)
    # each `finest / 2` times finer, within a step of the centres
    for _ in range(FINER_STAGES if finest else 0):
        finer = around(centres, finest, step)
        alphas, errors = torch.cat([alphas, finer]), torch.cat([errors, evaluate(finer)])
        centres = alphas.gather(0, errors.argmin(dim=0, keepdim=True))
        step *= 2 / finest
    best = alphas.gather(0, errors.argmin(dim=0, keepdim=True))[0]
    return best * lo, best * hi


def _best_minima(errors: torch.Tensor, top: int) -> torch.Tensor:
    """(top, C) indices into errors (K, C): each row's `top` lowest local minima along K (an end counts when
    it is below its one neighbour), then its lowest other candidates where a row has fewer minima."""
    pad = torch.full_like(errors[:1], math.inf)
    padded = torch.cat([pad, errors, pad])
    minimum = (errors <= padded[:-2]) & (errors <= padded[2:])
    # Candidates that are not minima rank after every minimum, among themselves by error.
    spread = (errors.max(dim=0).values - errors.min(dim=0).values).clamp(min=0) + 1
    ranked = torch.where(minimum, errors, errors + spread.nan_to_num(posinf=0.0) + 1)
    return ranked.argsort(dim=0)[: min(top, errors.shape[0])]


CHUNK_VALUES = 2**22  # values per objective call: candidates are batched up to this many (16 MB as float32)


def _chunk(values: torch.Tensor, width: int = 1) -> int:
    """Candidates per objective call; `width` is the values' size relative to float32 (2 for float64)."""
    return max(1, CHUNK_VALUES // max(values.numel() * width, 1))


def squared_error(values: torch.Tensor, grid: Grid) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """objective(lo, hi) -> sum over each row of (x - q(x))^2 with that row's range; lo and hi are (C,) or (K,
    C) for K candidate ranges at once (values are (C, N))."""

    def objective(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(_residual(values, lo, hi, grid), dim=-1).square_()

    return objective


@torch.no_grad()
def _residual(values: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, grid: Grid) -> torch.Tensor:
    """q(x) - x of every value (C, N) under each candidate range (lo, hi: (C,) or (K, C)), in the values'
    dtype."""
    qp = qparams_from_range(lo, hi, grid)
    scale = qp.scale.to(values.dtype).unsqueeze(-1)
    q = values * (1.0 / scale)
    q.round_()
    if grid.symmetric:
        q.clamp_(grid.qmin, grid.qmax)
    else:
        z = qp.zero_point.to(values.dtype).unsqueeze(-1)
        q.add_(z).clamp_(grid.qmin, grid.qmax).sub_(z)
    return q.mul_(scale).sub_(values)


def binned_squared_error(
    centroids: torch.Tensor, counts: torch.Tensor, grid: Grid
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """objective(lo, hi) -> sum over the bins of count * (centroid - q(centroid))^2: the squared error of
    every value the histogram holds, less a constant (each bin's spread about its centroid), in float64."""

    def objective(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        return _residual(centroids, lo, hi, grid).square_().mul_(counts).sum(dim=-1)

    return objective


# --- the estimators -----------------------------------------------------------------------------------------


@register_range_estimator("minmax", description="The tensor's own extremes: nothing is clipped.")
def minmax_range(obs: Observed, grid: Grid, percentile: float) -> tuple[torch.Tensor, torch.Tensor]:
    return obs.lo.clone(), obs.hi.clone()


@register_range_estimator(
    "mse", description="The range with the least squared quantization error (grid search)."
)
def mse_range(obs: Observed, grid: Grid, percentile: float) -> tuple[torch.Tensor, torch.Tensor]:
    if obs.histogram is not None:  # an activation: every calibration value, binned
        centroids, counts = obs.histogram
        return grid_search(
            binned_squared_error(centroids, counts, grid),
            obs.lo,
            obs.hi,
            fine=ACTIVATION_FINE_STEPS,
            chunk=_chunk(centroids, 2),
        )
    return grid_search(squared_error(obs.values, grid), obs.lo, obs.hi, chunk=_chunk(obs.values))


@register_range_estimator("percentile", description="The given percentile of each tail.")
def percentile_range(obs: Observed, grid: Grid, percentile: float) -> tuple[torch.Tensor, torch.Tensor]:
    values = obs.values
    n = values.shape[1]
    k_hi = max(1, min(n, math.ceil(percentile / 100 * n)))
    k_lo = max(1, n - k_hi + 1)
    # kthvalue, not torch.quantile: quantile refuses inputs of more than 2^24 values.
    hi = values.kthvalue(k_hi, dim=1).values
    lo = values.kthvalue(k_lo, dim=1).values
    return torch.minimum(lo, obs.hi), torch.maximum(hi, obs.lo)


def _softmax_cross_entropy(
    logits: torch.Tensor, grid: Grid
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """objective(lo, hi) -> (K, 1): the mean cross-entropy between the FP32 softmax and the quantized one."""
    target = F.softmax(logits, dim=1)

    def objective(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
        out = []
        for low, high in zip(lo.reshape(-1), hi.reshape(-1)):
            q = quant_dequant(logits, qparams_from_range(low, high, grid))
            out.append(-(target * F.log_softmax(q, dim=1)).sum(dim=1).mean())
        return torch.stack(out).reshape(lo.shape)

    return objective


@register_range_estimator(
    "cross_entropy",
    tensors=("activation",),
    applies=lambda obs: obs.logits is not None,
    description="For logits: the range whose quantized softmax best matches the FP32 softmax.",
)
def cross_entropy_range(obs: Observed, grid: Grid, percentile: float) -> tuple[torch.Tensor, torch.Tensor]:
    logits = obs.logits
    lo, hi = logits.min().reshape(1), logits.max().reshape(1)
    return grid_search(_softmax_cross_entropy(logits, grid), lo, hi)


@register_range_estimator(
    "bn",
    tensors=("activation",),
    applies=lambda obs: obs.bn is not None,
    description="From the BatchNorm before the tensor: beta +- 6 gamma, clipped at 0 by a ReLU.",
)
def bn_range(obs: Observed, grid: Grid, percentile: float) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = obs.bn
    lo, hi = (mean - BN_SIGMAS * std.abs()).min(), (mean + BN_SIGMAS * std.abs()).max()
    if obs.relu:
        lo, hi = lo.clamp(min=0), hi.clamp(min=0)
    return lo.reshape(1).float(), hi.reshape(1).float()
