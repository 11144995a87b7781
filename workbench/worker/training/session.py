"""One training job from spec to result: checks, data, device, model, training (here or in DDP ranks), the
final test evaluation and the result dict the runner writes as report.json.

Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
import math
import os

import torch

from workbench.errors import JobError
from workbench.results import Evaluation, as_dict
from workbench.runs import atomic_write_text
from workbench.specs import TrainSpec
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.data import load_dataset
from workbench.worker.devices import check_amp, check_compile, describe, resolve_device
from workbench.worker.models import build_model, count_parameters
from workbench.worker.models.build import model_class_count, resolve_num_classes
from workbench.worker.objectives import check_target, detect_task, target_num_outputs
from workbench.worker.objectives.of_run import first_input, format_metric, is_user_data, objective_for
from workbench.worker.training import tensorboard, torchrun
from workbench.worker.training.evaluate import evaluate_split, write_evaluation
from workbench.worker.training.guards import expect_labels, output_check_for
from workbench.worker.training.layout import resolve_channels_last
from workbench.worker.training.loop import Trainer, TrainSetup
from workbench.worker.training.reproducibility import deterministic_mode, seed_everything
from workbench.worker.training.state import BEST, FINAL, LAST, load_last


def _shape(shape) -> str:
    return ",".join(map(str, shape))


def check_data_fits(spec: TrainSpec, dataset) -> None:
    classes = len(dataset.classes) if spec.task in ("auto", "classification") else spec.model.num_classes
    if spec.model.num_classes != classes:
        expect_labels(dataset, spec.model.num_classes)  # a user's label past num_classes: named by its sample
        raise JobError(
            f"model.num_classes is {spec.model.num_classes}, but {dataset.name} has {classes} "
            f"classes; set model.num_classes={classes}"
        )
    wanted = tuple(spec.model.input_shape)
    if wanted and wanted != tuple(dataset.sample_shape):
        raise JobError(
            f"model.input_shape is {_shape(wanted)}, but the images of {dataset.name} are "
            f"{_shape(dataset.sample_shape)}; leave model.input_shape empty"
            + ("" if is_user_data(dataset) else ", or resize them with dataset.image_size")
        )


def check_distributed(spec: TrainSpec, device: torch.device) -> None:
    if spec.distributed != "ddp":
        return
    if device.type not in ("cpu", "cuda"):
        raise JobError(
            f"distributed: ddp runs on cpu (gloo) or cuda (nccl), not {device.type}; use "
            "device=cpu or distributed=none"
        )
    if spec.batch_size % spec.nproc:
        fitting = spec.nproc * max(1, round(spec.batch_size / spec.nproc))
        raise JobError(
            f"batch_size: {spec.batch_size} is not divisible by nproc={spec.nproc}; each process "
            f"takes batch_size // nproc samples of every batch, so use e.g. batch_size={fitting}"
        )
    if device.type == "cuda" and spec.nproc > torch.cuda.device_count():
        raise JobError(
            f"nproc: {spec.nproc} processes need {spec.nproc} CUDA devices; this machine has "
            f"{torch.cuda.device_count()}"
        )


def _number(value):
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def run_training(spec: TrainSpec, ctx) -> dict:
    """The `train.model` task: train, evaluate on the test split, return the result."""
    # tensorboard = true: every metric the job records also goes to the run's tensorboard/ folder, from every
    # route (this process, DDP ranks' relay, torchrun's rank 0, Lightning), since all of them report through
    # ctx.
    with tensorboard.live(spec, ctx) as board:
        device = resolve_device(spec.device)
        group = torchrun.active()  # a rank of a torchrun group (global rank 0: the others never get here)
        if group is None or group.world_size == 1:
            return _train(spec, ctx, device, None, None, board)
        device = torchrun.rank_device(group, device)
        # Joined first, so that whatever fails here before training reaches the other ranks as an error at
        # once.
        with torchrun.leading(group, device) as lead:
            return _train(spec, ctx, device, group, lead, board)


def _train(spec: TrainSpec, ctx, device: torch.device, group, lead, board=None) -> dict:
    """The route of one training job, in the order a reader would explain it."""
    _check_setup(spec, ctx, device, group)
    dataset = load_training_data(spec, ctx)
    if getattr(dataset, "is_detection", False):  # images of many sizes, boxes: the detection route
        from workbench.worker.training.detection import run_detection_training

        return run_detection_training(spec, ctx, dataset, device)
    spec = _resolve_task(spec, dataset, ctx)
    check_data_fits(spec, dataset)
    dataset.normalization(progress=ctx.progress)  # computed (and cached) once here, not in every DDP rank
    resume, resumed_from = _prepare_run_folder(spec, dataset, ctx)
    fresh = resume is None
    # Handed over, not kept here: last.pt's weights and optimizer state must not stay alive through training.
    pending = [resume]
    del resume
    with deterministic_mode(spec.deterministic):
        seed_everything(spec.seed)
        model = build_model(
            spec.model,
            input_shape=dataset.sample_shape,
            log=ctx.log,
            pretrained=fresh,
            checkpoint=fresh,
            task=spec.task,
            example=first_input(dataset),
        )
        parameters = _log_start(spec, ctx, dataset, model, device)
        _to_tensorboard(board, spec, model, dataset)
        try:
            fitted = _fit(spec, ctx, device, group, lead, dataset=dataset, model=model, pending=pending)
            test = _evaluate_on_test(fitted, ctx, dataset, device)
        finally:
            dataset.release()  # the device copy of the data is this job's: the next job's memory is its own
    return _result(fitted, ctx, device, group, parameters=parameters, test=test, resumed_from=resumed_from)


def _to_tensorboard(board, spec: TrainSpec, model, dataset) -> None:
    """The spec as it trains and the model's graph, before the first step; the metrics follow as they are
    recorded. Traced now, on the built model, so the graph is the user's network (not its compiled or DDP
    wrapper); the tracer runs it in eval mode, so batch-norm statistics and the random streams are as without
    TensorBoard."""
    if board is None:
        return
    board.spec_text(spec.to_toml())
    board.graph(model, tensorboard.example_batch(model, tuple(dataset.sample_shape), first_input(dataset)))


@dataclasses.dataclass
class _Fitted:
    """What training leaves for the steps after it: the spec as trained, the model and how it was laid out."""

    spec: TrainSpec
    summary: dict
    model: torch.nn.Module
    channels_last: bool


@dataclasses.dataclass
class _TestEvaluation:
    accuracy: float | None = None
    path: object = None  # the evaluation.json written, or None without a test split
    content: dict | None = None  # what it holds
    checkpoint: dict | None = None  # the checkpoint evaluated: {"file": "best.pt", "epoch": 3}


def _check_setup(spec: TrainSpec, ctx, device: torch.device, group) -> None:
    """Refuse a precision, compile mode or process layout this device cannot run, before any data is read."""
    if group is not None:
        torchrun.check_batch(spec, group)
        # Under torchrun it is DDP across the group whatever spec.distributed says (the Trainer needs only the
        # world size); the run's spec stays as written.
        ctx.log(
            f"running under torchrun as rank 0 of {group.world_size}: DDP across the group"
            + (
                f"; nproc={spec.nproc} is ignored (torchrun's --nnodes and --nproc-per-node decide)"
                if spec.distributed == "ddp" and spec.nproc != group.world_size
                else ""
            )
        )
    check_amp(spec.amp, device)
    check_compile(spec.compile, device)
    if group is None:
        check_distributed(spec, device)


def load_training_data(spec: TrainSpec, ctx):
    """The spec's dataset, its in-memory images decoded now (so unreadable files are known before any
    step)."""
    dataset = load_dataset(spec.dataset, ctx=ctx)
    if dataset.in_memory:
        # Decoded now (epoch one would do it anyway), so unreadable files are known before training: the
        # count logged at the start is the one `data info` reports, and the one the epochs really use.
        dataset.decode_all(progress=ctx.progress, check_stop=ctx.check_stop)
    return dataset


def resolve_task(spec: TrainSpec, dataset, log) -> TrainSpec:
    """task = auto becomes the task the data serves, model.num_classes = 0 (auto) the dataset's class count
    (or the target's value count); says which and why through `log`. Writes nothing (lr-find keeps no
    checkpoint)."""
    task, why, target = _task_of(spec, dataset)
    resolved = dataclasses.replace(spec, task=task)
    if not spec.model.num_classes:
        count, source = _output_count(task, dataset, target, spec.model)
        resolved = dataclasses.replace(resolved, model=resolve_num_classes(spec.model, count, log, source))
    objective = objective_for(resolved, dataset)
    log(f"task: {task} ({why}); {objective.describe()}")
    return resolved


def _resolve_task(spec: TrainSpec, dataset, ctx) -> TrainSpec:
    """resolve_task, with the resolved task and output count written back into the run's spec."""
    resolved = resolve_task(spec, dataset, ctx.log)
    if resolved != spec:
        # The run's spec then says what was trained: a resume, a graph, a quantization or an export of the run
        # rebuilds the same model, for the same task, without reading the dataset again.
        atomic_write_text(ctx.run.spec_path, resolved.to_toml())
    return resolved


