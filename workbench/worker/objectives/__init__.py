"""Per-task objectives: build_objective gives the loss, mergeable batch statistics, metrics, output
check and test evaluator of classification, regression, multilabel, segmentation or custom (the user's own
loss and metrics functions); detect picks the task.
"""

from __future__ import annotations

from workbench.errors import JobError
from workbench.worker.objectives import classification, multilabel, regression, segmentation
from workbench.worker.objectives.base import Objective, TestEvaluator
from workbench.worker.objectives.classification import ClassificationObjective
from workbench.worker.objectives.custom import CustomObjective
from workbench.worker.objectives.detect import check_target, describe_target, detect_task, target_num_outputs
from workbench.worker.objectives.multilabel import MultilabelObjective
from workbench.worker.objectives.regression import RegressionObjective
from workbench.worker.objectives.segmentation import IGNORE_INDEX, SegmentationObjective

__all__ = [
    "IGNORE_INDEX",
    "LOSSES",
    "Objective",
    "TestEvaluator",
    "build_objective",
    "check_target",
    "describe_target",
    "detect_task",
    "target_num_outputs",
]

_KINDS = {
    "classification": (ClassificationObjective, classification.LOSSES),
    "regression": (RegressionObjective, regression.LOSSES),
    "multilabel": (MultilabelObjective, multilabel.LOSSES),
    "segmentation": (SegmentationObjective, segmentation.LOSSES),
}
LOSSES: dict[str, tuple[str, ...]] = {task: losses for task, (_, losses) in _KINDS.items()}


def build_objective(
    task: str,
    *,
    loss: str = "auto",
    label_smoothing: float = 0.0,
    num_outputs: int = 0,
    metrics: str = "",
    monitor: str = "",
    monitor_mode: str = "auto",
) -> Objective:
    """The objective of a concrete task. num_outputs: classes (classification, segmentation: required there),
    labels (multilabel: required), target values (regression; 0 = unknown). metrics, monitor and monitor_mode
    are task=custom's (with loss=file:<path.py>:<fn>)."""
    if task == "custom":
        if not loss.startswith("file:"):
            raise JobError(
                f"loss: task=custom needs loss=file:<path.py>:<fn> (your fn(outputs, target) -> scalar "
                f"tensor), not {loss!r}"
            )
        return CustomObjective(
            loss_name=loss,
            num_outputs=num_outputs,
            metrics=metrics,
            monitor=monitor,
            monitor_mode=monitor_mode,
        )
    if task == "detection":  # the detector's own losses: only the monitor and its direction live here
        from workbench.worker.objectives.detection import DetectionObjective

        return DetectionObjective(num_outputs=num_outputs)
    if task == "auto":
        raise JobError("task=auto must be decided from a sample (detect_task) before the objective is built")
    if task not in _KINDS:
        raise JobError(f"unknown task={task!r}: choose one of {', '.join(_KINDS)}, auto or custom")
    cls, allowed = _KINDS[task]
    if loss not in allowed:
        raise JobError(f"loss={loss} does not fit task={task}: its losses are {', '.join(allowed)}")
    if task in ("multilabel", "segmentation") and num_outputs <= 0:
        # Their statistics are sized by it (L*(2*BINS+3), C*C): the caller must know it before training
        # starts.
        raise ValueError(
            f"build_objective({task!r}) needs num_outputs > 0 (the number of "
            f"{'labels' if task == 'multilabel' else 'classes'}), got {num_outputs}"
        )
    return cls(loss_name=loss, num_outputs=num_outputs, label_smoothing=label_smoothing)
