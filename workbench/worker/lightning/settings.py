"""A TrainSpec mapped onto `lightning.Trainer` arguments: epochs, device, amp, gradient accumulation and
clipping, determinism, how often metrics are logged; and the spec fields this route cannot honour, refused or
named as ignored (the module's own training_step and configure_optimizers decide those). Worker side; never
imports Qt.
"""

from __future__ import annotations

import torch

from workbench.errors import JobError
from workbench.specs import TrainSpec

PRECISIONS = {"none": "32-true", "bf16": "bf16-mixed", "fp16": "16-mixed"}
# What the module's own code decides on this route (its configure_optimizers, its training_step's loss).
MODULE_DECIDES = (
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "no_decay_bias_norm",
    "scheduler",
    "step_size",
    "gamma",
    "loss",
    "label_smoothing",
    "channels_last",
    "profile_steps",
)


def check_spec(spec: TrainSpec) -> None:
    """Refuse what Lightning here cannot run as asked, before anything is imported or read."""
    if spec.distributed != "none":
        raise JobError(
            "distributed: a lightning: model trains in the worker's one process here; set distributed=none "
            "(multi-process Lightning runs belong to Lightning's own launcher)"
        )
    if spec.compile != "off":
        raise JobError(
            "compile: a LightningModule compiles itself (call torch.compile in its configure_model); "
            "set compile=off"
        )
    if spec.clip_grad_norm and spec.clip_grad_value:
        raise JobError(
            f"clip_grad_value: {spec.clip_grad_value:g} and clip_grad_norm {spec.clip_grad_norm:g} are both "
            "set; Lightning's Trainer clips one way, so set one of them to 0"
        )


def ignored_fields(spec: TrainSpec) -> list[str]:
    """Fields set away from their defaults that the LightningModule's own code overrides."""
    default = TrainSpec()
    return [name for name in MODULE_DECIDES if getattr(spec, name) != getattr(default, name)]


def accelerator(device: torch.device) -> tuple[str, object]:
    """(accelerator, devices) for one device: cuda:N is that GPU alone."""
    if device.type == "cuda":
        return "gpu", [device.index if device.index is not None else torch.cuda.current_device()]
    return device.type, 1


def trainer_arguments(spec: TrainSpec, device: torch.device) -> dict:
    """The Trainer's keyword arguments for `spec` on `device` (callbacks, logger, plugins and folders are the
    route's)."""
    kind, devices = accelerator(device)
    clip = spec.clip_grad_norm or spec.clip_grad_value
    return {
        "max_epochs": spec.epochs,
        "accelerator": kind,
        "devices": devices,
        "precision": PRECISIONS[spec.amp],
        "accumulate_grad_batches": spec.grad_accum_steps,
        "gradient_clip_val": clip or None,
        "gradient_clip_algorithm": "value" if spec.clip_grad_value else "norm",
        "deterministic": spec.deterministic,
        "log_every_n_steps": spec.log_every_steps,
        "enable_progress_bar": False,  # progress goes to the job's own progress events
        "enable_model_summary": False,  # the parameter counts go to the job's log instead
    }
