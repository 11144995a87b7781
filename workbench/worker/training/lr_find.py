"""The learning-rate range test (`lr.find`): an exponential sweep of the rate over a few hundred steps at
most, on a model copy of its own, the smoothed loss of each step, and the rate where that loss falls fastest.

It writes no checkpoint (its run folder holds the spec, the log and the curve in the report), and puts the
worker's random state back as it found it, so a training run afterwards is the same as without it. Worker
side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from workbench.errors import JobCancelled, JobError
from workbench.specs import LrFindSpec
from workbench.worker.devices import check_amp, describe, resolve_device
from workbench.worker.models import build_model, frozen_norm_layers
from workbench.worker.objectives.of_run import first_input, objective_for
from workbench.worker.training.guards import output_check_for
from workbench.worker.training.optim import build_optimizer
from workbench.worker.training.reproducibility import (
    deterministic_mode,
    restore_rng_state,
    rng_state,
    seed_everything,
)
from workbench.worker.training.session import check_data_fits, load_training_data, resolve_task
from workbench.worker.training.step import TrainStep

# After fastai's LRFinder (Smith, "Cyclical Learning Rates for Training Neural Networks", 2017): an
# exponential moving average of the loss, and a stop once the smoothed loss is this many times its lowest so
# far. fastai's weight on the past is 0.98, an average over ~50 steps: over a 100-step sweep that lags the
# curve by a large part of its range (on digits its minimum sat half a decade right of the raw one), so a
# sweep averages over a tenth of its steps at most, and over fastai's 50 steps from 500 steps on.
MAX_SMOOTHING = 0.98
SMOOTHING_WINDOW_FRACTION = 0.1
DIVERGE_FACTOR = 4.0
# The first steps' smoothed loss is one or two raw losses (bias-corrected): too noisy to judge a slope by.
SKIP_START_FRACTION = 0.1
MIN_POINTS = 5  # fewer points before the minimum than this give no slope worth suggesting


def sweep_rates(min_lr: float, max_lr: float, steps: int) -> np.ndarray:
    """The rate of each step: min_lr to max_lr, evenly spaced on a log scale (both ends included)."""
    return np.geomspace(min_lr, max_lr, steps)


def smoothing_for(steps: int) -> float:
    """The moving average's weight on the past for a sweep of `steps`: an average over a tenth of them at
    most."""
    window = max(1.0, steps * SMOOTHING_WINDOW_FRACTION)
    return min(MAX_SMOOTHING, 1.0 - 1.0 / window)


def suggest(lrs: list[float], losses: list[float]) -> tuple[float | None, str]:
    """(the rate where the smoothed loss falls fastest against log10(rate), why), looking only before the
    loss's minimum: past it the loss is rising, and a steep fall there is recovery from noise, not learning.
    None (with the reason) when the sweep is too short to tell."""
    if len(losses) < MIN_POINTS:
        return None, f"only {len(losses)} step(s) ran; lower min_lr or raise steps"
    values = np.asarray(losses, dtype=np.float64)
    log_lrs = np.log10(np.asarray(lrs, dtype=np.float64))
    lowest = int(np.argmin(values))
    start = max(1, int(len(values) * SKIP_START_FRACTION))
    if lowest - start + 1 < MIN_POINTS:
        return None, (
            f"the loss was lowest at step {lowest + 1}, too early to see it fall; lower min_lr "
            f"(now {lrs[0]:g})"
        )
    window = slice(start, lowest + 1)
    slopes = np.gradient(values, log_lrs)[window]
    best = int(np.argmin(slopes))
    if slopes[best] >= 0:
        return None, "the smoothed loss never fell; widen the range (min_lr lower, max_lr higher)"
    index = start + best
    return float(lrs[index]), (
        f"steepest fall of the smoothed loss, at step {index + 1} "
        f"({slopes[best]:.3g} per decade); the loss was lowest at lr {lrs[lowest]:.3g}"
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no NaN or inf


def _endless_batches(split, spec: LrFindSpec, device: torch.device):
    """The training split's batches, epoch after epoch, in the spec's seeded order (a local generator: nothing
    is drawn from the random state a later training run starts from). Full batches only where the split
    allows, so every step sees the same number of samples."""
    drop_last = len(split) >= spec.batch_size
    epoch = 0
    while True:
        count = 0
        with contextlib.closing(
            split.batches(
                spec.batch_size, shuffle=True, seed=spec.seed, epoch=epoch, drop_last=drop_last, device=device
            )
        ) as stream:
            for batch in stream:
                count += 1
                yield batch
        if not count:
            raise JobError(
                "the training split gave no batch (every file failed to decode?); check the dataset"
            )
        epoch += 1


def run_lr_find(spec: LrFindSpec, ctx) -> dict:
    """The `lr.find` task: the range test's rates, raw and smoothed losses, and the suggested rate."""
    saved = rng_state()  # put back at the end: a train after this one draws what it would have drawn anyway
    try:
        return _find(spec, ctx)
    finally:
        restore_rng_state(saved)


