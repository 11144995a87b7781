"""`train.classifier`: train an image classifier from a TrainSpec (the engine is workbench.worker.training);
`train.lr_find`: the learning-rate range test of an LrFindSpec, which leaves no run folder behind.

torch loads inside the task, not at import, so listing the worker's tasks stays cheap. Never imports Qt.
"""

from __future__ import annotations

from workbench.specs import LrFindSpec, TrainSpec
from workbench.worker.registry import register_task


@register_task("train.classifier", kind="job", spec=TrainSpec)
def train_classifier(spec: TrainSpec, ctx):
    """Train a classifier: live metrics, checkpoints, resume, test evaluation."""
    from workbench.worker.job_threads import sized_threads
    from workbench.worker.training import run_training

    with sized_threads(ctx.log):  # beside another job, one thread per free core rather than waiting on busy ones
        return run_training(spec, ctx)


# No run folder: the sweep's weights are thrown away, and a run of kind "train" without checkpoints would be offered
# to quantize, export and train again. Its result is the reply (and `workbench lr-find --json`).
@register_task("train.lr_find", kind="job", spec=LrFindSpec, creates_run=False)
def train_lr_find(spec: LrFindSpec, ctx):
    """Learning-rate range test: the loss over an exponential sweep of the rate, and the suggested rate."""
    from workbench.worker.training.lr_find import run_lr_find

    return run_lr_find(spec, ctx)
