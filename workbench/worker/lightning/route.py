"""One Lightning training job from spec to result: the user's LightningModule (and DataModule) trained by
Lightning's own Trainer, with the workbench's logger, callback, atomic checkpoints in the run folder, resume
through ckpt_path, cancel, the final weights as a plain state_dict and the result with the built-in route's
keys. Worker side; never imports Qt. Imported only when a spec names a lightning: model.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from workbench.errors import CheckpointError, JobCancelled, JobError, SpecError, WorkbenchError
from workbench.runs import atomic_write_text
from workbench.specs import DataSpec, TrainSpec
from workbench.worker.checkpoints import check_final_checkpoint, save_state_dict
from workbench.worker.devices import check_amp, describe, resolve_device
from workbench.worker.lightning import is_lightning_name, require_lightning
from workbench.worker.lightning.output import lightning_messages
from workbench.worker.lightning.settings import check_spec, ignored_fields, trainer_arguments
from workbench.worker.lightning.user_classes import load_datamodule, load_module, overrides
from workbench.worker.models import count_parameters
from workbench.worker.models.user_code import _describe, _where
from workbench.worker.training.state import BEST, FINAL

# Lightning's own checkpoint (loops, optimizers, callbacks); last.pt stays the built-in loop's
LAST_CKPT = "last.ckpt"


@dataclasses.dataclass
class _Parts:
    """What the steps share: the module and its data, the Trainer and the workbench's callback in it."""

    module: object
    datamodule: object | None
    trainer: object = None
    callback: object = None
    own_checkpoint: object = None


def run_lightning_training(spec: TrainSpec, ctx, board=None) -> dict:
    """The `train.model` task for a lightning: model: fit with Lightning's Trainer, test, return the
    result. `board` (tensorboard = true) gets the metrics through ctx like the built-in loop's; the spec and
    the graph here."""
    check_spec(spec)
    lightning = require_lightning()
    device = resolve_device(spec.device)
    check_amp(spec.amp, device)
    ignored = ignored_fields(spec)
    if ignored:
        ctx.log(
            f"{', '.join(ignored)} ignored: the LightningModule's configure_optimizers and training_step "
            "decide them",
            "warning",
        )
    if spec.layer_stats_every:  # the default: said once, in passing, not as a warning
        ctx.log(
            "layer statistics (layer_stats_every) are recorded by the workbench's own loop; Lightning's "
            "Trainer runs this one's steps, so the Layers view stays empty"
        )
    run = ctx.run
    run.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    run.artifacts_dir.mkdir(parents=True, exist_ok=True)
    lightning.seed_everything(spec.seed, workers=True, verbose=False)
    announced: set = set()  # files said to run with the user's permissions, once each
    parts = _Parts(load_module(spec.model.name, ctx.log, args=spec.model.args, announced=announced), None)
    parts.datamodule = _load_data(spec, parts.module, ctx, announced)
    resume = _resume_point(ctx)
    parameters = count_parameters(parts.module)
    ctx.log(
        f"training {spec.model.name} ({parameters['trainable']:,} of {parameters['total']:,} parameters "
        f"trainable) with Lightning {lightning.__version__}'s Trainer on {describe(device)}, "
        f"amp={spec.amp}"
    )
    with lightning_messages(ctx.log):  # Lightning's own lines and warnings into the job's log, not stderr
        _build_trainer(spec, ctx, device, parts)
        _fit(spec, ctx, parts, resume)
        warnings = _skipped_steps(ctx, parts)
        _save_last(ctx, parts)
        test = _test(ctx, parts)
        detection = _detection(spec, ctx, parts)
    save_state_dict(parts.module.state_dict(), run.checkpoints_dir / FINAL, name=f"checkpoints/{FINAL}")
    # done only if it loads
    check_final_checkpoint(run.checkpoints_dir, parts.module.state_dict(), (BEST, FINAL))
    spec = _record_input_shape(spec, ctx, parts.callback.input_shape)
    if board is not None:  # after training: only the first batch says what the module takes
        from workbench.worker.training.tensorboard import example_batch

        board.spec_text(spec.to_toml())
        board.graph(parts.module, example_batch(parts.module, tuple(parts.callback.input_shape or ())))
    result = _result(spec, ctx, device, parts, parameters=parameters, test=test, resumed=resume is not None)
    if detection is not None:
        _detection_result(result, spec, ctx, detection)
    if warnings:
        result["warnings"] = warnings
    return result


