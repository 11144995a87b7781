"""The Objective interface: what one task (classification, regression, ...) means for the loss, the per-batch
statistics the engine sums over batches and ranks, the metrics made from those sums, and the test evaluation.

Pure torch; worker side, never imports Qt.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from workbench.errors import JobError


def shape_text(shape: Sequence[int]) -> str:
    """(4, 10), (4,), () as python writes tuples, without torch.Size."""
    return str(tuple(int(d) for d in shape))


def dtype_text(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def json_safe(value):
    """`value` with every NaN/inf float replaced by None (JSON has neither), lists and dicts walked."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def as_floats(stats) -> list[float]:
    """Stats as python floats, whether they come as a tensor (one read-back) or a sequence."""
    if isinstance(stats, torch.Tensor):
        return [float(v) for v in stats.detach().cpu().double().tolist()]
    return [float(v) for v in stats]


def ratio(num: float, den: float) -> float:
    return num / den if den else math.nan


def count_bins(index: torch.Tensor, size: int) -> torch.Tensor:
    """How often each value in [0, size) occurs in `index` (int64, flattened), as int64 on index's device.

    torch.bincount would do, but on CUDA it reads the index's min and max back to the host (a sync per call);
    index_add_ into a preallocated vector does not, and it is deterministic on CUDA. Callers route values they
    must not count to an extra last bin and slice it off, so every index is in range.
    """
    index = index.reshape(-1)
    counts = torch.zeros(size, dtype=torch.int64, device=index.device)
    return counts.index_add_(0, index, torch.ones_like(index))


class TestEvaluator(ABC):
    """Collects a split's predictions batch by batch and makes the evaluation.json content at the end."""

    __test__ = False  # not a pytest test class, whatever a test module imports

    def __init__(self, objective: Objective, split_name: str, classes: list[str]):
        self.objective = objective
        self.split_name = split_name
        self.classes = list(classes)

    @abstractmethod
    def add(self, indices: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> None:
        """indices: host int64, each sample's index within the split; scores and target on the device."""

    def add_inputs(self, inputs) -> None:
        """The batch's model inputs, given just before add(): an evaluator that shows inputs (segmentation's
        image thumbnails) keeps the few it needs; the others ignore them."""
        del inputs  # most evaluators draw nothing from the inputs

    @abstractmethod
    def result(self) -> dict:
        """The evaluation.json content: JSON-safe (None for NaN), with task, split, monitor and metrics."""

    def common(self, metrics: dict[str, float]) -> dict:
        o = self.objective
        return {
            "task": o.task,
            "split": self.split_name,
            "monitor": {
                "name": o.monitor,
                "label": o.monitor_label,
                "higher_is_better": o.higher_is_better,
                "value": metrics.get(o.monitor, math.nan),
            },
            "metrics": dict(metrics),
        }


class Objective(ABC):
    """One task's loss, mergeable batch statistics, metrics, output check and test evaluator."""

    task: str
    monitor: str
    monitor_label: str
    higher_is_better: bool
    loss_name: str

    def __init__(self, *, loss_name: str, num_outputs: int = 0, label_smoothing: float = 0.0):
        self.loss_name = loss_name
        self.num_outputs = int(num_outputs)
        self.label_smoothing = float(label_smoothing)

    @abstractmethod
    def stat_count(self) -> int:
        """Length of the batch_stats vector."""

    @abstractmethod
    def loss(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The batch mean as a float32 scalar, computed in float32 whatever the scores' dtype."""

    @abstractmethod
    def batch_stats(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Float64 sums over the batch, shape (stat_count(),), on scores.device; never syncs with the host."""

    @abstractmethod
    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        """Metric name -> value (NaN where undefined) from stats summed over batches and ranks."""

    @abstractmethod
    def check_output(self, scores: torch.Tensor, target: torch.Tensor, where: str = "training") -> None:
        """Raise JobError when the model's output cannot fit the target (shapes and dtypes only: no sync)."""

    @abstractmethod
    def test_evaluator(self, split_name: str, classes: list[str]) -> TestEvaluator: ...

    def arrow(self) -> str:
        return "↑" if self.higher_is_better else "↓"

    def monitor_text(self, prefix: str = "val") -> str:
        return f"{prefix} {self.monitor_label} {self.arrow()}".strip()

    def loss_text(self) -> str:
        return f"{self.loss_name} loss"

    def describe(self) -> str:
        return f"{self.task}: {self.loss_text()}, monitor {self.monitor_text()}"

    def fail(self, where: str, scores: torch.Tensor, target: torch.Tensor, problem: str, fix: str) -> None:
        """Raise the one-line JobError every output check gives: task, shapes, dtype, what to change."""
        raise JobError(
            f"{self.task}: {problem} (the model's output for a {where} batch has shape "
            f"{shape_text(scores.shape)}, the targets have shape {shape_text(target.shape)} and dtype "
            f"{dtype_text(target.dtype)}): {fix}"
        )
