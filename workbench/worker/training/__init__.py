"""The training engine of the worker: `run_training(TrainSpec, ctx)` and the parts it is made of (the step
function, optimisers and schedules, losses, the epoch loop, checkpoints, evaluation, profiling, DDP).

Imports torch; never Qt. The task module imports this lazily, so listing tasks does not load torch.
"""

from workbench.worker.devices import autocast, check_amp, resolve_device
from workbench.worker.objectives.losses import build_loss
from workbench.worker.training.evaluate import evaluate_sums, evaluate_test
from workbench.worker.training.loop import Reporter, Trainer, TrainSetup
from workbench.worker.training.optim import build_optimizer, build_scheduler, param_groups
from workbench.worker.training.plan import EpochPlan, plan_epoch, shard_bounds
from workbench.worker.training.session import run_training
from workbench.worker.training.state import TrainState, load_last, save_last
from workbench.worker.training.step import TrainStep

__all__ = [
    "EpochPlan",
    "Reporter",
    "TrainSetup",
    "TrainState",
    "TrainStep",
    "Trainer",
    "autocast",
    "build_loss",
    "build_optimizer",
    "build_scheduler",
    "check_amp",
    "evaluate_sums",
    "evaluate_test",
    "load_last",
    "param_groups",
    "plan_epoch",
    "resolve_device",
    "run_training",
    "save_last",
    "shard_bounds",
]
