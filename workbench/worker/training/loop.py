"""The training loop of one process: epochs of optimiser steps, interval metrics, validation, checkpoints,
early stopping, cancel and the NaN guard. Used as it is by a single-process job and by every DDP rank.

The loop never waits on the device per step: losses and correct counts stay device tensors and are read back
every `log_every_steps` steps and at epoch ends, as one small stacked tensor in one non_blocking copy, and the
NaN and divergence checks run there; each read-back still reports every optimiser step's loss, metrics and lr.
Throughput is measured after a warm-up (compilation, profiling, first-step allocations), which is reported
apart. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn

from workbench.errors import JobCancelled, JobError
from workbench.layer_records import FOLDER as LAYER_STATS_FOLDER
from workbench.layer_records import write_record
from workbench.specs import TrainSpec
from workbench.worker.checkpoints import check_final_checkpoint
from workbench.worker.devices import HostReader
from workbench.worker.models import frozen_norm_layers
from workbench.worker.objectives.of_run import format_metric, objective_for
from workbench.worker.training.batch import slice_batch
from workbench.worker.training.evaluate import evaluate_sums
from workbench.worker.training.guards import DIVERGED_FACTOR, divergence_limit, output_check_for
from workbench.worker.training.layer_stats import LayerStats
from workbench.worker.training.layout import resolve_channels_last
from workbench.worker.training.optim import (
    build_optimizer,
    build_scheduler,
    current_lr,
    fast_forward,
    load_optimizer_state,
)
from workbench.worker.training.plan import plan_epoch, shard_bounds
from workbench.worker.training.profiling import StepProfiler
from workbench.worker.training.reproducibility import restore_rng_state
from workbench.worker.training.state import BEST, FINAL, LAST, TrainState, last_checkpoint
from workbench.worker.training.step import TrainStep
from workbench.worker.training.writer import CheckpointWriter


class Reporter(Protocol):
    """What the loop reports through: a TaskContext, or a DDP rank's relay to the parent task."""

    def progress(self, done: float, total: float | None = None, text: str = "") -> None: ...
    def metrics(self, step: int, values: dict) -> None: ...
    def log(self, text: str, level: str = "info") -> None: ...
    def artifact(self, name: str, path, kind: str = "file") -> None: ...
    def should_stop(self) -> bool: ...


@dataclass
class TrainSetup:
    """Everything one training process needs; `model` is built (and on the CPU), `resume` is a loaded
    last.pt."""

    spec: TrainSpec
    dataset: object  # a workbench.worker.data.LoadedDataset
    model: nn.Module
    device: torch.device
    checkpoints_dir: Path
    artifacts_dir: Path
    report: Reporter
    rank: int = 0
    world: int = 1
    resume: dict | None = None
    # (completed global steps) -> True when every rank must stop now; default: the reporter's stop flag.
    stop_check: Callable[[int], bool] | None = None
    eval_batch_size: int = 0
    workspace: Path | None = None  # where channels_last=auto remembers its choice (None: time it every run)
    objective: object | None = None  # a workbench.worker.objectives.Objective; None: the one spec.task names


@dataclass
class _Interval:
    """Device tensors of the micro-batches since the last read-back."""

    losses: list = field(default_factory=list)  # loss summed over each micro-batch's samples
    # the task's batch statistics (classification: the correct count)
    stats: list = field(default_factory=list)
    steps: list = field(default_factory=list)  # (epoch, global step) of each micro-batch, for the NaN message
    # each micro-batch's samples over all ranks (before sharding)
    batch_samples: list = field(default_factory=list)
    lrs: dict = field(default_factory=dict)  # global step -> the lr that step used, for the steps completed
    samples: int = 0  # this rank's samples
    started: float = field(default_factory=time.perf_counter)