def _task_of(spec: TrainSpec, dataset) -> tuple[str, str, object]:
    """(task, why, a sample's target or None) for this spec and data."""
    if spec.task == "custom":  # the user's loss and metrics decide what a target means, on any data
        return "custom", "set in the spec", dataset.first_sample()[1] if is_user_data(dataset) else None
    if not is_user_data(dataset):
        if spec.task not in ("auto", "classification"):
            raise JobError(
                f"task: {spec.task} needs targets of its own kind, but {dataset.name} is a "
                "built-in image classification set (a class label per image); set task=auto or "
                "task=classification, or train on your own Dataset with "
                "dataset.name=file:<path.py>:<Name>"
            )
        return "classification", f"{dataset.name} is an image classification set", None
    x, y = dataset.first_sample()
    if spec.task == "auto":
        task, why = detect_task(x, y)
        return task, f"task=auto: {why}", y
    check_target(spec.task, x, y)
    return spec.task, "set in the spec", y


def _output_count(task: str, dataset, target, model) -> tuple[int, str]:
    """How many outputs the model needs when model.num_classes is 0 (auto), and where that count came from."""
    if task in ("regression", "multilabel"):
        return target_num_outputs(task, target), "the target's values"
    # the user's loss reads the outputs: the dataset's classes if it has them, else one a value
    if task == "custom":
        classes = len(getattr(dataset, "classes", None) or [])
        return classes or target_num_outputs(
            "regression", target
        ), "the dataset's classes" if classes else "the target's values"
    classes = len(dataset.classes)
    if classes:
        source = getattr(dataset, "classes_source", None)  # a user's Dataset may have counted its labels
        return classes, source() if source is not None else "the dataset's classes"
    why = "no `classes` attribute"
    if task == "segmentation":
        # A mask holds class indices, not their count: the model's own head says how many classes it scores.
        count, source = model_class_count(model, dataset.sample_shape, first_input(dataset))
        if count:
            return count, f"{source}: {dataset.name} has no `classes`"
        why += f", and {source}"
    raise JobError(
        f"model.num_classes: 0 (auto) needs the number of classes, and {dataset.name} does not "
        f"say it ({why}); set model.num_classes"
    )