def _find(spec: LrFindSpec, ctx) -> dict:
    device = resolve_device(spec.device)
    check_amp(spec.amp, device)
    notes = []
    if spec.distributed != "none":
        # batch_size is the global batch, so one process sees the batches a DDP step would: the same curve.
        notes.append(
            f"distributed={spec.distributed} is not used: the sweep runs in one process on the same batches"
        )
    if spec.compile != "off":
        notes.append("compile is not used: a short sweep would spend most of its time compiling")
    for note in notes:
        ctx.log(note)
    dataset = load_training_data(spec, ctx)
    try:
        spec = resolve_task(spec, dataset, ctx.log)
        check_data_fits(spec, dataset)
        dataset.normalization(progress=ctx.progress)
        with deterministic_mode(spec.deterministic):
            seed_everything(spec.seed)  # the same initial weights a training run with this seed starts from
            model = build_model(
                spec.model,
                input_shape=dataset.sample_shape,
                log=ctx.log,
                task=spec.task,
                example=first_input(dataset),
            )
            return _sweep(spec, ctx, dataset, model, device)
    finally:
        dataset.release()


def _prepare(spec: LrFindSpec, ctx, dataset, model: torch.nn.Module, device: torch.device):
    """The model on `device` in train mode (frozen norms kept), its optimizer and training step, and where the
    batches are."""
    model = model.to(device)
    channels_last = spec.channels_last is True  # "auto" would time both layouts: longer than the sweep itself
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    placement, where = dataset.prepare(device, progress=ctx.progress, check_stop=ctx.check_stop)
    objective = objective_for(spec, dataset)
    optimizer = build_optimizer(model, spec, device)
    step_fn = TrainStep(
        model,
        optimizer,
        objective.loss,
        device=device,
        amp=spec.amp,
        clip_grad_norm=spec.clip_grad_norm,
        clip_grad_value=spec.clip_grad_value,
        channels_last=channels_last,
        output_check=output_check_for(spec, objective, dataset),
        objective=objective,
    )
    model.train()
    for module in frozen_norm_layers(model):  # as training does: a frozen BatchNorm keeps its statistics
        module.eval()
    return optimizer, step_fn, placement, where


