"""Which objective a training run optimises: the task the spec names (resolved from the data before training),
its loss and metrics; and how a metric reads in the log. Worker side; never imports Qt.
"""

from __future__ import annotations

import math

from workbench.specs import TrainSpec
from workbench.worker.objectives import build_objective
from workbench.worker.objectives.detect import detect_task

PERCENT_METRICS = ("acc", "pixel_acc", "top5")  # fractions people read as percentages


def objective_for(spec: TrainSpec, dataset):
    """The Objective of `spec.task`. "auto" left unresolved is read off a user dataset's first sample (a
    LightningModule's run keeps auto: its own loss decides while it trains), and is classification for the
    built-in sets (and a Trainer built directly). The output count is model.num_classes, else the dataset's
    classes."""
    task = measured_task(spec, dataset)
    outputs = spec.model.num_classes
    if not outputs and task in ("classification", "segmentation"):
        outputs = len(getattr(dataset, "classes", []) or [])
    return build_objective(
        task,
        loss=spec.loss,
        label_smoothing=spec.label_smoothing,
        num_outputs=outputs,
        metrics=spec.metrics,
        monitor=spec.monitor,
        monitor_mode=spec.monitor_mode,
    )


def measured_task(spec: TrainSpec, dataset) -> str:
    """The task a later job measures a run by: the spec's, or for task=auto what a user dataset's first sample
    says (the same rule training applies), else classification."""
    if spec.task != "auto":
        return spec.task
    if dataset is not None and is_user_data(dataset):
        return detect_task(*dataset.first_sample()[:2])[0]
    return "classification"


def format_metric(name: str, value) -> str:
    """93.12% for accuracies, 0.1234 for the rest, nan where a value is missing."""
    if value is None or not math.isfinite(value):
        return "nan"
    return f"{value:.2%}" if name in PERCENT_METRICS else f"{value:.4f}"


def is_user_data(dataset) -> bool:
    """A user's own Dataset (file:...), loaded by torch's DataLoader, rather than a built-in image set."""
    return hasattr(dataset, "first_sample")


def first_input(dataset):
    """A user dataset's first input (the model's trial forward pass takes it as it is, tuple or dict); None
    for the built-in image sets, whose sample shape says everything."""
    return dataset.first_sample()[0] if is_user_data(dataset) else None