def _skipped_steps(ctx, parts: _Parts) -> list[str]:
    """A warning in the run's log and result when training_step returned None: Lightning skips such a step (no
    backward, no optimizer step) and says so once, in its own log; a run whose every step was skipped learnt
    nothing."""
    skipped, seen = parts.callback.skipped_steps, parts.callback.steps_seen
    if not skipped:
        return []
    name = type(parts.module).__name__
    text = (
        f"{name}.training_step returned None for {skipped} of {seen} training steps; Lightning skipped "
        "them (no backward, no optimizer step)"
    )
    text += ", so the weights never changed" if skipped == seen else ""
    ctx.log(text, "warning")
    return [text]


def _load_data(spec: TrainSpec, module, ctx, announced: set):
    """The DataModule dataset.name names, or None when the module brings its own train_dataloader."""
    lightning = require_lightning()
    if is_lightning_name(spec.dataset.name):
        return load_datamodule(spec.dataset.name, spec.dataset.args, ctx.log, announced=announced)
    if not overrides(module, "train_dataloader", lightning.LightningModule):
        raise JobError(
            f"dataset.name: {spec.dataset.name!r} is not a LightningDataModule, and "
            f"{type(module).__name__} has no train_dataloader of its own; set "
            "dataset.name=lightning:<path.py>:<LightningDataModule> or give the module a "
            "train_dataloader"
        )
    if spec.dataset != DataSpec():
        ctx.log(
            f"dataset.* ignored: {type(module).__name__} loads its own data (its train_dataloader)", "warning"
        )
    return None


def _resume_point(ctx):
    """checkpoints/last.ckpt when resuming (a JobError when there is none), else None."""
    if not ctx.resuming:
        return None
    path = ctx.run.checkpoints_dir / LAST_CKPT
    if not path.is_file():
        raise JobError(
            f"cannot resume: {path} does not exist (the run never finished an epoch, or it was "
            "not trained by Lightning); start a new run instead"
        )
    ctx.log(f"resuming from checkpoints/{LAST_CKPT}")
    return path


def check_resume_epochs(spec: TrainSpec, run_dir) -> None:
    """Before a resumed run is touched: a SpecError when `epochs` is below the epochs its last.ckpt has done,
    which Lightning would refuse only once the run is running again (with its own exception, and the run then
    failed)."""
    from pathlib import Path

    from workbench.worker.checkpoints import load_state_dict

    path = Path(run_dir) / "checkpoints" / LAST_CKPT
    if not path.is_file():
        return  # the job itself says there is nothing to resume from
    try:
        saved = load_state_dict(path)
    except CheckpointError:
        return  # the job itself says why it cannot be read
    done = _epochs_done(saved)
    if done is not None and spec.epochs < done:
        raise SpecError(
            f"epochs: {spec.epochs} is below the {done} epoch(s) this run has done (checkpoints/"
            f"{LAST_CKPT}); resume with epochs={done} or more, or start a new run"
        )


