"""Which objective a training run optimises: the task the spec names (resolved from the data before training),
its loss and metrics; and how a metric reads in the log. Worker side; never imports Qt.
"""

from __future__ import annotations

import math

from workbench.specs import TrainSpec
from workbench.worker.objectives import build_objective

PERCENT_METRICS = ("acc", "pixel_acc", "top5")  # fractions people read as percentages


def objective_for(spec: TrainSpec, dataset):
    """The Objective of `spec.task`; "auto" left unresolved (a Trainer built directly, every built-in set) is
    classification. The output count is model.num_classes, else the dataset's classes."""
    task = "classification" if spec.task == "auto" else spec.task
    outputs = spec.model.num_classes
    if not outputs and task in ("classification", "segmentation"):
        outputs = len(getattr(dataset, "classes", []) or [])
    return build_objective(task, loss=spec.loss, label_smoothing=spec.label_smoothing, num_outputs=outputs,
                           metrics=spec.metrics, monitor=spec.monitor, monitor_mode=spec.monitor_mode)


def format_metric(name: str, value) -> str:
    """93.12% for accuracies, 0.1234 for the rest, nan where a value is missing."""
    if value is None or not math.isfinite(value):
        return "nan"
    return f"{value:.2%}" if name in PERCENT_METRICS else f"{value:.4f}"


def is_user_data(dataset) -> bool:
    """A user's own Dataset (file:...), loaded by torch's DataLoader, rather than a built-in image set."""
    return hasattr(dataset, "first_sample")


def first_input(dataset):
    """A user dataset's first input (the model's trial forward pass takes it as it is, tuple or dict); None for
    the built-in image sets, whose sample shape says everything."""
    return dataset.first_sample()[0] if is_user_data(dataset) else None
