"""`train.classifier`: train an image classifier from a TrainSpec (the engine is workbench.worker.training).

torch loads inside the task, not at import, so listing the worker's tasks stays cheap. Never imports Qt.
"""

from __future__ import annotations

from workbench.specs import TrainSpec
from workbench.worker.registry import register_task


@register_task("train.classifier", kind="job", spec=TrainSpec)
def train_classifier(spec: TrainSpec, ctx):
    """Train a classifier: live metrics, checkpoints, resume, test evaluation."""
    from workbench.worker.training import run_training

    return run_training(spec, ctx)
