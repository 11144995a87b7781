"""Guards that turn a model's or a run's misbehaviour into a clear JobError: class scores of the wrong shape
(and loss failures such as "Target 8 is out of bounds", read as the label and the batch that hold it), labels
outside the classes named by their sample (a user's dataset, checked as each batch arrives), and a training
loss that diverges without becoming NaN.

Nothing here reads a device tensor back except on the way to an error. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from workbench.errors import JobError
from workbench.worker.data.user_labels import classes_text, is_label_batch
from workbench.worker.objectives.losses import LossFn

# A classification loss (cross_entropy, nll, mse on one-hot targets) starts near ln(num_classes) or below, a
# few units, and a run that learns only lowers it. A mean loss a million times the first one read back has
# blown up:
# the weights are on their way to inf and NaN, yet they can stay finite for a long time (logits of 1e20 give a
# finite loss of 1e20), and such a run used to finish as "done". The reference is at least 1 so that a run
# which starts near zero (a fine-tune of a model that already fits) is not stopped by an ordinary bump; the
# absolute ceiling also catches a run that is already past it at the first read-back. The loop compares at its
# read-backs only (every log_every_steps), so the check adds no device sync.
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
        path, _, attr = name[len("file:") :].rpartition(":")
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
                "model.num_classes). Check the model's forward(): its output must keep the batch dimension "
                "first for every batch size (the last batch of an epoch is often smaller) and end in "
                f"{self.num_classes} scores."
            )

    def loss(
        self, loss_fn: LossFn, scores: torch.Tensor, y: torch.Tensor, *, where: str = "training"
    ) -> torch.Tensor:
        """loss_fn(scores, y), with torch's terse failures (e.g. "Target 8 is out of bounds") explained."""
        try:
            return loss_fn(scores, y)
        except torch.OutOfMemoryError:
            raise  # memory, not the model's output: leave it to the handlers that know about memory
        except (IndexError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            self._bad_label(scores, y, where, f"{type(exc).__name__}: {first}", exc)
            raise JobError(
                f"the loss cannot be computed from the class scores of {model_title(self.model_name)}: "
                f"{type(exc).__name__}: {first}. The model returned shape {_shape(scores.shape)} for a batch "
                f"of {int(y.shape[0])} samples; the loss needs {_shape(self.expected(int(y.shape[0])))}, "
                "i.e. (batch, model.num_classes), and labels below "
                f"model.num_classes={self.num_classes}."
            ) from exc

    def _bad_label(self, scores: torch.Tensor, y: torch.Tensor, where: str, torch_said: str, exc) -> None:
        """A JobError naming the label outside 0..num_classes-1 that made the loss fail, and its place in the
        batch. Only a host tensor is read: after a CUDA assert the device can no longer be read at all."""
        if y.device.type != "cpu" or not is_label_batch(y):
            return
        outside = (y < 0) | (y >= self.num_classes)
        if not bool(outside.any()):
            return
        position = int(outside.nonzero()[0])
        batch = int(y.shape[0])
        raise JobError(
            f"a {where} batch of {batch} samples has label {int(y[position])} (position {position} in the "
            f"batch), outside {classes_text(self.num_classes)} (model.num_classes={self.num_classes}), so "
            f"the loss cannot use it ({torch_said}); fix the dataset's labels or model.num_classes. The "
            f"class scores of {model_title(self.model_name)} had the expected shape {_shape(scores.shape)} "
            f"for a batch of {batch} samples."
        ) from exc


class ObjectiveCheck:
    """The same two checks for a task other than classification: the objective knows what its outputs must
    look like (a value per target, a score map per pixel, a logit per label)."""

    def __init__(self, model_name: str, objective):
        self.model_name = model_name
        self.objective = objective

    def scores(self, scores: torch.Tensor, y: torch.Tensor, *, where: str = "training") -> None:
        self.objective.check_output(scores, y, where)

    def loss(
        self, loss_fn: LossFn, scores: torch.Tensor, y: torch.Tensor, *, where: str = "training"
    ) -> torch.Tensor:
        try:
            return loss_fn(scores, y)
        except torch.OutOfMemoryError:
            raise
        except (IndexError, RuntimeError, ValueError) as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            raise JobError(
                f"the {self.objective.loss_name} loss of task {self.objective.task} cannot be computed from "
                f"the output of {model_title(self.model_name)}: {type(exc).__name__}: {first}. The model "
                f"returned shape {_shape(scores.shape)}; the targets are {y.dtype} of shape "
                f"{_shape(y.shape)}."
            ) from exc


def expect_labels(dataset, count: int) -> None:
    """Tell a user's dataset the labels a classification run allows (0..count-1): a label outside them is then
    named by its sample as its batch arrives, before the loss or a CUDA assert meets it. The built-in sets'
    labels are their own classes."""
    expect = getattr(dataset, "expect_labels", None)
    if expect is not None and count > 0:
        expect(count)


def output_check_for(spec, objective, dataset) -> OutputCheck | ObjectiveCheck:
    """Classification keeps its own check (and messages), and tells a user's dataset its label range; every
    other task checks through its objective."""
    if objective.task == "classification":
        count = spec.model.num_classes or len(dataset.classes)
        expect_labels(dataset, count)
        return OutputCheck(spec.model.name, count)
    return ObjectiveCheck(spec.model.name, objective)
