"""Multilabel: targets of 0/1 per label, shape (N, L), any dtype; scores are logits (N, L). BCE-with-logits
loss and mean average precision as the monitor (binned, mergeable during training; exact in the test
evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from workbench.worker.objectives.base import Objective, TestEvaluator, as_floats, count_bins, json_safe, ratio

LOSSES = ("auto", "bce")
BINS = 64
WORST_COUNT = 32
THRESHOLD = 0.5


def _f1(tp: float, fp: float, fn: float) -> float:
    return ratio(2 * tp, 2 * tp + fp + fn)


def _nanmean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def binned_ap(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """Average precision from per-bin counts of positives and negatives (bin 0 = lowest score).

    A close approximation of the exact AP: the samples within one bin count as tied (one threshold per bin,
    the way tied scores count in the exact AP), so only the order inside a bin is lost. NaN with no positives.
    """
    total = float(sum(positives))
    if total <= 0:
        return math.nan
    ap, tp, fp = 0.0, 0.0, 0.0
    for p, n in zip(reversed(list(positives)), reversed(list(negatives))):
        tp += p
        fp += n
        if p:
            ap += (p / total) * (tp / (tp + fp))
    return ap


def average_precision(scores: torch.Tensor, truth: torch.Tensor) -> float:
    """Exact average precision of one label: Σ (R_i - R_{i-1}) P_i over the distinct score thresholds, high to
    low (what sklearn.metrics.average_precision_score computes). NaN when the label has no positives."""
    scores = scores.double().reshape(-1)
    truth = (truth.reshape(-1) > 0.5).double()
    total = float(truth.sum())
    if total <= 0:
        return math.nan
    order = scores.argsort(descending=True, stable=True)
    s, t = scores[order], truth[order]
    tp = t.cumsum(0)
    fp = (1 - t).cumsum(0)
    # Tied scores form one threshold: keep the last position of each run of equal scores.
    last = torch.ones_like(s, dtype=torch.bool)
    last[:-1] = s[1:] != s[:-1]
    tp, fp = tp[last], fp[last]
    precision = tp / (tp + fp)
    recall = tp / total
    gained = torch.diff(recall, prepend=torch.zeros(1, dtype=torch.float64))
    return float((gained * precision).sum())


class MultilabelObjective(Objective):
    task = "multilabel"
    monitor = "map"
    monitor_label = "mean AP"
    higher_is_better = True

    def __init__(self, *, loss_name: str = "auto", num_outputs: int = 0, label_smoothing: float = 0.0):
        super().__init__(loss_name="bce", num_outputs=num_outputs, label_smoothing=label_smoothing)

    @property
    def width(self) -> int:
        """Stats per label: BINS positive counts, BINS negative counts, tp, fp, fn."""
        return 2 * BINS + 3

    def stat_count(self) -> int:
        return self.num_outputs * self.width

    def loss(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(scores.float(), target.float())

    def batch_stats(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        n, labels = scores.shape[0], scores.shape[1]
        prob = torch.sigmoid(scores.float())
        truth = target.reshape(n, labels) > 0.5
        # long() before clamping: a NaN score becomes some integer, which the clamp then keeps in range.
        bin_ = (prob * BINS).long().clamp_(0, BINS - 1)
        label = torch.arange(labels, device=scores.device).expand(n, labels)
        cell = label * (2 * BINS) + torch.where(truth, 0, BINS) + bin_
        hist = count_bins(cell, labels * 2 * BINS).view(labels, 2 * BINS)
        pred = prob >= THRESHOLD
        tp = (pred & truth).sum(dim=0)
        fp = (pred & ~truth).sum(dim=0)
        fn = (~pred & truth).sum(dim=0)
        return torch.cat([hist, torch.stack([tp, fp, fn], dim=1)], dim=1).reshape(-1).double()

    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        values = as_floats(stats)
        w = self.width
        aps, f1s, tps, fps, fns = [], [], 0.0, 0.0, 0.0
        for start in range(0, len(values) - w + 1, w):
            row = values[start : start + w]
            aps.append(binned_ap(row[:BINS], row[BINS : 2 * BINS]))
            tp, fp, fn = row[2 * BINS :]
            f1s.append(_f1(tp, fp, fn))
            tps, fps, fns = tps + tp, fps + fp, fns + fn
        return {"map": _nanmean(aps), "f1": _nanmean(f1s), "f1_micro": _f1(tps, fps, fns)}

    def check_output(self, scores: torch.Tensor, target: torch.Tensor, where: str = "training") -> None:
        if target.dim() != 2:
            self.fail(
                where,
                scores,
                target,
                "the targets must be one 0/1 vector per sample, (batch, labels)",
                "return a vector of 0/1 per sample from the dataset, one entry per label",
            )
        labels = int(target.shape[1])
        if scores.dim() != 2 or int(scores.shape[0]) != int(target.shape[0]):
            self.fail(
                where,
                scores,
                target,
                f"the model must give scores of shape (batch, {labels})",
                "make forward() keep the batch dimension first for every batch size",
            )
        if int(scores.shape[1]) != labels:
            self.fail(
                where,
                scores,
                target,
                f"the model gives {int(scores.shape[1])} outputs per sample but the "
                f"targets have {labels} labels",
                f"set model.num_classes={labels}",
            )
        if self.num_outputs and labels != self.num_outputs:
            self.fail(
                where,
                scores,
                target,
                f"the targets have {labels} labels but the objective was built for {self.num_outputs}",
                "make every sample's target vector the same length",
            )

    def test_evaluator(self, split_name: str, classes: list[str]) -> MultilabelEvaluator:
        return MultilabelEvaluator(self, split_name, classes)


class MultilabelEvaluator(TestEvaluator):
    """Exact per-label AP from every score, per-label F1 at 0.5, and the WORST_COUNT samples with the most
    label errors (ties: the larger summed BCE), each with its error count and every label's probability."""

    def __init__(self, objective: Objective, split_name: str, classes: list[str]):
        super().__init__(objective, split_name, classes)
        self.index_parts: list[torch.Tensor] = []
        self.score_parts: list[torch.Tensor] = []
        self.target_parts: list[torch.Tensor] = []

    def add(self, indices: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> None:
        self.index_parts.append(indices)
        self.score_parts.append(scores.detach().float())
        self.target_parts.append((target.reshape(scores.shape) > 0.5).to(torch.uint8))

    def label_name(self, i: int) -> str:
        return self.classes[i] if i < len(self.classes) else str(i)

    def result(self) -> dict:
        labels = self.objective.num_outputs
        if self.score_parts:
            scores = torch.cat(self.score_parts).cpu()
            truth = torch.cat(self.target_parts).cpu().bool()
            index = torch.cat(self.index_parts).long().cpu()
            labels = int(scores.shape[1])
        else:
            scores = torch.zeros(0, labels)
            truth = torch.zeros(0, labels, dtype=torch.bool)
            index = torch.zeros(0, dtype=torch.int64)
        pred = torch.sigmoid(scores) >= THRESHOLD
        tp = (pred & truth).sum(dim=0).tolist()
        fp = (pred & ~truth).sum(dim=0).tolist()
        fn = (~pred & truth).sum(dim=0).tolist()
        per_label = []
        for i in range(labels):
            per_label.append(
                {
                    "label": self.label_name(i),
                    "ap": average_precision(scores[:, i], truth[:, i]),
                    "f1": _f1(tp[i], fp[i], fn[i]),
                    "positives": int(tp[i] + fn[i]),
                }
            )
        metrics = {
            "map": _nanmean([r["ap"] for r in per_label]),
            "f1": _nanmean([r["f1"] for r in per_label]),
            "f1_micro": _f1(sum(tp), sum(fp), sum(fn)),
        }
        errors = (pred != truth).sum(dim=1)
        probabilities = torch.sigmoid(scores.double())
        bce = F.binary_cross_entropy_with_logits(scores.double(), truth.double(), reduction="none").sum(dim=1)
        # Most errors first, the larger summed BCE among equals: two stable sorts, the minor key first.
        order = torch.nan_to_num(bce, nan=math.inf).argsort(descending=True, stable=True)
        order = order[errors[order].argsort(descending=True, stable=True)]
        worst = []
        for i in order[:WORST_COUNT].tolist():
            if int(errors[i]) == 0:
                break  # a sample with every label right is not among the worst
            worst.append(
                {
                    "split": self.split_name,
                    "index": int(index[i]),
                    "target": [self.label_name(j) for j in truth[i].nonzero().flatten().tolist()],
                    "predicted": [self.label_name(j) for j in pred[i].nonzero().flatten().tolist()],
                    "loss": float(bce[i]),
                    "errors": int(errors[i]),
                    "probabilities": [round(float(v), 4) for v in probabilities[i].tolist()],
                }
            )
        out = self.common(metrics)
        out.update(
            {"labels": [self.label_name(i) for i in range(labels)], "per_label": per_label, "worst": worst}
        )
        return json_safe(out)
