"""Classification: one class index per sample, scores (N, C). Loss from objectives/losses.build_loss, accuracy
as the monitor, and the test evaluation (confusion matrix, per-class accuracy, most confidently wrong
samples).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from workbench.worker.objectives.base import Objective, TestEvaluator, as_floats, count_bins, json_safe, ratio

WORST_COUNT = 32
LOSSES = ("auto", "cross_entropy", "nll", "mse")


class ClassificationObjective(Objective):
    task = "classification"
    monitor = "acc"
    monitor_label = "accuracy"
    higher_is_better = True

    def __init__(self, *, loss_name: str = "auto", num_outputs: int = 0, label_smoothing: float = 0.0):
        resolved = "cross_entropy" if loss_name == "auto" else loss_name
        super().__init__(loss_name=resolved, num_outputs=num_outputs, label_smoothing=label_smoothing)
        # The very function today's engine uses, so loss values stay bit-identical. Imported here, not at the
        # top: the training package imports this one, and importing it back at import time would be circular.
        from workbench.worker.objectives.losses import build_loss

        self._loss = build_loss(resolved, label_smoothing=label_smoothing, num_classes=num_outputs)

    def stat_count(self) -> int:
        return 1

    def loss(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self._loss(scores, target)

    def batch_stats(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (scores.argmax(dim=1) == target).sum().to(torch.float64).reshape(1)

    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        return {"acc": ratio(as_floats(stats)[0], float(samples))}

    def check_output(self, scores: torch.Tensor, target: torch.Tensor, where: str = "training") -> None:
        if (
            target.dim() != 1
            or target.dtype.is_floating_point
            or target.dtype.is_complex
            or target.dtype == torch.bool
        ):
            self.fail(
                where,
                scores,
                target,
                "the targets are not one integer class index per sample",
                "return an int64 class index per sample from the dataset, or set task= to the task the "
                "targets are for (task=auto decides from a sample)",
            )
        batch = int(target.shape[0])
        if scores.dim() != 2 or int(scores.shape[0]) != batch:
            self.fail(
                where,
                scores,
                target,
                f"the model must give class scores of shape (batch, classes) for a batch of {batch} samples",
                "make forward() keep the batch dimension first for every batch "
                "size and return one score per class",
            )
        if self.num_outputs and int(scores.shape[1]) != self.num_outputs:
            self.fail(
                where,
                scores,
                target,
                f"the model gives {int(scores.shape[1])} scores per sample but the "
                f"dataset has {self.num_outputs} classes",
                f"set model.num_classes={self.num_outputs}",
            )

    def loss_text(self) -> str:
        if self.loss_name == "cross_entropy" and self.label_smoothing:
            return f"cross_entropy loss (label smoothing {self.label_smoothing:g})"
        return super().loss_text()

    def test_evaluator(self, split_name: str, classes: list[str]) -> ClassificationEvaluator:
        return ClassificationEvaluator(self, split_name, classes)


class ClassificationEvaluator(TestEvaluator):
    """The logic of training/evaluate.evaluate_test, batch by batch: the same keys and values (test_accuracy
    is None rather than NaN for an empty split), plus task, split, monitor and metrics (acc, and top5 from 5
    classes)."""

    def __init__(self, objective: Objective, split_name: str, classes: list[str]):
        super().__init__(objective, split_name, classes)
        self.k = len(self.classes)
        self.confusion: torch.Tensor | None = None
        self.top5: torch.Tensor | None = None
        self.index_parts: list[torch.Tensor] = []
        self.row_parts: list[torch.Tensor] = []

    def add(self, indices: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> None:
        k = self.k
        scores = scores.float()
        if self.confusion is None:
            self.confusion = torch.zeros(k * k, dtype=torch.int64, device=scores.device)
            self.top5 = torch.zeros((), dtype=torch.int64, device=scores.device)
        probs = torch.softmax(scores, dim=1)
        confidence, predicted = probs.max(dim=1)
        # As evaluate_test's bincount, without its host read-back; a label outside [0, k) goes to a dropped
        # bin.
        cell = target * k + predicted.clamp(max=k - 1)
        cell = torch.where((target >= 0) & (target < k), cell, torch.full_like(cell, k * k))
        self.confusion += count_bins(cell, k * k + 1)[: k * k]
        if k >= 5 and scores.shape[1] >= 5:
            self.top5 += (scores.topk(5, dim=1).indices == target[:, None]).any(dim=1).sum()
        # Every sample's row stays on the device and is filtered on the host at the end: a boolean-mask index
        # here would wait on the device every batch.
        self.index_parts.append(indices)
        self.row_parts.append(torch.stack([target.double(), predicted.double(), confidence.double()], dim=1))

    def result(self) -> dict:
        k = self.k
        if self.confusion is None:
            matrix = torch.zeros(k, k, dtype=torch.int64)
            top5 = 0
        else:
            matrix = self.confusion.view(k, k).cpu()
            top5 = int(self.top5)
        total = int(matrix.sum())
        correct = int(matrix.diagonal().sum())
        per_class = [
            float(matrix[i, i]) / float(matrix[i].sum()) if int(matrix[i].sum()) else None for i in range(k)
        ]
        worst = []
        if self.row_parts:
            # The same operations as evaluate_test (argsort included), so ties come out in the same order.
            rows = torch.cat(
                [torch.cat(self.index_parts).double()[:, None], torch.cat(self.row_parts).cpu()], dim=1
            )
            rows = rows[rows[:, 1] != rows[:, 2]]
            rows = rows[rows[:, 3].argsort(descending=True)][:WORST_COUNT]
            worst = [
                {
                    "split": self.split_name,
                    "index": int(r[0]),
                    "label": int(r[1]),
                    "predicted": int(r[2]),
                    "confidence": round(float(r[3]), 6),
                }
                for r in rows
            ]
        accuracy = correct / total if total else math.nan
        metrics = {"acc": accuracy}
        if k >= 5:
            metrics["top5"] = top5 / total if total else math.nan
        out = self.common(metrics)
        out.update(
            {
                "classes": list(self.classes),
                "confusion_matrix": matrix.tolist(),
                "per_class_accuracy": per_class,
                "test_accuracy": accuracy,
                "worst": worst,
            }
        )
        return json_safe(out)