def _prepare_run_folder(spec: TrainSpec, dataset, ctx) -> tuple[dict | None, int | None]:
    """The run's checkpoint and artifact folders, and what a resume continues from: (last.pt's content, its
    epoch)."""
    run = ctx.run
    if not len(dataset.splits["val"]):
        ctx.log(
            "no validation split (dataset.val_fraction is 0): no best.pt and no early stopping", "warning"
        )
    run.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    run.artifacts_dir.mkdir(parents=True, exist_ok=True)
    resume = load_last(run.checkpoints_dir / LAST) if ctx.resuming else None
    if resume is None:
        return None, None
    state = resume["state"]
    run.log_event("resume", {"epoch": int(state["epoch"]), "global_step": int(state["global_step"])})
    ctx.log(f"resuming after epoch {int(state['epoch'])} (step {state['global_step']}) of {spec.epochs}")
    return resume, int(state["epoch"])


def _log_start(spec: TrainSpec, ctx, dataset, model, device: torch.device) -> dict:
    """Say what trains on what, and return the model's parameter counts for the result."""
    parameters = count_parameters(model)
    usable = sum(dataset.splits["train"].class_counts())  # without files known not to decode
    skipped = len(dataset.splits["train"]) - usable
    ctx.log(
        f"training {spec.model.name} ({parameters['trainable']:,} of {parameters['total']:,} parameters "
        f"trainable) on {describe(device)}, amp={spec.amp}, {usable:,} training samples"
        + (f" ({skipped:,} unreadable file(s) skipped)" if skipped else "")
    )
    return parameters


