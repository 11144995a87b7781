"""`train.model` (once `train.classifier`, an id it still answers to): train a model for any learning task
from a TrainSpec (the engine is workbench.worker.training);
`lr.find`: the learning-rate range test of an LrFindSpec, in a run folder of its own (a task that is not
train.*, so no list offers it to resume, quantize or export).

torch loads inside the task, not at import, so listing the worker's tasks stays cheap. Never imports Qt.
"""

from __future__ import annotations

from workbench.errors import JobError
from workbench.specs import LrFindSpec, TrainSpec
from workbench.task_ids import TRAIN_TASK
from workbench.worker.registry import register_task


@register_task(TRAIN_TASK, kind="job", spec=TrainSpec)
def train_model(spec: TrainSpec, ctx):
    """Train a model (classification, segmentation, regression, ...): live metrics, checkpoints, resume, test
    evaluation."""
    from workbench.worker.job_threads import sized_threads
    from workbench.worker.models.registry import LIGHTNING, model_trainer
    from workbench.worker.training import run_training

    if ctx.run is None:
        raise JobError("training needs a run folder to keep its checkpoints: run it with a workspace")
    # beside another job, one thread per free core rather than waiting on busy ones
    with sized_threads(ctx.log):
        if model_trainer(spec.model.name) == LIGHTNING:  # a LightningModule: trained by Lightning's Trainer
            from workbench.worker.lightning.route import run_lightning_training
            from workbench.worker.training import tensorboard

            with tensorboard.live(spec, ctx) as board:  # tensorboard = true: Lightning's metrics go there too
                return run_lightning_training(spec, ctx, board=board)
        return run_training(spec, ctx)


# A run like every job's (spec, log, report with the curve and the suggestion: docs/architecture.md, runs),
# but not a training run: the sweep's weights are thrown away, and the lists that offer a run to resume,
# quantize or export take train.* runs only. Its result is also the reply (and `workbench lr-find --json`).
@register_task("lr.find", kind="job", spec=LrFindSpec)
def train_lr_find(spec: LrFindSpec, ctx):
    """Learning-rate range test: the loss over an exponential sweep of the rate, and the suggested rate."""
    from workbench.worker.training.lr_find import run_lr_find

    return run_lr_find(spec, ctx)
