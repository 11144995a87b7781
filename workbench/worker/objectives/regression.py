"""Regression: float targets of shape (N,) or (N, k) (or any per-sample shape), scores of the same shape;
scores (N, 1) against targets (N,) are flattened to match. Losses mse (auto), l1, smooth_l1; MAE is the
monitor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from workbench.worker.objectives.base import Objective, TestEvaluator, as_floats, json_safe, ratio

LOSSES = ("auto", "mse", "l1", "smooth_l1")
WORST_COUNT = 32
SCATTER_COUNT = 2000
# r2 comes from merged sums (SST = Σy² - (Σy)²/n), which cancels badly when the targets hardly vary: an SST
# below this share of Σy² is rounding, not variance, and r2 is left undefined rather than a huge negative
# number.
SST_RELATIVE_FLOOR = 1e-10

_LOSS_FNS = {"mse": F.mse_loss, "l1": F.l1_loss, "smooth_l1": F.smooth_l1_loss}


def align(scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Scores reshaped to the target's shape when they differ only by size-1 dimensions ((N, 1) vs (N,), or
    (N, 1, H, W) vs (N, H, W)); otherwise unchanged (check_output has already refused a real mismatch)."""
    if (
        scores.shape != target.shape
        and scores.numel() == target.numel()
        and scores.dim()
        and target.dim()
        and scores.shape[0] == target.shape[0]
        and [d for d in scores.shape if d != 1] == [d for d in target.shape if d != 1]
    ):
        return scores.reshape(target.shape)
    return scores


class RegressionObjective(Objective):
    task = "regression"
    monitor = "mae"
    monitor_label = "MAE"
    higher_is_better = False

    def __init__(self, *, loss_name: str = "auto", num_outputs: int = 0, label_smoothing: float = 0.0):
        super().__init__(
            loss_name="mse" if loss_name == "auto" else loss_name,
            num_outputs=num_outputs,
            label_smoothing=label_smoothing,
        )
        self._fn = _LOSS_FNS[self.loss_name]

    def stat_count(self) -> int:
        return 5

    def loss(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._fn(align(scores, target).float(), target.float())

    def batch_stats(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # float64 so sums over a whole split (and SST from them) keep their precision.
        y = target.double()
        error = align(scores, target).double() - y
        count = torch.full((), float(y.numel()), dtype=torch.float64, device=scores.device)
        return torch.stack([error.abs().sum(), error.square().sum(), y.sum(), y.square().sum(), count])

    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        return regression_metrics(*as_floats(stats)[:5])

    def check_output(self, scores: torch.Tensor, target: torch.Tensor, where: str = "training") -> None:
        if target.dtype == torch.bool or target.dtype.is_complex:
            self.fail(
                where, scores, target, "the targets are not numbers", "return float targets from the dataset"
            )
        if align(scores, target).shape == target.shape:
            return
        batch = int(target.shape[0]) if target.dim() else 1
        per_target = target.numel() // max(batch, 1)
        if scores.dim() == 0 or int(scores.shape[0]) != batch:
            self.fail(
                where,
                scores,
                target,
                f"the model's output does not keep the batch of {batch} samples first",
                f"make forward() return (batch, {per_target}) for every batch size",
            )
        per_score = scores.numel() // max(batch, 1)
        if per_score != per_target:
            self.fail(
                where,
                scores,
                target,
                f"the model gives {per_score} outputs per sample but the targets have {per_target} values",
                f"set model.num_classes={per_target}",
            )
        self.fail(
            where,
            scores,
            target,
            "the model's output per sample has another shape than the targets",
            f"make forward() return shape {tuple(target.shape)} for this batch",
        )

    def test_evaluator(self, split_name: str, classes: list[str]) -> RegressionEvaluator:
        return RegressionEvaluator(self, split_name, classes)


def regression_metrics(abs_sum: float, sq_sum: float, y_sum: float, y_sq_sum: float, count: float) -> dict:
    mse = ratio(sq_sum, count)
    sst = y_sq_sum - y_sum * y_sum / count if count else math.nan
    if not count or sst <= SST_RELATIVE_FLOOR * y_sq_sum or sst <= 0:
        r2 = math.nan
    else:
        r2 = 1.0 - sq_sum / sst
    return {
        "mae": ratio(abs_sum, count),
        "rmse": math.sqrt(mse) if mse >= 0 else math.nan,
        "mse": mse,
        "r2": r2,
    }


def _value(row: list[float]) -> float | list[float]:
    return row[0] if len(row) == 1 else row


class RegressionEvaluator(TestEvaluator):
    """Metrics from the same sums as training, a scatter of up to SCATTER_COUNT [true, predicted] pairs (first
    output only; "scatter_index" gives each pair's index in the split, "outputs" how many values a sample
    has), and the WORST_COUNT samples with the largest absolute residual (mean over a sample's values)."""

    def __init__(self, objective: Objective, split_name: str, classes: list[str]):
        super().__init__(objective, split_name, classes)
        self.stats: torch.Tensor | None = None
        self.index_parts: list[torch.Tensor] = []
        self.pred_parts: list[torch.Tensor] = []
        self.target_parts: list[torch.Tensor] = []
        self.per_sample_shape: tuple[int, ...] = ()

    def add(self, indices: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> None:
        stats = self.objective.batch_stats(scores, target)
        self.stats = stats if self.stats is None else self.stats + stats
        batch = int(target.shape[0])
        self.per_sample_shape = tuple(target.shape[1:])
        self.index_parts.append(indices)
        self.pred_parts.append(align(scores, target).detach().float().reshape(batch, -1))
        self.target_parts.append(target.detach().float().reshape(batch, -1))

    def result(self) -> dict:
        metrics = regression_metrics(*(as_floats(self.stats) if self.stats is not None else [0.0] * 5))
        out = self.common(metrics)
        scatter, scatter_index, worst = [], [], []
        if self.index_parts:
            index = torch.cat(self.index_parts).long().cpu()
            pred = torch.cat(self.pred_parts).cpu().double()
            true = torch.cat(self.target_parts).cpu().double()
            n = int(index.shape[0])
            pick = (
                torch.arange(n)
                if n <= SCATTER_COUNT
                else torch.linspace(0, n - 1, SCATTER_COUNT, dtype=torch.float64).round().long()
            )
            scatter = [[float(t), float(p)] for t, p in zip(true[pick, 0].tolist(), pred[pick, 0].tolist())]
            scatter_index = [int(i) for i in index[pick].tolist()]
            # NaN predictions rank as the worst of all (nan_to_num: inf), not silently as the best.
            badness = torch.nan_to_num((pred - true).abs().mean(dim=1), nan=math.inf)
            order = badness.argsort(descending=True, stable=True)[:WORST_COUNT]
            for i in order.tolist():
                t, p = true[i].tolist(), pred[i].tolist()
                worst.append(
                    {
                        "split": self.split_name,
                        "index": int(index[i]),
                        "target": _value(t),
                        "predicted": _value(p),
                        "residual": _value([b - a for a, b in zip(t, p)]),
                    }
                )
        outputs = 1
        for d in self.per_sample_shape:
            outputs *= int(d)
        out.update({"scatter": scatter, "worst": worst, "scatter_index": scatter_index, "outputs": outputs})
        return json_safe(out)