def _fit(
    spec: TrainSpec, ctx, device: torch.device, group, lead, *, dataset, model, pending: list
) -> _Fitted:
    """Train in this process, as rank 0 of a torchrun group, or in spawned DDP ranks; `pending` holds what a
    resume continues from (or None), taken out here so that no caller keeps it alive."""
    run = ctx.run
    resume = pending.pop()
    if group is not None:
        summary, model, channels_last, spec = _lead_group(
            spec, ctx, group, lead, dataset=dataset, model=model, device=device, resume=resume
        )
        return _Fitted(spec, summary, model, channels_last)
    if spec.distributed == "ddp":
        from workbench.worker.training.distributed import launch

        del resume  # the ranks read last.pt themselves
        # Decided once here, not by every rank (whose timings would race each other), and sent as a value.
        channels_last, layout = resolve_channels_last(
            spec.channels_last,
            model=model,
            sample_shape=tuple(dataset.sample_shape),
            batch_size=max(1, spec.batch_size // spec.nproc),
            device=device,
            amp=spec.amp,
            workspace=dataset.core.workspace,
            deterministic=spec.deterministic,
            compiled=spec.compile != "off",
        )
        ctx.log(f"memory layout: {layout}")
        spec = dataclasses.replace(spec, channels_last=channels_last)
        summary = launch(
            spec,
            ctx,
            device=device,
            checkpoints_dir=run.checkpoints_dir,
            artifacts_dir=run.artifacts_dir,
            resuming=ctx.resuming,
        )
        model.load_state_dict(load_state_dict(run.checkpoints_dir / FINAL))
        model.to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        return _Fitted(spec, summary, model, channels_last)
    trainer = _trainer(spec, ctx, dataset, model, device, resume)
    del resume
    summary = trainer.fit()
    return _Fitted(spec, summary, trainer.model, trainer.channels_last)


def _trainer(spec, ctx, dataset, model, device, resume, **rank) -> Trainer:
    """The built-in loop on the run's folders; `rank` (rank, world, stop_check) for torchrun's rank 0."""
    run = ctx.run
    return Trainer(
        TrainSetup(
            spec=spec,
            dataset=dataset,
            model=model,
            device=device,
            checkpoints_dir=run.checkpoints_dir,
            artifacts_dir=run.artifacts_dir,
            report=ctx,
            resume=resume,
            workspace=dataset.core.workspace,
            **rank,
        )
    )


def _evaluate_on_test(fitted: _Fitted, ctx, dataset, device: torch.device) -> _TestEvaluation:
    """The held-out test split, once, after training: evaluation.json for the Evaluation view."""
    spec, run = fitted.spec, ctx.run
    test_split = dataset.splits["test"]
    if not len(test_split):
        ctx.log("the test split is empty: no test evaluation (set dataset.test_fraction to hold some out)")
        return _TestEvaluation()
    checkpoint = _load_test_checkpoint(fitted, ctx)
    ctx.progress(0, len(test_split), "evaluating on the test split", force=True)
    objective = objective_for(spec, dataset)
    classes = dataset.classes if objective.task == "classification" else _label_names(spec, dataset)
    evaluation = evaluate_split(
        fitted.model,
        test_split,
        objective,
        classes,
        device=device,
        amp=spec.amp,
        channels_last=fitted.channels_last,
        batch_size=spec.batch_size,
        check_stop=ctx.check_stop,
        output_check=output_check_for(spec, objective, dataset),
    )
    evaluation["checkpoint"] = checkpoint
    path = run.artifacts_dir / "evaluation.json"
    write_evaluation(path, evaluation)
    ctx.artifact("evaluation", path, kind="evaluation")
    if objective.task == "classification":
        accuracy = _number(evaluation["test_accuracy"])
        text = f"test accuracy {accuracy:.2%}" if accuracy is not None else "no test samples decoded"
    else:
        accuracy = None
        monitor = _number(Evaluation.from_dict(evaluation).monitor.value)
        text = (
            (f"test {objective.monitor_label} {format_metric(objective.monitor, monitor)}")
            if monitor is not None
            else "no test samples evaluated"
        )
    text += f" with {checkpoint_text(checkpoint)}"
    ctx.progress(len(test_split), len(test_split), text, force=True)
    ctx.log(text)
    return _TestEvaluation(accuracy, path, evaluation, checkpoint)


def _load_test_checkpoint(fitted: _Fitted, ctx) -> dict:
    """Put into the model the checkpoint every later job of the run loads (quantize, export, Try it: best.pt,
    else model.pt), so that the test number the Training tab shows is the one those jobs start from; returns
    which."""
    folder = ctx.run.checkpoints_dir
    name = next((name for name in (BEST, FINAL) if (folder / name).is_file()), FINAL)
    epoch = fitted.summary.get("best_epoch") if name == BEST else fitted.summary.get("epochs_completed")
    if name == BEST:
        # The model holds the last epoch's weights; load_state_dict copies into its parameters in place, so a
        # channels-last layout and the device stay as they are.
        fitted.model.load_state_dict(load_state_dict(folder / BEST, map_location="cpu"))
    return {"file": name, "epoch": epoch}


def checkpoint_text(checkpoint: dict | None) -> str:
    """ "best.pt (epoch 3)": the checkpoint a test evaluation used."""
    if not checkpoint:
        return ""
    epoch = checkpoint.get("epoch")
    return f"{checkpoint.get('file')}" + (f" (epoch {epoch})" if epoch else "")


def _label_names(spec: TrainSpec, dataset) -> list[str]:
    """Names of the outputs for the evaluation view: the dataset's `classes` where it has them, else
    numbers."""
    names = list(getattr(dataset, "classes", None) or [])
    return names if len(names) == spec.model.num_classes else [str(i) for i in range(spec.model.num_classes)]


def _result(
    fitted: _Fitted,
    ctx,
    device: torch.device,
    group,
    *,
    parameters: dict,
    test: _TestEvaluation,
    resumed_from: int | None,
) -> dict:
    """The result the runner writes as report.json (its keys are a contract: the GUI, the report and tests
    read them)."""
    spec, summary, run = fitted.spec, fitted.summary, ctx.run
    last = summary.get("last_epoch") or {}
    best = run.checkpoints_dir / BEST
    result = {
        "epochs_completed": summary["epochs_completed"],
        "final": {
            "train_loss": _number(last.get("train_loss")),
            "val_loss": _number(last.get("val_loss")),
            "val_accuracy": _number(last.get("val_acc")),
            "test_accuracy": test.accuracy,
        },
        # Samples/s after the warm-up; the warm-up (first steps, profiling, compilation) is reported apart.
        "throughput": {
            "train_samples_per_s": _number(summary.get("train_samples_per_s")),
            "warmup_s": _number(summary.get("warmup_s")),
            "warmup_steps": summary.get("warmup_steps"),
            "compile_s": _number(summary.get("compile_s")),
        },
        "checkpoint": str(run.checkpoints_dir / FINAL),
        "best_checkpoint": str(best) if spec.keep_best and best.exists() else None,
        "device": str(device),
        "amp": spec.amp,
        "channels_last": bool(fitted.channels_last),
        "data_placement": summary.get("placement"),
        "parameters": parameters,
        "global_steps": summary["global_steps"],
        "early_stopped": summary["early_stopped"],
        "best_val_accuracy": _number(summary.get("best_val_accuracy")),
        "best_epoch": summary.get("best_epoch"),
        "evaluation": str(test.path) if test.path else None,
        "test_checkpoint": test.checkpoint,
        "task": spec.task,
        "monitor": _monitor_result(spec, summary, test),
    }
    if spec.task != "classification":
        result["final"].update(_prefixed("val_", last), test_metrics=as_dict(test.content).get("metrics"))
    if resumed_from is not None:
        result["resumed_from_epoch"] = resumed_from
    if group is not None:
        result["distributed"] = {
            "backend": torchrun.backend_for(device),
            "nproc": group.world_size,
            "cpu_count": os.cpu_count(),
            "torchrun": {
                **group.describe(torchrun.backend_for(device)),
                "restart_count": group.restart_count,
            },
        }
    elif spec.distributed == "ddp":
        result["distributed"] = {
            "backend": "nccl" if device.type == "cuda" else "gloo",
            "nproc": spec.nproc,
            "cpu_count": os.cpu_count(),
        }
    return result


def _monitor_result(spec: TrainSpec, summary: dict, test: _TestEvaluation) -> dict:
    """The task's monitor metric: its name, label and direction, its best validation value and its test
    value."""
    objective = objective_for(spec, None)  # the spec is resolved: it names the task and its output count
    return {
        "name": objective.monitor,
        "label": objective.monitor_label,
        "higher_is_better": objective.higher_is_better,
        "best_val": _number(summary.get("best_val_monitor")),
        "test": _number(Evaluation.from_dict(test.content).monitor.value),
    }


def _prefixed(prefix: str, metrics: dict) -> dict:
    return {key: _number(value) for key, value in metrics.items() if key.startswith(prefix)}


def _lead_group(spec: TrainSpec, ctx, group, lead, *, dataset, model, device, resume):
    """Global rank 0 of a torchrun group (joined already): tell the other ranks the run (and the spec as
    resolved here), then train this rank's shard in this process, reporting through the task's own context
    (the run's one writer). Returns (summary, model, channels_last, spec)."""
    # Decided once here, not by every rank (whose timings would race each other), and sent as a value.
    channels_last, layout = resolve_channels_last(
        spec.channels_last,
        model=model,
        sample_shape=tuple(dataset.sample_shape),
        batch_size=max(1, spec.batch_size // group.world_size),
        device=device,
        amp=spec.amp,
        workspace=dataset.core.workspace,
        deterministic=spec.deterministic,
        compiled=spec.compile != "off",
    )
    spec = dataclasses.replace(spec, channels_last=channels_last)
    backend = torchrun.backend_for(device)
    ctx.log(
        f"torchrun group at {group.master_addr}:{group.master_port} ({backend}, {group.world_size} "
        f"ranks, restart {group.restart_count}), {spec.batch_size // group.world_size} samples each per "
        f"batch; memory layout: {layout}"
    )
    run = ctx.run
    lead.share({"spec": spec.to_dict(), "run_id": run.dir.name, "resuming": resume is not None})
    stop_check = torchrun.GroupStop(ctx.should_stop, device, 0)
    trainer = _trainer(
        spec, ctx, dataset, model, device, resume, rank=0, world=group.world_size, stop_check=stop_check
    )
    del resume
    summary = trainer.fit()
    return summary, trainer.model, trainer.channels_last, spec