def _sweep(spec: LrFindSpec, ctx, dataset, model: torch.nn.Module, device: torch.device) -> dict:
    optimizer, step_fn, placement, where = _prepare(spec, ctx, dataset, model, device)
    rates = sweep_rates(spec.min_lr, spec.max_lr, spec.steps)
    ctx.log(
        f"lr-find: {spec.steps} steps from {spec.min_lr:g} to {spec.max_lr:g} with {spec.optimizer}, batch "
        f"{spec.batch_size}, on {describe(device)} (batches: {where})"
    )
    lrs: list[float] = []
    raw: list[float | None] = []
    smoothed: list[float] = []
    beta = smoothing_for(spec.steps)
    average, best = 0.0, math.inf
    reason = None
    batches = _endless_batches(dataset.splits["train"], spec, device)
    try:
        for step, lr in enumerate(rates.tolist(), start=1):
            if ctx.should_stop():
                raise JobCancelled(f"lr-find cancelled by the user after {step - 1} of {spec.steps} steps")
            for group in optimizer.param_groups:
                group["lr"] = lr
            # one host read per step: the stop rule needs it
            loss = _one_step(step_fn, batches, spec.grad_accum_steps)
            lrs.append(lr)
            raw.append(_finite(loss))
            if not math.isfinite(loss):
                reason = (
                    f"the loss became {'NaN' if math.isnan(loss) else 'infinite'} at lr {lr:.3g} (step "
                    f"{step})"
                )
                smoothed.append(math.inf)
                break
            average = beta * average + (1 - beta) * loss
            value = average / (1 - beta**step)  # bias-corrected: the first value is the first loss
            smoothed.append(value)
            best = min(best, value)
            ctx.progress(step, spec.steps, f"lr {lr:.2e} · loss {value:.4f}")
            if value > DIVERGE_FACTOR * best:
                reason = (
                    f"the smoothed loss ({value:.3g}) passed {DIVERGE_FACTOR:g}x its lowest ({best:.3g}) at "
                    f"lr {lr:.3g} (step {step})"
                )
                break
    finally:
        batches.close()
    # The last point of an early stop is the divergence itself: kept in raw_losses, left out of the curve.
    kept = len(lrs) - (1 if reason else 0)
    curve_lrs, curve = lrs[:kept], smoothed[:kept]
    suggested, why = suggest(curve_lrs, curve)
    if suggested is None and reason and raw and raw[-1] is None and kept < MIN_POINTS:
        # A loss that is not a number within the first few (tiny) rates comes from the model or the data, not
        # the rate: "lower min_lr or raise steps" would send the user the wrong way.
        why = (
            f"{reason}, before the sweep had {MIN_POINTS} points; the rate was still {lrs[-1]:.3g}, so look "
            "at the model's output and the data for NaN or infinite values rather than at the range"
        )
    lowest = int(np.argmin(curve)) if curve else None
    text = (
        f"lr-find: suggested lr {suggested:.3g} ({why})"
        if suggested is not None
        else f"lr-find: no suggestion ({why})"
    )
    ctx.log(text + (f"; stopped early: {reason}" if reason else ""))
    ctx.progress(
        spec.steps, spec.steps, f"suggested lr {suggested:.3g}" if suggested else "no suggestion", force=True
    )
    return {
        "lrs": curve_lrs,
        "losses": curve,
        "raw_losses": raw[:kept],
        "suggested_lr": suggested,
        "suggestion": why,
        "min_loss_lr": curve_lrs[lowest] if lowest is not None else None,
        "stopped_early": reason is not None,
        "stop_reason": reason,
        "diverged_at": {"lr": lrs[-1], "raw_loss": raw[-1]} if reason else None,
        "steps_run": len(lrs),
        "steps": spec.steps,
        "min_lr": spec.min_lr,
        "max_lr": spec.max_lr,
        "smoothing": beta,
        "diverge_factor": DIVERGE_FACTOR,
        "optimizer": spec.optimizer,
        "batch_size": spec.batch_size,
        "task": spec.task,
        "device": str(device),
        "data_placement": placement,
    }


def _one_step(step_fn: TrainStep, batches, accum: int) -> float:
    """One optimiser step over `accum` batches (as training takes them); returns its mean loss per sample."""
    total, samples = None, 0
    for _ in range(accum):
        x, y = next(batches)
        loss_sum, _ = step_fn.accumulate(x, y, 1.0 / accum)
        total = loss_sum if total is None else total + loss_sum
        samples += int(y.shape[0])
    step_fn.step()
    return float(total) / max(samples, 1)
