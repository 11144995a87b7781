"""The custom task: the user's loss `fn(outputs, target) -> scalar tensor` (loss=file:<path.py>:<fn>), their
metrics `fn(outputs, target) -> {name: number}` (metrics=file:...), and the monitor they name with its
direction.

`outputs` is the model's output as the engine reads every model's (the tensor; a tuple's first item, a dict's
"out"). Metrics aggregate as Lightning's self.log(on_epoch=True) does by default: each batch's value weighted
by the batch's sample count, summed over batches and ranks, divided by the samples at the end. Worker side;
never imports Qt.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.worker.models.user_code import _describe, _where, import_user_file
from workbench.worker.objectives.base import Objective, TestEvaluator, as_floats, json_safe, ratio

# The statistics vector has a fixed length (the loop sizes its sums before the first batch, when the metric
# names are not known yet): [samples, samples with a loss, loss sum, one sum per metric], with room for this
# many metrics.
MAX_METRICS = 32
_FIXED = 3

# A loaded user function per (file, its mtime and size, function): the objective is built several times per
# run (the route's log line, the trainer, the test split, the result) and the file should run once, not four
# times.
_LOADED: dict[tuple[str, int, int, str], Callable] = {}


class UserFunction:
    """A function from the user's file, called with errors that name the field, the file, the function and
    line."""

    def __init__(self, field: str, ref: str):
        self.field = field
        # rpartition: a Windows path has its own colon
        path_text, _, name = ref[len("file:") :].rpartition(":")
        if not ref.startswith("file:") or not path_text or not name:
            raise JobError(f"{field}: {ref!r} must be file:<path.py>:<function>")
        self.path, self.name = Path(path_text).expanduser().absolute(), name
        self.fn = self._load()

    def _load(self) -> Callable:
        try:
            stat = self.path.stat()
        except OSError:
            raise JobError(f"{self.field}: the file {self.path} does not exist") from None
        key = (str(self.path), stat.st_mtime_ns, stat.st_size, self.name)
        if key in _LOADED:
            return _LOADED[key]
        try:
            module = import_user_file(self.path)
        except JobError as exc:  # its message speaks of a model file; this one is the loss's or the metrics'
            raise JobError(f"{self.field}: {str(exc).replace('the model file', 'the file')}") from None
        fn = getattr(module, self.name, None)
        if fn is None or not callable(fn):
            found = sorted(
                n
                for n, v in vars(module).items()
                if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
            )
            what = "is not a function" if fn is not None else "is not defined there"
            raise JobError(
                f"{self.field}: {self.name!r} in {self.path} {what}; it defines: "
                f"{', '.join(found) or 'nothing callable'}"
            )
        _LOADED[key] = fn
        return fn

    def title(self) -> str:
        return f"{self.name} from {self.path}"

    def __call__(self, outputs, target):
        try:
            return self.fn(outputs, target)
        except (torch.OutOfMemoryError, JobError):
            raise  # memory is for the handlers that know about memory; a JobError already says what is wrong
        except Exception as exc:
            raise JobError(
                f"{_where(exc, self.path)}: {_describe(exc)} (in {self.field} function {self.title()})"
            ) from None


class CustomObjective(Objective):
    """The user's loss and metrics; monitor `loss` (the validation loss) unless the spec names a metric."""

    task = "custom"

    def __init__(
        self,
        *,
        loss_name: str,
        num_outputs: int = 0,
        label_smoothing: float = 0.0,
        metrics: str = "",
        monitor: str = "",
        monitor_mode: str = "auto",
    ):
        self.loss_fn = UserFunction("loss", loss_name)
        self.metrics_fn = UserFunction("metrics", metrics) if metrics else None
        super().__init__(
            loss_name=self.loss_fn.name, num_outputs=num_outputs, label_smoothing=label_smoothing
        )
        self.monitor = monitor.strip() or "loss"
        if monitor_mode not in ("auto", "max", "min"):
            raise JobError(f"monitor_mode: {monitor_mode!r} is not allowed; choose one of: auto, max, min")
        if monitor_mode == "auto" and self.monitor != "loss":
            raise JobError(
                f"monitor_mode: auto cannot tell whether a higher or a lower {self.monitor} is better; "
                "set monitor_mode=max or monitor_mode=min"
            )
        self.monitor_label = self.monitor
        self.higher_is_better = monitor_mode == "max"
        self.names: list[str] | None = None  # the metric names, fixed by the first batch
        self._loss_checked = False

    # -- the loss ----------------------------------------------------------------------------------
    def stat_count(self) -> int:
        return _FIXED + MAX_METRICS

    def loss(self, scores, target: torch.Tensor) -> torch.Tensor:
        value = self.loss_fn(scores, target)
        where = f"loss function {self.loss_fn.title()}"
        if not isinstance(value, torch.Tensor):
            raise JobError(
                f"{where} returned a {type(value).__name__}; it must return a scalar tensor computed "
                "from the outputs (e.g. torch.nn.functional.mse_loss(outputs, target))"
            )
        if value.numel() != 1:
            raise JobError(
                f"{where} returned a tensor of shape {tuple(value.shape)}; it must return one number, "
                "a scalar tensor (take .mean() or .sum() of a per-sample loss)"
            )
        if not value.dtype.is_floating_point:
            raise JobError(
                f"{where} returned a tensor of dtype {str(value.dtype).removeprefix('torch.')}; it must "
                "return a floating-point tensor"
            )
        grad_wanted = torch.is_grad_enabled() and isinstance(scores, torch.Tensor) and scores.requires_grad
        if grad_wanted and not value.requires_grad:
            raise JobError(
                f"{where} returned a tensor with no gradient, so nothing can learn from it; compute it from "
                "the outputs with torch operations (no .item(), .detach(), .numpy() or torch.tensor(...))"
            )
        if not self._loss_checked:
            # Once, on the first batch (one read-back): a function that is NaN or inf from the start says so
            # here; a loss that turns NaN later is caught by the training loop's own guard at its read-backs.
            self._loss_checked = True
            number = float(value.detach().reshape(()))
            if not math.isfinite(number):
                raise JobError(
                    f"{where} returned {number} on the first batch; it must return a finite number"
                )
        return value.reshape(()).float()

    # -- batch statistics and metrics --------------------------------------------------------------
    def batch_stats(self, scores, target: torch.Tensor) -> torch.Tensor:
        # With monitor=loss, validation batches (evaluated under no_grad) carry the loss among the metrics, so
        # the loop finds its monitor there; a training step has just computed it, and is not made to compute
        # it twice.
        return self._stats(scores, target, with_loss=self.monitor == "loss" and not torch.is_grad_enabled())

    def _stats(self, scores, target: torch.Tensor, *, with_loss: bool) -> torch.Tensor:
        """[samples, samples with a loss, loss sum (when wanted: computed under no_grad), value * samples per
        metric, zeros for the unused metric slots]."""
        device = scores.device if isinstance(scores, torch.Tensor) else target.device
        samples = float(target.shape[0]) if isinstance(target, torch.Tensor) and target.dim() else 1.0
        stats = torch.zeros(self.stat_count(), dtype=torch.float64, device=device)
        stats[0] = samples
        with torch.no_grad():
            if with_loss:
                stats[1] = samples
                stats[2] = self.loss(scores, target).double() * samples
            if self.metrics_fn is not None:
                values = self._metric_values(scores, target, device)
                if values:
                    stats[_FIXED : _FIXED + len(values)] = torch.stack(values) * samples
        return stats

    def _metric_values(self, scores, target: torch.Tensor, device: torch.device) -> list[torch.Tensor]:
        """The metrics function's values for one batch, in the order of self.names, as float64 device scalars
        (a tensor value stays on the device: no read-back)."""
        where = f"metrics function {self.metrics_fn.title()}"
        returned = self.metrics_fn(scores, target)
        if not isinstance(returned, dict):
            raise JobError(
                f"{where} returned a {type(returned).__name__}; it must return a dict {{name: number}}"
            )
        names = list(returned)
        for name in names:
            if not isinstance(name, str) or not name.strip():
                raise JobError(f"{where} returned the key {name!r}; metric names must be non-empty strings")
        if self.names is None:
            self._first_names(names, where)
        elif names != self.names:
            missing = [n for n in self.names if n not in returned]
            extra = [n for n in names if n not in self.names]
            what = (
                (f"without {', '.join(missing)}" if missing else "")
                + (" and " if missing and extra else "")
                + (f"with {', '.join(extra)} as well" if extra else "")
            )
            raise JobError(
                f"{where} returned {what or 'its keys in another order'} for a later batch; it must return "
                f"the same names for every batch ({', '.join(self.names)})"
            )
        return [self._number(name, returned[name], where, device) for name in self.names]

    def _first_names(self, names: list[str], where: str) -> None:
        if "loss" in names:
            raise JobError(
                f"{where} returned the key 'loss', which names the training loss already; rename it"
            )
        if len(names) > MAX_METRICS:
            raise JobError(
                f"{where} returned {len(names)} metrics; at most {MAX_METRICS} are kept, so return fewer"
            )
        if self.monitor != "loss" and self.monitor not in names:
            raise JobError(
                f"monitor: {self.monitor!r} is not one of the metrics {where} returns: "
                f"{', '.join(names) or 'none'} (or loss)"
            )
        self.names = names

    @staticmethod
    def _number(name: str, value, where: str, device: torch.device) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            if value.numel() == 1 and value.dtype != torch.bool and not value.dtype.is_complex:
                return value.detach().reshape(()).to(device=device, dtype=torch.float64)
            problem = (
                f"a tensor of shape {tuple(value.shape)}"
                if value.numel() != 1
                else f"a {str(value.dtype).removeprefix('torch.')} tensor"
            )
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            return torch.tensor(float(value), dtype=torch.float64, device=device)
        else:
            problem = f"{type(value).__name__} {value!r}"[:120]
        raise JobError(
            f"{where} returned {problem} for the key {name!r}; each value must be a number (a float, "
            "an int or a one-element tensor)"
        )

    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        return self._metrics(as_floats(stats))

    def _metrics(self, sums: list[float]) -> dict[str, float]:
        """The metrics from summed statistics; "loss" where the batches carried it (validation, test)."""
        count = sums[0]
        out = {"loss": ratio(sums[2], sums[1])} if sums[1] else {}
        for i, name in enumerate(self.names or []):
            out[name] = ratio(sums[_FIXED + i], count)
        return out

    def check_output(self, scores, target: torch.Tensor, where: str = "training") -> None:
        """Any output goes: the user's loss decides what it can use (and its errors name their line)."""

    def test_evaluator(self, split_name: str, classes: list[str]) -> CustomEvaluator:
        return CustomEvaluator(self, split_name, classes)

    # -- how it reads --------------------------------------------------------------------------------
    def loss_text(self) -> str:
        return f"loss {self.loss_fn.title()}"

    def describe(self) -> str:
        metrics = (
            f"metrics {self.metrics_fn.title()}" if self.metrics_fn is not None else "no metrics function"
        )
        return (
            f"custom: {self.loss_text()}, {metrics}, monitor {self.monitor_text()} (your code, run with your "
            "permissions)"
        )


class CustomEvaluator(TestEvaluator):
    """The loss and the metrics over the whole split, aggregated as in training; the monitor's test value."""

    def __init__(self, objective: CustomObjective, split_name: str, classes: list[str]):
        super().__init__(objective, split_name, classes)
        self.sums: torch.Tensor | None = None

    def add(self, indices: torch.Tensor, scores, target: torch.Tensor) -> None:
        stats = self.objective._stats(scores, target, with_loss=True)
        self.sums = stats if self.sums is None else self.sums + stats

    def result(self) -> dict:
        sums = as_floats(self.sums) if self.sums is not None else [0.0] * self.objective.stat_count()
        out = self.common(self.objective._metrics(sums))
        out["samples"] = int(sums[0])
        return json_safe(out)
