"""A LightningModule's own validation as quantize's measure: Trainer.validate runs its validation_step over
its val batches with the network a rung measures (the float module, or the simulated copy) in place of its
forward, and the module's monitor ("val_acc") is the rung's value. Worker side; never Qt.
"""

from __future__ import annotations

import contextlib
import math

from workbench.errors import JobError, WorkbenchError
from workbench.results import as_dict
from workbench.worker.lightning import is_lightning_name, require_lightning
from workbench.worker.lightning.monitor import Monitor, from_callbacks, from_logged
from workbench.worker.lightning.output import lightning_messages
from workbench.worker.lightning.settings import accelerator
from workbench.worker.lightning.user_classes import load_datamodule, overrides, parse_name
from workbench.worker.models.user_code import _describe, _where

INDEX_SUFFIX = "/dataloader_idx_"  # Lightning's key suffix when a module has several val dataloaders
# Lightning's note, at each validate after the first, that configure_callbacks replaces the last one's
QUIET = ("returned in `LightningModule.configure_callbacks` will override",)


class OwnValidation:
    """The module's validation with any network in its place. Trainer.validate rather than calling
    validation_step by hand: it runs the module's own hooks (batch transfer, on_validation_epoch_end, where
    torchmetrics are computed) and reduces `self.log` values exactly as the training run's validation did, so
    the float rung equals what the run logged; a hand-made loop would have to re-implement that reduction."""

    def __init__(self, module, datamodule, device, log, *, name: str = "", root: str | None = None):
        self.module, self.datamodule, self.device, self.root = module, datamodule, device, root
        self.name = name  # the model.name that names the user's file in an error from its validation_step
        self.monitor: Monitor | None = None
        self.active = True  # False once it fell back to the workbench's own measure
        self._trainer = None
        said: set[str] = set()

        def log_once(text: str, level: str = "info") -> None:  # Lightning repeats its tips at every validate
            if text not in said and not any(part in text for part in QUIET):
                said.add(text)
                log(text, level)

        self.log = log_once

    @property
    def metric(self) -> dict | None:
        """The ladder's metric block for the monitor: {"name": "val_acc", "label": "val_acc", ...}."""
        if self.monitor is None:
            return None
        return {
            "name": self.monitor.name,
            "label": self.monitor.name,
            "split": "val",
            "higher_is_better": bool(self.monitor.higher_is_better),
        }

    def measure(self, network, result: dict, check_stop=None) -> dict:
        """`result` (the workbench's own measure of `network`) with "accuracy" the module's monitor, "metrics"
        everything it logged and "loss" its val_loss where it logs one; `result` as it is once fallen back."""
        if not self.active:
            return result
        logged = self.run(network, check_stop)
        if self.monitor is None:
            self.monitor = self._choose(logged)
            if self.monitor is None:
                return result
        value = logged.get(self.monitor.name) if logged else None
        if value is None:
            self.log(f"{self.monitor.name} was not logged by this validation; the step reads NaN", "warning")
            value = math.nan
        loss = as_dict(logged).get("val_loss")
        return {
            **result,
            "accuracy": value,
            "loss": result["loss"] if loss is None else loss,
            "metrics": dict(logged or {}),
        }

    def value(self, network, check_stop=None) -> float:
        """The monitor's value alone, for the sweeps (after measure() chose the monitor)."""
        logged = self.run(network, check_stop) or {}
        return logged.get(self.monitor.name, math.nan)

    def _choose(self, logged: dict | None) -> Monitor | None:
        """The monitor of the module's ModelCheckpoint (or EarlyStopping), else its first val_* metric; None
        (and the fallback said in the log) where validation logged neither or never ran the network."""
        name = type(self.module).__name__
        if logged is None:
            return self._fall_back(
                f"{name}.validation_step never calls the module itself (self(x)), so the "
                "quantized copy cannot be put in its place"
            )
        monitor = from_callbacks(self._trainer.callbacks)
        if monitor is None or monitor.name not in logged:
            monitor = from_logged(logged)
        if monitor is None:
            return self._fall_back(f"{name}.validation_step logs no monitor (no val_* metric)")
        self.log(
            f"measuring {name}'s own monitor {monitor.name} "
            f"({'higher' if monitor.higher_is_better else 'lower'} is better, from {monitor.source}) at "
            "every step: its validation_step over its val batches with the step's network in place"
        )
        return monitor

    def _fall_back(self, why: str) -> None:
        self.active = False
        self.log(
            f"{why}: every step is measured by the workbench's own measure on the held-out batches instead",
            "warning",
        )
        return None

    def run(self, network, check_stop=None) -> dict[str, float] | None:
        """Every value the module logs over its val batches with `network` run for its forward; None when
        validation_step never called forward, so `network` did not run."""
        module, lightning = self.module, require_lightning()
        if self._trainer is None:
            kind, devices = accelerator(self.device)
            self._trainer = lightning.Trainer(
                accelerator=kind,
                devices=devices,
                precision="32-true",
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                inference_mode=False,
                num_sanity_val_steps=0,
                default_root_dir=self.root,
            )
        calls = [0]
        data = {"datamodule": self.datamodule} if self.datamodule is not None else {}
        was_training = module.training
        try:
            with lightning_messages(self.log), _forward_through(module, network, calls, check_stop):
                results = self._trainer.validate(module, verbose=False, **data)
        except WorkbenchError:
            raise
        except Exception as exc:
            where = _where(exc, parse_name(self.name, "model.name", "LightningModule")[0])
            first = (_describe(exc).splitlines() or [""])[0][:400]
            raise JobError(f"{where}: {first} (during Lightning validation of a quantize step)") from None
        finally:
            module.trainer = None  # the later steps deep-copy the module: no Trainer in the copy
            module.train(was_training)
        return _flatten(results) if calls[0] else None


def _flatten(results) -> dict[str, float]:
    """{name: value} of trainer.validate's list of dicts; the first dataloader's where there are several."""
    logged: dict[str, float] = {}
    for entry in results or []:
        for key, value in entry.items():
            name = key.split(INDEX_SUFFIX)[0]
            with contextlib.suppress(TypeError, ValueError):
                logged.setdefault(name, float(value))
    return logged


@contextlib.contextmanager
def _forward_through(module, network, calls: list, check_stop):
    """The module's forward calls `network` (the module's own forward where it is the module) while inside."""
    own = module.__dict__.get("forward")
    original = module.forward

    def forward(*args, **kwargs):
        calls[0] += 1
        if check_stop is not None:
            check_stop()
        return original(*args, **kwargs) if network is module else network(*args, **kwargs)

    module.forward = forward
    try:
        yield
    finally:
        if own is None:
            del module.forward
        else:
            module.forward = own


def own_validation(module, train, data_spec, device, log, root: str | None = None) -> OwnValidation | None:
    """The module's own validation where the run trained a LightningModule (train.model.name lightning:) that
    has a validation_step and val batches (its DataModule's, or its own val_dataloader); else None, logged."""
    if train is None or not is_lightning_name(train.model.name):
        return None
    lightning = require_lightning()
    name = type(module).__name__
    datamodule = None
    if data_spec is not None and is_lightning_name(data_spec.name):
        datamodule = load_datamodule(data_spec.name, data_spec.args, lambda *a: None)  # announced when loaded
        has_loader = overrides(datamodule, "val_dataloader", lightning.LightningDataModule)
    else:
        has_loader = overrides(module, "val_dataloader", lightning.LightningModule)
    if not overrides(module, "validation_step", lightning.LightningModule) or not has_loader:
        log(
            f"{name} has no validation_step or no val_dataloader: every step is measured by the workbench's "
            "own measure on the held-out batches"
        )
        return None
    return OwnValidation(module, datamodule, device, log, name=train.model.name, root=root)