def _epochs_done(saved: dict) -> int | None:
    """The epochs a Lightning checkpoint has finished, as its Trainer counts them when it restores it."""
    try:
        return int(saved["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (KeyError, TypeError, ValueError):
        epoch = saved.get("epoch") if isinstance(saved, dict) else None
        return int(epoch) + 1 if isinstance(epoch, int) else None


def _build_trainer(spec: TrainSpec, ctx, device: torch.device, parts: _Parts) -> None:
    lightning = require_lightning()
    from lightning.pytorch.callbacks import ModelCheckpoint

    from workbench.worker.lightning.checkpoint_io import WorkbenchCheckpointIO
    from workbench.worker.lightning.stream import MetricsLogger, WorkbenchCallback

    run = ctx.run

    # The run's resume point: one file, replaced atomically at each checkpointed epoch's end.
    class RunCheckpoint(ModelCheckpoint):
        """A type of its own: Lightning drops Trainer callbacks whose exact type a module's
        configure_callbacks returns, and a module's own ModelCheckpoint must not remove the run's resume
        point."""

    parts.own_checkpoint = RunCheckpoint(
        dirpath=run.checkpoints_dir,
        filename=LAST_CKPT[: -len(".ckpt")],
        monitor=None,
        save_top_k=1,
        every_n_epochs=spec.checkpoint_every,
        save_on_train_epoch_end=True,
        enable_version_counter=False,
    )
    parts.callback = WorkbenchCallback(
        ctx,
        epochs=spec.epochs,
        best_path=run.checkpoints_dir / BEST if spec.keep_best else None,
        patience=spec.early_stop_patience,
        own_checkpoint=parts.own_checkpoint,
        task=spec.task,
    )
    holder: list = []
    parts.trainer = lightning.Trainer(
        **trainer_arguments(spec, device),
        default_root_dir=str(run.dir),
        logger=MetricsLogger(ctx, lambda: holder[0] if holder else None, run.dir),
        callbacks=[parts.callback, parts.own_checkpoint],
        plugins=[WorkbenchCheckpointIO(run.dir)],
    )
    holder.append(parts.trainer)


def _fit(spec: TrainSpec, ctx, parts: _Parts, resume) -> None:
    from workbench.worker.lightning.stream import Cancelled, Diverged

    trainer, callback = parts.trainer, parts.callback
    try:
        trainer.fit(parts.module, datamodule=parts.datamodule, ckpt_path=str(resume) if resume else None)
    except Cancelled:
        raise JobCancelled(
            f"cancelled by the user in epoch {trainer.current_epoch + 1}/{spec.epochs} at "
            f"step {trainer.global_step}; {_kept(ctx, callback)}"
        ) from None
    except Diverged as exc:  # the built-in loop's words for the same end
        raise JobError(
            f"the training loss became {exc.what} {exc.where}; training stopped and "
            f"{_kept(ctx, callback)}. Try a lower learning rate in configure_optimizers, "
            "amp=none, or gradient clipping (e.g. clip_grad_norm=1.0)."
        ) from None
    except SystemExit as exc:  # Lightning's SIGTERMException: the job is being stopped from outside
        if ctx.should_stop() or type(exc).__name__ == "SIGTERMException":
            raise JobCancelled(
                f"stopped (SIGTERM) in epoch {trainer.current_epoch + 1}/{spec.epochs}; "
                f"{_kept(ctx, callback)}"
            ) from None
        raise
    except WorkbenchError:
        raise
    except Exception as exc:
        raise _user_error(exc, spec, "training") from None
    ctx.check_stop()  # a cancel that came after the last step: the run still reads cancelled


def _save_last(ctx, parts: _Parts) -> None:
    """last.ckpt at the end of training when checkpoint_every did not fall on the last epoch (or is 0): a
    later `--resume` with more epochs continues from here."""
    if parts.callback.saved_epoch != parts.trainer.current_epoch:
        parts.trainer.save_checkpoint(ctx.run.checkpoints_dir / LAST_CKPT)


def _kept(ctx, callback) -> str:
    path = ctx.run.checkpoints_dir / LAST_CKPT
    if callback.saved_epoch and path.is_file():
        return (
            f"checkpoints/{LAST_CKPT} (after epoch {callback.saved_epoch}) is saved, so the run can be "
            "resumed"
        )
    return "no checkpoint had been written yet, so it cannot be resumed"


def _user_error(exc: BaseException, spec: TrainSpec, doing: str) -> JobError:
    """A failure inside the user's module or DataModule (or Lightning's refusal of them) as one line."""
    from workbench.worker.lightning.user_classes import parse_name

    path, _ = parse_name(spec.model.name, "model.name", "LightningModule")
    where = _where(exc, path)
    if is_lightning_name(spec.dataset.name) and "/lightning/" in where:
        where = _where(exc, parse_name(spec.dataset.name, "dataset.name", "LightningDataModule")[0])
    first = (_describe(exc).splitlines() or [""])[0][:400]
    return JobError(f"{where}: {first} (during Lightning {doing})")


@dataclasses.dataclass
class _Test:
    metrics: dict | None = None


def _test(ctx, parts: _Parts) -> _Test:
    """trainer.test once after training, where the module has a test_step and there is a test dataloader."""
    lightning = require_lightning()
    module, data = parts.module, parts.datamodule
    has_loader = (
        overrides(data, "test_dataloader", lightning.LightningDataModule)
        if data is not None
        else overrides(module, "test_dataloader", lightning.LightningModule)
    )
    if not overrides(module, "test_step", lightning.LightningModule) or not has_loader:
        ctx.log("no test evaluation: the module has no test_step or there is no test_dataloader")
        return _Test()
    from workbench.worker.lightning.stream import Cancelled

    ctx.progress(0, None, "testing", force=True)
    try:
        results = parts.trainer.test(module, datamodule=data, verbose=False)
    except Cancelled:
        raise JobCancelled(
            f"cancelled by the user during the test; the trained weights are in checkpoints/{LAST_CKPT}"
        ) from None
    except WorkbenchError:
        raise
    except Exception as exc:
        raise JobError(f"{_describe(exc)} (during Lightning testing)") from None
    metrics = {name: _number(value) for name, value in (results[0] if results else {}).items()}
    text = "test: " + " · ".join(
        f"{name} {value:.4f}" for name, value in metrics.items() if value is not None
    )
    if metrics:
        ctx.log(text)
    # The job's last progress says what the test gave (the Jobs panel kept "testing" after the run had ended).
    ctx.progress(1, 1, text if metrics else "tested", force=True)
    return _Test(metrics)


def _detection(spec: TrainSpec, ctx, parts: _Parts) -> dict | None:
    """A detecting module's test mAP by pycocotools and its COCO files (lightning/detection.py): with
    task=detection, or task=auto when its training batches were (images, targets of boxes and labels)."""
    if spec.task != "detection" and not (spec.task == "auto" and parts.callback.detection_batches):
        return None
    from workbench.worker.lightning.detection import evaluate_detection

    if spec.task == "auto":
        ctx.log(
            "task: detection (the batches are images and targets of boxes and labels); scored by COCO mAP"
        )
    return evaluate_detection(ctx, parts)


def _detection_result(result: dict, spec: TrainSpec, ctx, detection: dict) -> None:
    """The result's task, monitor and metrics for a detecting module, in the built-in detection route's keys;
    task=detection written into the run's spec, so later jobs know what it is."""
    from workbench.worker.objectives import detection as coco

    metrics = detection["metrics"]
    result["task"] = "detection"
    result["evaluation"] = detection["path"]
    result["final"]["test_metrics"] = {**(result["final"].get("test_metrics") or {}), **metrics}
    result["metrics"] = {f"test_{k}": v for k, v in metrics.items()}
    own = result["monitor"]
    result["monitor"] = {
        "name": coco.MONITOR,
        "label": coco.MONITOR_LABEL,
        "higher_is_better": True,
        # the module's own validation monitor where it logs mAP under that name; else none to report
        "best_val": own.get("best_val") if own.get("name") in ("val_map", "val_mAP") else None,
        "test": metrics.get("map"),
        "module_monitor": own.get("name"),
    }
    if spec.task != "detection":
        atomic_write_text(ctx.run.spec_path, dataclasses.replace(spec, task="detection").to_toml())


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _record_input_shape(spec: TrainSpec, ctx, shape) -> TrainSpec:
    """model.input_shape from the first training batch, written into the run's spec, so graph, export and
    bench of the run know the input without the DataModule; left empty for inputs it cannot describe."""
    if spec.model.input_shape or not shape or not 1 <= len(shape) <= 3:
        return spec
    resolved = dataclasses.replace(spec, model=dataclasses.replace(spec.model, input_shape=list(shape)))
    atomic_write_text(ctx.run.spec_path, resolved.to_toml())
    return resolved


def _result(
    spec: TrainSpec, ctx, device: torch.device, parts: _Parts, *, parameters: dict, test: _Test, resumed: bool
) -> dict:
    """The built-in route's result keys, filled from what Lightning logged."""
    trainer, callback, run = parts.trainer, parts.callback, ctx.run
    last = callback.last_metrics
    monitor = callback.monitor
    best = run.checkpoints_dir / BEST
    task = spec.task if spec.task != "auto" else "custom"
    test_metrics = test.metrics or {}
    test_value = None
    if monitor is not None and test_metrics:
        stem = monitor.name[len("val_") :] if monitor.name.startswith("val_") else monitor.name
        test_value = test_metrics.get(f"test_{stem}", test_metrics.get(monitor.name))
    result = {
        "epochs_completed": int(trainer.current_epoch),
        "final": {
            "train_loss": last.get("train_loss_epoch", last.get("train_loss")),
            "val_loss": last.get("val_loss"),
            "val_accuracy": last.get("val_acc", last.get("val_accuracy")),
            "test_accuracy": test_metrics.get("test_acc", test_metrics.get("test_accuracy")),
            **{name: value for name, value in last.items() if name.startswith("val_")},
            "test_metrics": test.metrics,
        },
        "throughput": {
            "train_samples_per_s": None,
            "warmup_s": None,
            "warmup_steps": None,
            "compile_s": None,
        },
        "checkpoint": str(run.checkpoints_dir / FINAL),
        "best_checkpoint": str(best) if spec.keep_best and best.exists() else None,
        "device": str(device),
        "amp": spec.amp,
        "channels_last": False,
        "data_placement": None,
        "parameters": parameters,
        "global_steps": int(trainer.global_step),
        "early_stopped": callback.early_stopped,
        "best_val_accuracy": callback.best if task == "classification" else None,
        "best_epoch": callback.best_epoch,
        "evaluation": None,
        "task": task,
        "monitor": {
            "name": monitor.name if monitor else None,
            "label": monitor.name if monitor else None,
            "higher_is_better": monitor.higher_is_better if monitor else None,
            "best_val": callback.best,
            "test": test_value,
        },
        "lightning": {
            "checkpoint": str(run.checkpoints_dir / LAST_CKPT),
            "datamodule": spec.dataset.name if parts.datamodule is not None else None,
        },
    }
    if resumed:
        result["resumed_from_epoch"] = callback.resumed_from
    return result