def _step_segments(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[start, end) of each optimiser step's micro-batches in an interval (they are consecutive)."""
    segments: list[tuple[int, int]] = []
    for index, (_, step) in enumerate(steps):
        if segments and steps[segments[-1][0]][1] == step:
            segments[-1] = (segments[-1][0], index + 1)
        else:
            segments.append((index, index + 1))
    return segments


# Optimiser steps before throughput is measured: the first ones allocate memory, pick kernels and (with
# profile_steps) run under the profiler. With torch.compile the whole first epoch is warm-up: its smaller last
# batch compiles again.
WARMUP_STEPS = 5


def _fmt(value: float) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:.4f}"


class Trainer:
    def __init__(self, setup: TrainSetup):
        self.setup = setup
        self.spec = setup.spec
        self.report = setup.report
        self.device = setup.device
        self.rank, self.world = setup.rank, setup.world
        self.is_main = setup.rank == 0
        self._plan_epochs(setup)
        model = self._place_model(setup)
        self.state = TrainState()
        resume = setup.resume
        if resume is not None:
            self._load_weights(model, resume)
        forward_model = self._forward_model(model)
        self._build_step(setup, model, forward_model)
        if resume is not None:
            self._restore(resume)
        self._init_counters(setup, model)

    def _plan_epochs(self, setup: TrainSetup) -> None:
        """The splits, the epoch's steps, the checkpoints' paths and when to look for a stop request."""
        spec = self.spec
        self.train_split = setup.dataset.splits["train"]
        self.val_split = setup.dataset.splits["val"]
        if len(self.train_split) == 0:
            raise JobError("the training split is empty; lower dataset.val_fraction / dataset.test_fraction")
        self.plan = plan_epoch(len(self.train_split), spec.batch_size, spec.grad_accum_steps, self.world)
        if self.plan.steps == 0:
            raise JobError(
                f"the training split has {len(self.train_split)} samples: too few for {self.world} processes"
            )
        self.total_steps = spec.epochs * self.plan.steps
        self.ckpt_last = setup.checkpoints_dir / LAST
        self.ckpt_best = setup.checkpoints_dir / BEST
        self.ckpt_final = setup.checkpoints_dir / FINAL
        # Validation batches as large as training ones: bigger ones would churn the CPU allocator (measured:
        # the epoch after a 256-sample validation ran ~4 % slower) and could run out of memory a training step
        # fits in.
        self.eval_batch_size = setup.eval_batch_size or spec.batch_size
        self._stop_check = setup.stop_check or (lambda step: self.report.should_stop())
        self._check_every_batch = setup.world == 1  # DDP ranks must agree, so they check at step starts only

    def _place_model(self, setup: TrainSetup) -> nn.Module:
        """The model on the device in its memory layout, and the data placed for training; returns the
        model."""
        spec = self.spec
        model = setup.model.to(self.device)
        self.channels_last, layout = resolve_channels_last(
            spec.channels_last,
            model=model,
            sample_shape=tuple(setup.dataset.sample_shape),
            batch_size=max(1, spec.batch_size // self.world),
            device=self.device,
            amp=spec.amp,
            workspace=setup.workspace,
            deterministic=spec.deterministic,
            compiled=spec.compile != "off",
        )
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model
        # DDP ranks must agree on when to stop: they only ever check at step starts.
        self.placement, where = setup.dataset.prepare(
            self.device,
            progress=self._progress,
            check_stop=self._stop_before_training if self._check_every_batch else None,
        )
        if self.is_main:
            self.report.log(f"memory layout: {layout}")
            self.report.log(f"batches: {where}")
        return model

    def _load_weights(self, model: nn.Module, resume: dict) -> None:
        """The resumed run's weights and training state."""
        spec = self.spec
        try:
            model.load_state_dict(resume["model"])
        except RuntimeError as exc:
            first = (str(exc).splitlines() or [""])[0]
            raise JobError(
                f"cannot resume: {self.ckpt_last} holds weights of another model than "
                f"{spec.model.name} as this spec builds it ({first}); was the model "
                "changed?"
            ) from None
        self.state = TrainState.from_dict(resume["state"])

    def _forward_model(self, model: nn.Module) -> nn.Module:
        """What runs the forward pass: the model, wrapped in DDP across processes, compiled if asked."""
        spec = self.spec
        forward_model: nn.Module = model
        if self.world > 1:
            from torch.nn.parallel import DistributedDataParallel

            forward_model = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        if spec.compile != "off":
            forward_model = torch.compile(
                forward_model, mode=None if spec.compile == "default" else spec.compile
            )
        return forward_model

    def _build_step(self, setup: TrainSetup, model: nn.Module, forward_model: nn.Module) -> None:
        """The optimiser, the scheduler, the task's objective and the step that applies them."""
        spec = self.spec
        self.optimizer = build_optimizer(model, spec, self.device)
        self.scheduler = build_scheduler(self.optimizer, spec, self.plan.steps, self.total_steps)
        # The task's loss, batch statistics and monitor metric (classification: cross-entropy, correct count
        # and accuracy).
        self.objective = objective = setup.objective or objective_for(spec, setup.dataset)
        self.loss_fn = objective.loss
        # 0 (auto) is the dataset's class count: the task resolves it first, a Trainer built directly may not
        # have.
        self.output_check = output_check_for(spec, objective, setup.dataset)
        self.step_fn = TrainStep(
            model,
            self.optimizer,
            self.loss_fn,
            device=self.device,
            amp=spec.amp,
            clip_grad_norm=spec.clip_grad_norm,
            clip_grad_value=spec.clip_grad_value,
            channels_last=self.channels_last,
            forward_model=forward_model,
            compiled=spec.compile != "off",
            output_check=self.output_check,
            objective=objective,
        )

    def _init_counters(self, setup: TrainSetup, model: nn.Module) -> None:
        """The epoch's running sums, layer statistics, timing and throughput counters, the checkpoint
        writer."""
        spec = self.spec
        objective = self.objective
        self.frozen_norms = frozen_norm_layers(model)
        self.interval = _Interval()
        # Loss sum, the task's statistics (classification: the correct count) and samples of the epoch so far,
        # on the host: every interval is read back before the epoch ends anyway, and float64 adds the same
        # there. A cancelled epoch's part comes back on resume.
        width = objective.stat_count() + 2
        partial = self.state.partial_epoch_sums
        self.epoch_sums = torch.tensor(
            partial if len(partial) == width else [0.0] * width, dtype=torch.float64
        )
        self.reader = HostReader()
        # Rank 0 records the layers (every rank's gradients are the same after DDP's all-reduce). Under
        # torch.compile only weights and gradients: a forward hook added for one step would recompile the
        # model.
        self.layer_stats = None
        self.layer_stats_folder = setup.artifacts_dir / LAYER_STATS_FOLDER
        if spec.layer_stats_every and self.is_main:
            self.layer_stats = LayerStats(model, spec.layer_stats_every, activations=spec.compile == "off")
        # Training time and samples up to the last read-back (validation excluded), and the same at the end of
        # the warm-up: throughput is what came after it.
        self.train_time = 0.0
        self.train_samples = 0
        self._since = time.perf_counter()
        self._warm: tuple[float, int, int] | None = None  # (train_time, train_samples, global_step) when warm
        self._start_step = self._warmup_until = 0  # global steps where fit() started and the warm-up ends
        self.compile_s: float | None = None
        self.early_stopped = False
        # errors name checkpoints/...
        self.writer = CheckpointWriter(relative_to=setup.checkpoints_dir.parent)
        self._last_loss: float | None = None  # for progress texts between read-backs
        # the first interval's mean loss: the divergence guard's reference
        self._first_loss: float | None = None

    def _progress(self, done: float, total: float | None = None, text: str = "") -> None:
        if self.is_main:  # decoding every image before the data goes to the device can take a while
            self.report.progress(done, total, text)

    def _stop_before_training(self) -> None:
        if self._stop_check(0):
            raise JobCancelled("cancelled by the user before training started (while preparing the data)")

    # -- resume ------------------------------------------------------------------------------------
    def _restore(self, resume: dict) -> None:
        if resume.get("optimizer_name") == self.spec.optimizer:
            try:
                load_optimizer_state(self.optimizer, resume["optimizer"])
            except (ValueError, KeyError) as exc:
                raise JobError(
                    f"cannot resume: the optimizer state in {self.ckpt_last} does not fit this "
                    f"model and optimizer ({exc}); was model.freeze or no_decay_bias_norm "
                    "changed?"
                ) from None
        elif self.is_main:
            self.report.log(
                f"the optimizer changed from {resume.get('optimizer_name')} to "
                f"{self.spec.optimizer}: its state starts afresh",
                "warning",
            )
        fast_forward(self.scheduler, self.state.global_step)
        if self.step_fn.scaler is not None and resume.get("scaler"):
            self.step_fn.scaler.load_state_dict(resume["scaler"])
        if resume.get("rng"):
            restore_rng_state(resume["rng"])

    # -- the loop ----------------------------------------------------------------------------------
    def fit(self) -> dict:
        """Train up to spec.epochs (from where a resumed state left off); returns a summary for the result."""
        spec, state = self.spec, self.state
        remaining = max(0, self.total_steps - state.global_step)
        profiler = StepProfiler(
            spec.profile_steps if self.is_main else 0,
            self.device,
            self.setup.artifacts_dir,
            self.report,
            remaining,
        )
        self.profiler = profiler
        warmup = max(WARMUP_STEPS, profiler.warmup + spec.profile_steps if self.is_main else 0)
        if spec.compile != "off":
            warmup = max(warmup, self.plan.steps)
        self._start_step = state.global_step
        self._warmup_until = state.global_step + warmup
        try:
            for epoch in range(state.epoch, spec.epochs):
                self._train_epoch(epoch)
                if self._end_epoch(epoch):
                    break
            if self.is_main:
                self._save_last()
                self.writer.submit(self.model.state_dict(), self.ckpt_final)
        except BaseException:
            with contextlib.suppress(Exception):  # the error already on its way out is the one to report
                self.writer.wait()
            raise
        finally:
            profiler.close()
            self.writer.close()
        self.writer.wait()  # the result names these files: they must be complete (raises a write error)
        if self.is_main:  # once, not per epoch: the run is done only when its later jobs can load it
            check_final_checkpoint(self.ckpt_final.parent, self.model.state_dict(), (BEST, FINAL))
        return self.summary()

    def _train_mode(self) -> None:
        self.model.train()
        for module in self.frozen_norms:  # frozen BatchNorm keeps its running statistics too
            module.eval()

    def _train_epoch(self, epoch: int) -> None:
        spec, plan, state = self.spec, self.plan, self.state
        self._train_mode()
        skip_steps = state.step_in_epoch if epoch == state.epoch else 0
        skip = plan.group_start[skip_steps] if skip_steps < plan.steps else len(plan.batch_sizes)
        state.step_in_epoch = skip_steps
        if self.is_main and self._last_loss is not None:
            self.report.progress(
                state.global_step,
                self.total_steps,
                f"epoch {epoch + 1}/{spec.epochs} · loss {self._last_loss:.4f}",
            )
        self._since = time.perf_counter()  # training time runs from here to each read-back
        self.interval = _Interval()
        first_compiled_step = self.step_fn.compiled and self.compile_s is None
        compile_started = None
        pending = 0
        batches = self.train_split.batches(
            spec.batch_size, shuffle=True, seed=spec.seed, epoch=epoch, device=self.device
        )
        for index, (x, y) in enumerate(batches):
            if index < skip:  # resuming inside an epoch: the same order, minus what was already trained
                continue
            if index >= len(plan.group_of):
                break  # a dropped last batch (too small to shard)
            group = plan.group_of[index]
            if (self._check_every_batch or index == plan.group_start[group]) and self._stop_check(
                state.global_step
            ):  # noqa: E501
                self._cancel(epoch)
            self.interval.batch_samples.append(y.shape[0])
            if self.world > 1:
                lo, hi = shard_bounds(y.shape[0], self.world, self.rank)
                x, y = slice_batch(x, lo, hi), y[lo:hi]
            last = index == plan.group_end[group] - 1
            # Each micro-batch adds its share of the step's mean: n_local * world / n_step (DDP averages
            # ranks).
            weight = y.shape[0] * self.world / plan.group_total[group]
            if (
                self.layer_stats is not None
                and index == plan.group_start[group]
                and self.layer_stats.wants(state.global_step + 1)
            ):
                self.layer_stats.begin(state.global_step + 1)
            if first_compiled_step and compile_started is None:  # from the first micro-batch, which compiles
                compile_started = time.perf_counter()
            with self.layer_stats.watch() if self.layer_stats is not None else contextlib.nullcontext():
                loss_sum, stats = self.step_fn.accumulate(x, y, weight, sync=last)
            self.interval.losses.append(loss_sum)
            self.interval.stats.append(stats)
            self.interval.steps.append((epoch, state.global_step + 1))
            self.interval.samples += y.shape[0]  # this rank's; _drain sums them over ranks
            pending += 1
            if last:
                self._optimizer_step(epoch)
                pending = 0
                if first_compiled_step:
                    # torch.compile traces and builds its kernels inside the first call, on the host: this
                    # clock (no device sync) holds the compilation and at most one step of device work.
                    self.compile_s = time.perf_counter() - compile_started
                    first_compiled_step = False
        # planned batches that never came (files that failed to decode): apply what was accumulated
        if pending:
            self._optimizer_step(epoch)
        self._drain()

    def _optimizer_step(self, epoch: int) -> None:
        self.interval.lrs[self.state.global_step + 1] = current_lr(self.optimizer)  # the lr this step uses
        recording = self.layer_stats is not None and self.layer_stats.pending is not None
        if recording:
            scaler = self.step_fn.scaler
            self.layer_stats.after_backward(scaler.get_scale() if scaler is not None else 1.0)
        self.step_fn.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.state.global_step += 1
        if recording:
            self._record_layers()
        self.state.step_in_epoch += 1
        self.profiler.step_done()
        if self.state.global_step % self.spec.log_every_steps == 0:
            self._log_interval(epoch)

    def _record_layers(self) -> None:
        """The recorded step's layer statistics: one read-back, one file, an artifact event, and the log's
        warnings."""
        lr = self.interval.lrs.get(self.state.global_step, math.nan)
        # The spec's lr is what a warm-up climbs to and a schedule comes down from (a larger one seen counts
        # too).
        peak = max(self.spec.lr, lr) if math.isfinite(lr) else self.spec.lr
        record = self.layer_stats.finish(self.reader.read, lr=lr, lr_peak=peak)
        if record is None:
            return
        try:
            path = write_record(self.layer_stats_folder, record)
        except OSError as exc:  # a full disk loses the statistics, never the run (checkpoints say it louder)
            self.report.log(f"layer statistics at step {record['step']} not saved: {exc}", "warning")
            return
        self.report.artifact("layer_stats", path, kind="layer_stats")
        for text in self.layer_stats.new_warnings(record):
            self.report.log(text, "warning")

    # -- reading back --------------------------------------------------------------------------------
    def _reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(tensor)
        return tensor

    def _drain(self) -> torch.Tensor | None:
        """Fold the interval into the epoch sums (over all ranks), check it is finite and report each of its
        steps; returns its [loss sum, the task's statistics..., samples] on the host. This is the one
        read-back per interval:
        the per-step loss and statistics ride in the same tensor."""
        interval = self.interval
        if not interval.losses:
            return None
        # The sample count is a host number; torch.full writes it on the device with no host-to-device copy.
        samples = torch.full((), float(interval.samples), dtype=torch.float64, device=self.device)
        losses = torch.stack(interval.losses).double().reshape(-1)
        stats = torch.stack(interval.stats).double().reshape(len(interval.stats), -1)
        segments = _step_segments(interval.steps)
        # one micro-batch per step (no accumulation): nothing to add
        if len(segments) == len(interval.losses):
            step_losses, step_stats = losses, stats
        else:
            step_losses = torch.stack([losses[a:b].sum() for a, b in segments])
            step_stats = torch.stack([stats[a:b].sum(dim=0) for a, b in segments])
        sums = torch.cat(
            [
                losses.sum().reshape(1),
                stats.sum(dim=0),
                samples.reshape(1),
                step_losses,
                step_stats.reshape(-1),
            ]
        )
        self._reduce(sums)
        read = self.reader.read(sums)
        width = stats.shape[1]
        host, per_step = read[: width + 2], read[width + 2 :]
        self._clock(int(host[-1]))
        if not math.isfinite(float(host[0])):
            self._fail_nonfinite(float(host[0]))
        mean = float(host[0]) / max(float(host[-1]), 1.0)  # the reduced sums: every DDP rank decides alike
        if mean > divergence_limit(self._first_loss):
            self._fail_diverged(mean)
        if self._first_loss is None:
            self._first_loss = mean
        self.epoch_sums += host
        if self.is_main:
            self._report_steps(interval, segments, per_step, width)
        self.interval = _Interval()
        return host

    def _report_steps(
        self, interval: _Interval, segments: list[tuple[int, int]], per_step: torch.Tensor, width: int
    ) -> None:
        """Every completed step's loss, the task's metrics and lr, at its own step (a curve point per
        step)."""
        count = len(segments)
        step_losses, step_stats = per_step[:count].tolist(), per_step[count:].reshape(count, width).tolist()
        for (start, end), loss_sum, stats in zip(segments, step_losses, step_stats):
            step = interval.steps[start][1]
            if step not in interval.lrs:
                # micro-batches of a step cancelled before its optimiser step: that step never happened
                continue
            samples = max(float(sum(interval.batch_samples[start:end])), 1.0)
            measured = self.objective.metrics(stats, samples)
            self.report.metrics(
                step,
                {
                    "train/loss": loss_sum / samples,
                    **{f"train/{name}": value for name, value in measured.items()},
                    "lr": interval.lrs[step],
                },
            )

    def _clock(self, samples: int) -> None:
        """Count training time and samples up to this read-back (the device has caught up: the clock is
        honest)."""
        now = time.perf_counter()
        self.train_time += now - self._since
        self._since = now
        self.train_samples += samples
        if self._warm is None and self.state.global_step >= self._warmup_until:
            self._warm = (self.train_time, self.train_samples, self.state.global_step)

    def _log_interval(self, epoch: int) -> None:
        interval = self.interval
        sums = self._drain()
        if sums is None:
            return
        elapsed = max(time.perf_counter() - interval.started, 1e-9)
        samples = max(float(sums[-1]), 1.0)
        loss = float(sums[0]) / samples
        self._last_loss = loss
        # the steps' own values went out with the read-back; the interval adds its throughput
        if self.is_main:
            self.report.metrics(self.state.global_step, {"train/samples_per_s": samples / elapsed})
            self.report.progress(
                self.state.global_step,
                self.total_steps,
                f"epoch {epoch + 1}/{self.spec.epochs} · loss {loss:.4f}",
            )

    def _fail_nonfinite(self, value: float) -> None:
        local = torch.stack(self.interval.losses)
        bad = (~torch.isfinite(local)).nonzero()
        if len(bad):
            epoch, step = self.interval.steps[int(bad[0, 0])]
            where = f"at epoch {epoch + 1}, step {step}"
        else:  # another rank saw it first
            (epoch, first), (_, last) = self.interval.steps[0], self.interval.steps[-1]
            where = f"at epoch {epoch + 1}, between steps {first} and {last}"
        what = "NaN" if math.isnan(value) else "infinite"
        raise JobError(
            f"the training loss became {what} {where}; training stopped and "
            f"{self._kept_checkpoint()}. Try a lower lr (now {self.spec.lr:g}), amp=none, or "
            "gradient clipping (e.g. clip_grad_norm=1.0)."
        )

    def _fail_diverged(self, mean: float) -> None:
        limit = divergence_limit(self._first_loss)
        why = f"over the limit of {limit:.3g}"
        if self._first_loss is not None and limit == DIVERGED_FACTOR * self._first_loss:
            why += f", a million times the first loss read back ({self._first_loss:.3g})"
        raise JobError(
            f"the training loss diverged ({mean:.2g} at step {self.state.global_step}, {why}); "
            f"training stopped and {self._kept_checkpoint()}. Try a lower lr (now "
            f"{self.spec.lr:g}) or gradient clipping (e.g. clip_grad_norm=1.0)."
        )

    def _kept_checkpoint(self) -> str:
        self.writer.wait()  # a last.pt still being written counts (and a write error is the one to report)
        if self.ckpt_last.exists():
            return f"the last good checkpoint is kept: {self.ckpt_last}"
        return "no checkpoint had been written yet"

    # -- epoch end -----------------------------------------------------------------------------------
    def _end_epoch(self, epoch: int) -> bool:
        """Validate, record, checkpoint; True when early stopping ends the run."""
        spec, state, objective = self.spec, self.state, self.objective
        sums = self.epoch_sums.tolist()  # a host tensor: no device involved
        samples = max(sums[-1], 1.0)
        train_loss = sums[0] / samples
        train = objective.metrics(sums[1:-1], samples)
        self._last_loss = train_loss
        values: dict = {
            "epoch": epoch + 1,
            "epoch/train_loss": train_loss,
            **{f"epoch/train_{name}": value for name, value in train.items()},
        }
        val_loss, val = None, {}
        if len(self.val_split):
            check = self._cancel_if_requested(epoch) if self._check_every_batch else None
            read = self.reader.read(
                self._reduce(
                    evaluate_sums(
                        self.model,
                        self.val_split,
                        self.loss_fn,
                        device=self.device,
                        amp=spec.amp,
                        channels_last=self.channels_last,
                        batch_size=self.eval_batch_size,
                        rank=self.rank,
                        world=self.world,
                        check_stop=check,
                        output_check=self.output_check,
                        objective=objective,
                    )
                )
            ).tolist()
            if read[-1]:
                val_loss, val = read[0] / read[-1], objective.metrics(read[1:-1], read[-1])
                values.update({"val/loss": val_loss, **{f"val/{name}": value for name, value in val.items()}})
        self.epoch_sums.zero_()  # only now: a cancel during validation saves this epoch's sums with last.pt
        state.epoch, state.step_in_epoch, state.partial_epoch_sums = epoch + 1, 0, []
        monitored = val.get(objective.monitor)
        if monitored is not None and not math.isfinite(monitored):
            monitored = None
        state.last_epoch_metrics = {
            "train_loss": train_loss,
            "val_loss": val_loss,
            **{f"train_{name}": value for name, value in train.items()},
            **{f"val_{name}": value for name, value in val.items()},
        }
        state.last_epoch_metrics.setdefault("train_acc", None)  # the result's keys, whatever the task
        state.last_epoch_metrics.setdefault("val_acc", None)
        if monitored is not None:
            if self._improves(monitored):
                state.best_metric, state.best_epoch, state.bad_epochs = monitored, epoch + 1, 0
                if spec.keep_best and self.is_main:
                    self.writer.submit(self.model.state_dict(), self.ckpt_best)
            else:
                state.bad_epochs += 1
        if self.is_main:
            self.report.metrics(state.global_step, values)
            train_text = " ".join(f"{name} {format_metric(name, value)}" for name, value in train.items())
            val_text = (
                (
                    f" · val loss {_fmt(val_loss)} "
                    + " ".join(f"{name} {format_metric(name, value)}" for name, value in val.items())
                )
                if val
                else ""
            )
            self.report.log(
                f"epoch {epoch + 1}/{spec.epochs}: train loss {_fmt(train_loss)} {train_text}{val_text}"
            )
            self.report.progress(
                state.global_step,
                self.total_steps,
                f"epoch {epoch + 1}/{spec.epochs} · loss {train_loss:.4f}",
            )
            if spec.checkpoint_every and (epoch + 1) % spec.checkpoint_every == 0:
                self._save_last()
        patience = spec.early_stop_patience
        if patience and monitored is not None and state.bad_epochs >= patience and epoch + 1 < spec.epochs:
            self.early_stopped = True
            if self.is_main:
                best = format_metric(objective.monitor, state.best_metric)
                self.report.log(
                    f"early stop after epoch {epoch + 1}: validation {objective.monitor_label} "
                    f"has not improved for {patience} epoch(s) (best {best} at epoch "
                    f"{state.best_epoch})"
                )
            return True
        return False

    def _improves(self, value: float) -> bool:
        """Whether a validation monitor value beats the best so far (the first one always does)."""
        best = self.state.best_metric
        if self.state.best_epoch == 0:
            return True
        return value > best if self.objective.higher_is_better else value < best

    # -- checkpoints and cancel ----------------------------------------------------------------------
    def _save_last(self) -> None:
        self.writer.submit(
            last_checkpoint(
                model=self.model,
                optimizer=self.optimizer,
                optimizer_name=self.spec.optimizer,
                scheduler=self.scheduler,
                scaler=self.step_fn.scaler,
                state=self.state,
            ),
            self.ckpt_last,
        )

    def _cancel_if_requested(self, epoch: int) -> Callable[[], None]:
        def check() -> None:
            if self._stop_check(self.state.global_step):
                self._cancel(epoch, during_validation=True)

        return check

    def _cancel(self, epoch: int, during_validation: bool = False) -> None:
        """Save last.pt at the last optimiser step (its unfinished micro-batches are dropped), then stop."""
        self._drain()  # also proves the weights being saved came from finite losses
        if self.layer_stats is not None:
            self.layer_stats.discard()
        self.optimizer.zero_grad(set_to_none=True)
        self.profiler.close()
        state = self.state
        state.partial_epoch_sums = self.epoch_sums.tolist()
        if self.is_main:
            self._save_last()
            self.writer.wait()
        where = "after" if during_validation else "in"
        raise JobCancelled(
            f"cancelled by the user {where} epoch {epoch + 1}/{self.spec.epochs} at step "
            f"{state.global_step}; {self.ckpt_last} is saved, so the run can be resumed"
        )

    def throughput(self) -> dict:
        """Training samples/s after the warm-up, and the warm-up apart (the whole run when it never ended)."""
        if self._warm is not None and self.train_samples > self._warm[1] and self.train_time > self._warm[0]:
            warm_time, warm_samples, warm_step = self._warm
            measured = (self.train_samples - warm_samples) / (self.train_time - warm_time)
            warmup = {"warmup_s": warm_time, "warmup_steps": warm_step - self._start_step}
        else:
            measured = self.train_samples / self.train_time if self.train_time > 0 else None
            warmup = {"warmup_s": None, "warmup_steps": None}
        return {"train_samples_per_s": measured, **warmup, "compile_s": self.compile_s}

    def summary(self) -> dict:
        state = self.state
        return {
            "epochs_completed": state.epoch,
            "global_steps": state.global_step,
            "early_stopped": self.early_stopped,
            "best_val_accuracy": (
                state.best_metric
                if state.best_epoch and self.objective.task == "classification"  # noqa: E501
                else None
            ),
            "best_val_monitor": state.best_metric if state.best_epoch else None,
            "best_epoch": state.best_epoch or None,
            "last_epoch": dict(state.last_epoch_metrics),
            **self.throughput(),
            "train_samples": self.train_samples,
            "channels_last": self.channels_last,
            "placement": self.placement,
        }
