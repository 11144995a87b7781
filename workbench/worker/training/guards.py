"""Guards that turn a model's or a run's misbehaviour into a clear JobError: class scores of the wrong shape (and
loss failures such as "Target 8 is out of bounds"), and a training loss that diverges without becoming NaN.

Nothing here reads a device tensor back except on the way to an error. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.errors import JobError
from workbench.worker.training.losses import LossFn

# A classification loss (cross_entropy, nll, mse on one-hot targets) starts near ln(num_classes) or below, a few
# units, and a run that learns only lowers it. A mean loss a million times the first one read back has blown up:
# the weights are on their way to inf and NaN, yet they can stay finite for a long time (logits of 1e20 give a
# finite loss of 1e20), and such a run used to finish as "done". The reference is at least 1 so that a run which
# starts near zero (a fine-tune of a model that already fits) is not stopped by an ordinary bump; the absolute
# ceiling also catches a run that is already past it at the first read-back. The loop compares at its read-backs
# only (every log_every_steps), so the check adds no device sync.
DIVERGED_FACTOR = 1e6
DIVERGED_CEILING = 1e8


def divergence_limit(first_loss: float | None) -> float:
    """The mean interval loss above which training counts as diverged, given the first mean loss read back."""
    if first_loss is None:
        return DIVERGED_CEILING
    return min(DIVERGED_CEILING, DIVERGED_FACTOR * max(first_loss, 1.0))


def model_title(name: str) -> str:
    """How a message names a model: `file:dir/net.py:Net` becomes "model Net from dir/net.py"."""
    if name.startswith("file:"):
        path, _, attr = name[len("file:"):].rpartition(":")
        return f"model {attr} from {path}"
    return f"model {name}"


def _shape(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


class OutputCheck:
    """Checks each batch's class scores against (batch, num_classes) before the loss sees them.

    Shapes are tensor metadata, so the check is free of device syncs and cheap enough to run on every batch: a
    model that is wrong only for some batch sizes (the smaller last batch, say) is caught at that batch.
    """

    def __init__(self, model_name: str, num_classes: int):
        self.model_name = model_name
        self.num_classes = num_classes

    def expected(self, batch: int) -> tuple[int, int]:
        return batch, self.num_classes

    def scores(self, scores: torch.Tensor, y: torch.Tensor, *, where: str = "training") -> None:
        batch = int(y.shape[0])
        if tuple(scores.shape) != self.expected(batch):
            raise JobError(
                f"{model_title(self.model_name)} returned class scores of shape {_shape(scores.shape)} for a "
                f"{where} batch of {batch} samples; expected {_shape(self.expected(batch))}, i.e. (batch, "
                f"model.num_classes). Check the model's forward(): its output must keep the batch dimension first "
                f"for every batch size (the last batch of an epoch is often smaller) and end in "
                f"{self.num_classes} scores.")

    def loss(self, loss_fn: LossFn, scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """loss_fn(scores, y), with torch's terse failures (e.g. "Target 8 is out of bounds") explained."""
        try:
            return loss_fn(scores, y)
        except torch.OutOfMemoryError:
            raise  # memory, not the model's output: leave it to the handlers that know about memory
        except (IndexError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise JobError(
                f"the loss cannot be computed from the class scores of {model_title(self.model_name)}: "
                f"{type(exc).__name__}: {first}. The model returned shape {_shape(scores.shape)} for a batch of "
                f"{int(y.shape[0])} samples; the loss needs {_shape(self.expected(int(y.shape[0])))}, i.e. (batch, "
                f"model.num_classes), and labels below model.num_classes={self.num_classes}.") from exc


class ObjectiveCheck:
    """The same two checks for a task other than classification: the objective knows what its outputs must look
    like (a value per target, a score map per pixel, a logit per label)."""

    def __init__(self, model_name: str, objective):
        self.model_name = model_name
        self.objective = objective

    def scores(self, scores: torch.Tensor, y: torch.Tensor, *, where: str = "training") -> None:
        self.objective.check_output(scores, y, where)

    def loss(self, loss_fn: LossFn, scores: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        try:
            return loss_fn(scores, y)
        except torch.OutOfMemoryError:
            raise
        except (IndexError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise JobError(
                f"the {self.objective.loss_name} loss of task {self.objective.task} cannot be computed from the "
                f"output of {model_title(self.model_name)}: {type(exc).__name__}: {first}. The model returned shape "
                f"{_shape(scores.shape)}; the targets are {y.dtype} of shape {_shape(y.shape)}.") from exc


def output_check_for(spec, objective, dataset) -> OutputCheck | ObjectiveCheck:
    """Classification keeps its own check (and messages); every other task checks through its objective."""
    if objective.task == "classification":
        return OutputCheck(spec.model.name, spec.model.num_classes or len(dataset.classes))
    return ObjectiveCheck(spec.model.name, objective)
