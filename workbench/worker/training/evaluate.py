"""Evaluation: validation loss and accuracy during training, and the final test evaluation (confusion matrix,
per-class accuracy, the most confidently wrong samples) the GUI's evaluation view reads from evaluation.json.

Batches are gathered by index here (not by Split.batches) so every prediction keeps its index within the
split, even when some files fail to decode. Worker side; never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import nn

from workbench.runs import atomic_write_json
from workbench.worker.devices import autocast
from workbench.worker.models import logits_of
from workbench.worker.objectives.losses import LossFn
from workbench.worker.training.batch import call_model
from workbench.worker.training.batch import channels_last as to_channels_last
from workbench.worker.training.guards import OutputCheck


def indexed_batches(
    split, batch_size: int, device: torch.device, *, rank: int = 0, world: int = 1
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(indices within the split (host), normalised x, y) in split order, no augmentation; with world > 1,
    this rank's share of the batches. Gathered where the dataset keeps its batches for `device` (on it,
    staged, host)."""
    return split.indexed_batches(batch_size, device=device, rank=rank, world=world)


def _forward(model: nn.Module, x, amp: str, device: torch.device, channels_last: bool) -> torch.Tensor:
    if channels_last:
        x = to_channels_last(x)
    with autocast(amp, device):
        return logits_of(call_model(model, x)).float()


@torch.no_grad()
def evaluate_sums(
    model: nn.Module,
    split,
    loss_fn: LossFn,
    *,
    device: torch.device,
    amp: str = "none",
    channels_last: bool = False,
    batch_size: int = 256,
    rank: int = 0,
    world: int = 1,
    check_stop: Callable[[], None] | None = None,
    output_check: OutputCheck | None = None,
    objective=None,
) -> torch.Tensor:
    """[loss summed over samples, the objective's statistics (without one: the correct count), sample count]
    as one float64 device tensor (for all_reduce)."""
    was_training = model.training
    model.eval()
    width = objective.stat_count() + 2 if objective is not None else 3
    sums = torch.zeros(width, dtype=torch.float64, device=device)
    try:
        for _, x, y in indexed_batches(split, batch_size, device, rank=rank, world=world):
            if check_stop is not None:
                check_stop()
            scores = _forward(model, x, amp, device, channels_last)
            if output_check is not None:
                output_check.scores(scores, y, where="validation")
                sums[0] += output_check.loss(loss_fn, scores, y, where="validation").double() * y.shape[0]
            else:
                sums[0] += loss_fn(scores, y).double() * y.shape[0]
            if objective is not None:
                sums[1:-1] += objective.batch_stats(scores, y).double().reshape(-1)
            else:
                sums[1] += (scores.argmax(dim=1) == y).sum()
            sums[-1] += y.shape[0]
    finally:
        model.train(was_training)
    return sums


def evaluate_test(
    model: nn.Module,
    split,
    classes: list[str],
    *,
    device: torch.device,
    amp: str = "none",
    channels_last: bool = False,
    batch_size: int = 256,
    check_stop: Callable[[], None] | None = None,
    output_check: OutputCheck | None = None,
) -> dict:
    """Classification's evaluation.json content for `split`: classes, confusion matrix (rows: true class),
    per-class accuracy (None for a class with no samples), accuracy, the most confidently wrong samples."""
    from workbench.worker.objectives import build_objective

    objective = build_objective("classification", num_outputs=len(classes))
    return evaluate_split(
        model,
        split,
        objective,
        classes,
        device=device,
        amp=amp,
        channels_last=channels_last,
        batch_size=batch_size,
        check_stop=check_stop,
        output_check=output_check,
    )


@torch.no_grad()
def evaluate_split(
    model: nn.Module,
    split,
    objective,
    classes: list[str],
    *,
    device: torch.device,
    amp: str = "none",
    channels_last: bool = False,
    batch_size: int = 256,
    check_stop: Callable[[], None] | None = None,
    output_check=None,
) -> dict:
    """The evaluation.json content for `split` under any task: the objective's test evaluator fed every batch
    in split order (classification: the confusion matrix, per-class accuracy and worst samples)."""
    evaluator = objective.test_evaluator(split.name, list(classes))
    was_training = model.training
    model.eval()
    try:
        for indices, x, y in indexed_batches(split, batch_size, device):
            if check_stop is not None:
                check_stop()
            scores = _forward(model, x, amp, device, channels_last)
            if output_check is not None:
                output_check.scores(scores, y, where="test")
            # a custom task's evaluator may not derive from TestEvaluator
            if hasattr(evaluator, "add_inputs"):
                evaluator.add_inputs(x)
            evaluator.add(indices, scores, y)
    finally:
        model.train(was_training)
    result = evaluator.result()
    _attach_inputs(split, result)
    return result


def _attach_inputs(split, result: dict) -> None:
    """The worst samples' inputs when they are not images (token ids and text, signals, rows): the view shows
    them from evaluation.json alone. Reading them is the user's code: a failure leaves the evaluation as it
    is."""
    from workbench.errors import JobError
    from workbench.worker.data.sequence_views import attach_inputs

    try:
        attach_inputs(split, result)
    except (JobError, RuntimeError, ValueError, TypeError, IndexError, KeyError):
        pass


def write_evaluation(path: Path, evaluation: dict) -> None:
    clean = dict(evaluation)
    if isinstance(clean.get("test_accuracy"), float) and math.isnan(clean["test_accuracy"]):
        clean["test_accuracy"] = None  # JSON has no NaN
    atomic_write_json(path, clean)
