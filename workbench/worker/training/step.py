"""One optimiser step, split in two: `accumulate` (forward and backward of one micro-batch, under autocast and
the GradScaler) and `step` (unscale, clip, optimiser step, zero the gradients).

Nothing here reads a value back to the host: losses and correct counts come back as device tensors.
Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.devices import autocast
from workbench.worker.models import logits_of
from workbench.worker.objectives.losses import LossFn
from workbench.worker.training.batch import call_model, channels_last
from workbench.worker.training.guards import OutputCheck


def _is_compile_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("torch._dynamo", "torch._inductor")) or "CompilerFailed" in type(exc).__name__


def _compile_reason(exc: BaseException) -> str:
    """The failure in a line: dynamo's own first line is often only "backend='inductor' raised:", the cause
    (the compiler's error) is the exception it wraps."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()] or [""]
    reason = lines[0]
    inner = getattr(exc, "inner_exception", None)
    if inner is not None:
        inner_lines = [line.strip() for line in str(inner).strip().splitlines() if line.strip()]
        reason = f"{reason} {type(inner).__name__}: {inner_lines[0] if inner_lines else ''}"
    elif reason.endswith(":") and len(lines) > 1:
        reason = f"{reason} {lines[1]}"
    return reason[:300]


class TrainStep:
    """The engine's step function.

    `model` owns the parameters; `forward_model` is what runs the forward pass (a DDP or torch.compile wrapper
    of `model`, or `model` itself). Call `accumulate` once per micro-batch with its share `weight` of the
    optimiser step (n_micro / n_step: gradients then equal those of one batch of n_step samples), then `step`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_fn: LossFn,
        *,
        device: torch.device | str = "cpu",
        amp: str = "none",
        clip_grad_norm: float = 0.0,
        clip_grad_value: float = 0.0,
        channels_last: bool = False,
        forward_model: nn.Module | None = None,
        compiled: bool = False,
        output_check: OutputCheck | None = None,
        objective=None,
    ):
        self.model = model
        self.forward_model = forward_model if forward_model is not None else model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.device = torch.device(device)
        self.amp = amp
        # fp16 has too little range for small gradients: scale the loss up, unscale before the update.
        self.scaler = torch.amp.GradScaler(self.device.type) if amp == "fp16" else None
        self.clip_grad_norm = clip_grad_norm
        self.clip_grad_value = clip_grad_value
        self.channels_last = channels_last
        self.compiled = compiled
        # None: scores go to the loss unchecked (callers without a ModelSpec)
        self.output_check = output_check
        # The task's batch statistics (workbench.worker.objectives); None: the correct count of class scores.
        self.objective = objective
        self._params = [p for p in model.parameters() if p.requires_grad]

    def accumulate(
        self, x, y: torch.Tensor, weight: float = 1.0, sync: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward one micro-batch; returns (loss summed over its samples, the task's batch
        statistics, or the correct count without an objective) on the device. `x` is a tensor, or a tuple or
        dict of them.

        `sync=False` skips DDP's gradient all-reduce (for all but the last micro-batch of a step).
        """
        if self.channels_last:
            x = channels_last(x)
        no_sync = getattr(self.forward_model, "no_sync", None)
        skip = no_sync() if (not sync and no_sync is not None) else contextlib.nullcontext()
        try:
            with skip:
                with autocast(self.amp, self.device):
                    scores = logits_of(call_model(self.forward_model, x))
                if self.output_check is not None:
                    self.output_check.scores(scores, y)
                    loss = self.output_check.loss(self.loss_fn, scores, y)
                else:
                    loss = self.loss_fn(scores, y)
                scaled = loss * weight if weight != 1.0 else loss
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward()
        except Exception as exc:
            if self.compiled and _is_compile_error(exc):
                raise JobError(
                    f"compile: torch.compile failed ({type(exc).__name__}: {_compile_reason(exc)}); "
                    "set compile=off to train without it"
                ) from None
            raise
        scores = scores.detach()
        if self.objective is not None:
            return loss.detach() * y.shape[0], self.objective.batch_stats(scores, y)
        return loss.detach() * y.shape[0], (scores.argmax(dim=1) == y).sum()

    def step(self) -> torch.Tensor | None:
        """Clip and apply the accumulated gradients; returns the gradient norm before clipping (device tensor)
        when clip_grad_norm is on, else None."""
        norm = None
        if self.scaler is not None and (self.clip_grad_norm or self.clip_grad_value):
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        if self.clip_grad_norm:
            norm = torch.nn.utils.clip_grad_norm_(self._params, self.clip_grad_norm)
        if self.clip_grad_value:
            torch.nn.utils.clip_grad_value_(self._params, self.clip_grad_value)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm
