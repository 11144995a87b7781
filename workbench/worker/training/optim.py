"""Optimisers, weight-decay groups and learning-rate schedules from a TrainSpec.

Schedules step once per optimiser step and compute the rate from the step number alone (LambdaLR, OneCycleLR),
so a resumed run whose spec gained epochs re-plans the schedule and jumps to its step. Worker side; never
imports Qt.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from workbench.specs import TrainSpec

NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)
HYPERPARAMETERS_FROM_SPEC = ("lr", "initial_lr", "max_lr", "min_lr", "weight_decay", "momentum", "betas")

# Expected here, not a mistake: fp16 skips an optimiser step when its gradients overflow, and a resumed run
# puts its schedule at the right step before any optimiser step. A filter, not catch_warnings: that is not
# thread-safe.
warnings.filterwarnings(
    "ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`"
)


def param_groups(model: nn.Module, weight_decay: float, no_decay_bias_norm: bool) -> list[dict]:
    """Trainable parameters, split so biases and normalisation weights get no weight decay when asked."""
    decay, no_decay = [], []
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))  # shared (tied) parameters belong to one group only
            exempt = no_decay_bias_norm and (name == "bias" or isinstance(module, NORM_TYPES))
            (no_decay if exempt else decay).append(param)
    if weight_decay == 0 or not no_decay_bias_norm:
        return [{"params": decay + no_decay, "weight_decay": weight_decay}]
    return [
        g
        for g in ({"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0})
        if g["params"]
    ]


FUSED = ("sgd", "adam", "adamw")  # the optimisers torch has one fused kernel for


def implementation(name: str, device: torch.device) -> dict:
    """How the update runs: fused (one kernel for every parameter) for sgd, adam and adamw, else foreach on
    CUDA.

    Fused kernels launch once per step instead of a few times per parameter (on CPU too, where they measured
    2-3x faster than the per-parameter loop), and under a GradScaler they take the inf check as a device
    tensor, so an fp16 step does not wait on the device to learn whether to skip. Same update rule; only float
    rounding order differs. RMSprop has no fused kernel: foreach where that is torch's fast path (CUDA),
    torch's default elsewhere.
    """
    if name in FUSED and device.type in ("cuda", "cpu"):
        return {"fused": True}
    if device.type == "cuda":
        return {"foreach": True}
    return {}


def _make(name: str, groups: list[dict], spec: TrainSpec, impl: dict) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(groups, lr=spec.lr, momentum=spec.momentum, **impl)
    if name == "adam":
        return torch.optim.Adam(groups, lr=spec.lr, **impl)
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=spec.lr, **impl)
    return torch.optim.RMSprop(groups, lr=spec.lr, momentum=spec.momentum, **impl)


def build_optimizer(
    model: nn.Module, spec: TrainSpec, device: torch.device | str | None = None
) -> torch.optim.Optimizer:
    """The spec's optimiser over the model's trainable parameters, on the kernels fastest for `device`
    (default:
    where the parameters are)."""
    groups = param_groups(model, spec.weight_decay, spec.no_decay_bias_norm)
    if device is None:
        first = next((p for g in groups for p in g["params"]), None)
        device = first.device if first is not None else torch.device("cpu")
    impl = implementation(spec.optimizer, torch.device(device))
    if impl:
        try:
            return _make(spec.optimizer, groups, spec, impl)
        # e.g. parameters of a dtype or device the fused kernel does not take
        except (RuntimeError, ValueError):
            # The failed optimiser wrote its defaults into the group dicts: start from fresh ones.
            groups = param_groups(model, spec.weight_decay, spec.no_decay_bias_norm)
    return _make(spec.optimizer, groups, spec, {})


def build_scheduler(
    optimizer: torch.optim.Optimizer, spec: TrainSpec, steps_per_epoch: int, total_steps: int
):
    """The schedule stepped after every optimiser step; None for a constant rate."""
    if spec.scheduler == "none":
        return None
    total = max(1, total_steps)
    if spec.scheduler == "step":
        every = max(1, spec.step_size * steps_per_epoch)
        gamma = spec.gamma
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: gamma ** (step // every))
    if spec.scheduler == "cosine":
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: 0.5 * (1 + math.cos(math.pi * min(step, total) / total))
        )
    # Cycling momentum would quietly give momentum to an SGD/RMSprop run that asked for none.
    cycle = spec.optimizer in ("adam", "adamw") or spec.momentum > 0
    return torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=spec.lr, total_steps=total, cycle_momentum=cycle
    )


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Take the moments from a checkpoint but keep the spec's hyperparameters (it may have been edited)."""
    fresh = [{k: v for k, v in g.items() if k in HYPERPARAMETERS_FROM_SPEC} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, values in zip(optimizer.param_groups, fresh):
        group.update(values)


def fast_forward(scheduler, step: int) -> None:
    """Put a step-number schedule at `step` (after a resume)."""
    if scheduler is None or step <= 0:
        return
    scheduler.last_epoch = step - 1
    scheduler.step()


def current_lr(optimizer: torch.optim.Optimizer) -> float:
    return float(optimizer.param_groups[0]["lr"])
