"""The workbench side of a Lightning run: a Logger that streams every value the module logs with `self.log`
into the job's metrics (the run's database and the Training tab, with the tab's names beside the module's
own), and a Callback for progress, cancel, the epoch's log line, the monitor's best value, best.pt and early
stopping. Imports lightning: load it only on the Lightning route.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger

from workbench.worker.checkpoints import save_state_dict
from workbench.worker.lightning.monitor import Monitor, from_callbacks, from_logged

# The Training tab's curves key on the built-in loop's names: a module's usual names are also written under
# them.
TAB_NAMES = {
    "train_loss": "train/loss",
    "train_loss_step": "train/loss",
    "train_loss_epoch": "epoch/train_loss",
    "val_loss": "val/loss",
    "train_acc": "train/acc",
    "train_acc_step": "train/acc",
    "train_acc_epoch": "epoch/train_acc",
    "val_acc": "val/acc",
}
PROGRESS_EVERY = 0.1  # seconds: the loss in the progress text is read back from the device at most this often


class Cancelled(Exception):
    """Raised from a hook when the job was asked to stop: the Trainer tears down and fit() re-raises it."""


class Diverged(Exception):
    """Raised from a hook when the training loss is NaN or infinite: `what` ("NaN"), `where` ("by epoch 1,
    step 3")."""

    def __init__(self, what: str, where: str):
        super().__init__(f"{what} {where}")
        self.what, self.where = what, where


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return number if math.isfinite(number) else None


def _raw(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        return None


class MetricsLogger(Logger):
    """Lightning's logged values -> ctx.metrics at the optimiser step Lightning gives (the built-in loop's x
    axis)."""

    def __init__(self, report, trainer_ref, save_dir):
        super().__init__()
        self._report = report
        self._trainer_ref = trainer_ref  # () -> the Trainer, for the learning rate
        self._save_dir = str(save_dir)

    # A module's own ModelCheckpoint without a dirpath writes to <save_dir>/<name>/<version>/checkpoints: with
    # these, the run's own checkpoints folder.
    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass  # the run's spec.toml is the record of what was asked

    def log_metrics(self, metrics: dict, step: int | None = None) -> None:
        # Lightning adds a 0-based "epoch" to every record; the run's "epoch" column counts finished epochs,
        # and the Callback writes it at each epoch's end.
        values = {name: value for name, value in metrics.items() if name != "epoch"}
        for name, alias in TAB_NAMES.items():
            if name in values and alias not in values:
                values[alias] = values[name]
        trainer = self._trainer_ref()
        # the Training tab's learning-rate plot
        if trainer is not None and trainer.training and trainer.optimizers:
            values.setdefault("lr", trainer.optimizers[0].param_groups[0]["lr"])
        if values:
            self._report.metrics(int(step or 0), values)


class WorkbenchCallback(Callback):
    """Progress, cancel, the epoch log line, the monitor and its best checkpoint, early stopping."""

    def __init__(
        self, ctx, *, epochs: int, best_path: Path | None, patience: int, own_checkpoint, task: str = "auto"
    ):
        self.ctx = ctx
        self.task = task  # the spec's: detection checks the first training batch's boxes and labels
        self.epochs = epochs
        self.best_path = best_path  # None: keep_best is off
        self.patience = patience
        # the route's ModelCheckpoint: its (absent) monitor is not the module's
        self.own_checkpoint = own_checkpoint
        self.monitor: Monitor | None = None
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.bad_epochs = 0
        self.early_stopped = False
        self.total_steps = 0
        self.last_metrics: dict = {}
        self._last_progress = 0.0
        self.saved_epoch = 0  # epochs that checkpoints/last.ckpt holds
        self.resumed_from: int | None = None
        self.input_shape: tuple[int, ...] | None = None  # one sample's input, from the first training batch
        self.detection_batches = False  # the first training batch is (images, targets of boxes and labels)
        # batches whose training_step returned None: Lightning skips them with a warning
        self.skipped_steps = 0
        self.steps_seen = 0
        # on the loss's device: every loss so far finite (no read-back)
        self._finite: torch.Tensor | None = None

    # -- kept in Lightning's checkpoint, so a resumed run knows its best value and its patience -------
    def state_dict(self) -> dict:
        return {
            "best": self.best,
            "best_epoch": self.best_epoch,
            "bad_epochs": self.bad_epochs,
            "monitor": self.monitor.name if self.monitor else None,
            "higher_is_better": self.monitor.higher_is_better if self.monitor else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.best, self.best_epoch, self.bad_epochs = (
            state.get("best"),
            state.get("best_epoch"),
            state.get("bad_epochs", 0),
        )
        if state.get("monitor") and self.monitor is None:
            self.monitor = Monitor(state["monitor"], bool(state.get("higher_is_better")), "the resumed run")

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.saved_epoch = trainer.current_epoch + 1

    # -- start ---------------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit" and self.monitor is None:
            self.monitor = from_callbacks(trainer.callbacks, exclude=(self.own_checkpoint,))
            if self.monitor is not None:
                self._say_monitor()

    def on_train_start(self, trainer, pl_module) -> None:
        if self.ctx.resuming:
            self.resumed_from = self.saved_epoch = trainer.current_epoch
            self.ctx.run.log_event(
                "resume", {"epoch": trainer.current_epoch, "global_step": trainer.global_step}
            )
            self.ctx.log(
                f"resuming after epoch {trainer.current_epoch} (step {trainer.global_step}) of {self.epochs}"
            )
        try:
            self.total_steps = int(trainer.estimated_stepping_batches)
        except Exception:  # an iterable dataset without a length: progress counts steps with no total
            self.total_steps = 0
        self.ctx.progress(
            trainer.global_step,
            self.total_steps or None,
            f"epoch {trainer.current_epoch + 1}/{self.epochs}",
            force=True,
        )

    def _say_monitor(self) -> None:
        monitor = self.monitor
        self.ctx.log(
            f"monitor: {monitor.name} ({'higher' if monitor.higher_is_better else 'lower'} is better), "
            f"from {monitor.source}"
        )

    # -- steps ---------------------------------------------------------------------------------------
    def _check_stop(self, trainer) -> None:
        if self.ctx.should_stop():
            raise Cancelled(trainer.current_epoch)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._check_stop(trainer)
        if self.input_shape is None:
            from workbench.worker.lightning.detection import check_detection_batch, is_detection_batch

            first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
            self.input_shape = tuple(first.shape[1:]) if isinstance(first, torch.Tensor) else ()
            self.detection_batches = is_detection_batch(batch)
            if self.task == "detection" or (self.task == "auto" and self.detection_batches):
                # before the module's own step sees it: what is wrong with the batch, in one line
                check_detection_batch(batch, f"training batch {batch_idx}")

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._check_stop(trainer)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._check_stop(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.steps_seen += 1
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            finite = torch.isfinite(loss.detach()).all()
            self._finite = finite if self._finite is None else self._finite & finite
        elif loss is None:
            self.skipped_steps += 1
        now = time.monotonic()
        if now - self._last_progress < PROGRESS_EVERY:
            return
        self._last_progress = now
        self.check_finite(trainer, loss)
        loss = _number(loss) if isinstance(loss, torch.Tensor) else None  # one device read, 10 times a second
        text = f"epoch {trainer.current_epoch + 1}/{self.epochs}" + (
            f" · loss {loss:.4f}" if loss is not None else ""
        )
        self.ctx.progress(trainer.global_step, self.total_steps or None, text)

    def check_finite(self, trainer, loss=None) -> None:
        """Diverged when a loss since the last check was NaN or infinite: read at the progress reads and each
        epoch's end, as the built-in loop reads its losses back, so a NaN run ends diverged instead of done
        with NaN weights."""
        if self._finite is None or bool(self._finite):
            return
        value = _raw(loss)
        what = "infinite" if value is not None and math.isinf(value) else "NaN"
        raise Diverged(what, f"by epoch {trainer.current_epoch + 1}, step {trainer.global_step}")

    # -- epoch end -----------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.check_finite(trainer)
        epoch = trainer.current_epoch + 1
        logged = {name: _number(value) for name, value in trainer.callback_metrics.items()}
        self.last_metrics = {name: value for name, value in logged.items() if not name.endswith("_step")}
        self.ctx.metrics(trainer.global_step, {"epoch": epoch})
        shown = " · ".join(
            f"{name} {value:.4f}" for name, value in self.last_metrics.items() if value is not None
        )
        self.ctx.log(f"epoch {epoch}/{self.epochs}: {shown or 'nothing logged'}")
        self.ctx.progress(
            trainer.global_step, self.total_steps or None, f"epoch {epoch}/{self.epochs}", force=True
        )
        if self.monitor is None:
            self.monitor = from_logged(trainer.callback_metrics)
            if self.monitor is None:
                return
            self._say_monitor()
        value = logged.get(self.monitor.name)
        if value is None:
            return
        if self.monitor.improves(value, self.best):
            self.best, self.best_epoch, self.bad_epochs = value, epoch, 0
            if self.best_path is not None:
                save_state_dict(
                    pl_module.state_dict(), self.best_path, name="checkpoints/" + self.best_path.name
                )
        else:
            self.bad_epochs += 1
            if self.patience and self.bad_epochs >= self.patience and epoch < self.epochs:
                self.early_stopped = True
                trainer.should_stop = True  # Lightning's own way to end fit() after this epoch
                self.ctx.log(
                    f"early stop after epoch {epoch}: {self.monitor.name} has not improved for "
                    f"{self.patience} epoch(s) (best {self.best:.4f} at epoch {self.best_epoch})"
                )
