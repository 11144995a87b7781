"""Where a graph's model comes from: `model.*`, a training run (`source.run`) or a saved file (`source.file`).

A run gives its model spec and its best (else last) checkpoint, loaded with weights_only=True. Worker side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import pickle
import threading
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from workbench.errors import JobError
from workbench.specs import GraphSpec, ModelSpec, TrainSpec
from workbench.worker.sources import dataset_class_count, first_checkpoint, read_training_run

CHECKPOINT_ORDER = ("best.pt", "last.pt", "model.pt")  # best, else the newest state training wrote
FILE_SUFFIXES = (".pt2", ".onnx")


@dataclass
class RunModel:
    """What a training run says about its model."""

    run_dir: Path
    spec: TrainSpec
    checkpoint: Path | None  # None: the run never wrote one (the graph then shows fresh weights)
    has_profile: bool


def find_run_model(ref: str, workspace: str | Path | None) -> RunModel:
    """The model spec and best-else-last checkpoint of a training run named by id, id prefix or folder."""
    run_dir, spec = read_training_run(ref, workspace,
                                      refusal="a graph needs a training run (or use model.* or source.file)")
    checkpoint = first_checkpoint(run_dir, CHECKPOINT_ORDER)
    has_profile = (run_dir / "artifacts" / "profile_top_ops.json").is_file()
    return RunModel(run_dir, spec, checkpoint, has_profile)


def input_shape_for(spec: GraphSpec, run: RunModel | None, ctx) -> tuple[int, ...]:
    """The per-sample input shape: model.input_shape, else the run's, else its (or spec.dataset's) sample shape."""
    if spec.model.input_shape:
        return tuple(spec.model.input_shape)
    if run is not None and run.spec.model.input_shape:
        return tuple(run.spec.model.input_shape)
    data = run.spec.dataset if run is not None else spec.dataset
    from workbench.worker.data import load_dataset

    try:
        dataset = load_dataset(data, ctx=ctx)
    except JobError as exc:
        raise JobError(f"model.input_shape is empty and the dataset it would come from cannot be read ({exc}); "
                       "set model.input_shape, e.g. 3,224,224") from None
    try:
        return tuple(dataset.sample_shape)
    finally:
        dataset.release()


def build_module(spec: GraphSpec, ctx):
    """(model in eval mode, input shape, label, RunModel or None) for `model.*` or `source.run`."""
    from workbench.worker.models import build_model
    from workbench.worker.models.surgery import load_checkpoint

    run = find_run_model(spec.source.run, ctx.workspace) if spec.source.run else None
    model_spec: ModelSpec = run.spec.model if run is not None else spec.model
    shape = input_shape_for(spec, run, ctx)
    if run is None:
        classes = None if model_spec.num_classes else dataset_class_count(spec.dataset, ctx)
        # No trial forward pass: the graph shows any model whatever its outputs (a segmentation map, a custom
        # head), and analyze() runs it at once with its own message (a forward at the input size is a graph's
        # largest cost after the capture).
        model = build_model(model_spec, input_shape=shape, log=ctx.log, classes=classes, check=False)
        return model.eval(), shape, model_spec.name, None
    # The run's own weights replace any pretrained or starting checkpoint, so neither is loaded first.
    model = build_model(dataclasses.replace(model_spec, checkpoint="", weights=""), input_shape=shape, log=ctx.log,
                        pretrained=False, checkpoint=False, check=False)
    if run.checkpoint is not None:
        load_checkpoint(model, run.checkpoint, what="source.run")
        ctx.log(f"weights from {run.checkpoint.relative_to(run.run_dir)} of run {run.run_dir.name}")
    else:
        ctx.log(f"run {run.run_dir.name} has no checkpoint yet: the graph shows its model with fresh weights",
                "warning")
    return model.eval(), shape, f"{model_spec.name} (run {run.run_dir.name})", run


def check_file(path_text: str) -> Path:
    path = Path(path_text).expanduser()
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise JobError(f"source.file: {path} is not a saved ExportedProgram (.pt2) or an ONNX file (.onnx); "
                       "for a model in a Python file use model.name=file:<path.py>:<ClassOrFactory>")
    if not path.is_file():
        raise JobError(f"source.file: {path} does not exist")
    return path.absolute()


class _Refused(Exception):
    """Raised inside torch.export.load where the archive asks to unpickle more than plain tensors."""


_GUARD = threading.local()  # set in the thread that loads a .pt2: only its unpickling is restricted
_GUARD_LOCK = threading.Lock()  # one .pt2 load at a time installs the guard


class _GuardedPickle:
    """Stands in for the pickle module inside torch.export's archive reader: `loads` refuses in a guarded
    thread; everything else, and every other thread, gets the real module."""

    def __getattr__(self, name):
        return getattr(pickle, name)

    @staticmethod
    def loads(*args, **kwargs):
        if getattr(_GUARD, "on", False):
            raise _Refused("a pickled Python object")
        return pickle.loads(*args, **kwargs)


@contextlib.contextmanager
def _weights_only_unpickling():
    """torch.export.load unpickles some payloads with weights_only=False or plain pickle; here every torch.load is
    weights_only and the other unpickling paths refuse, so a .pt2 cannot run code (shared/DESIGN.md: hostile files).

    The patched functions are process-wide while a load runs, but restrict only the loading thread: a training
    job's checkpoint or a DataLoader in another thread of the worker unpickles as it always does.
    """
    import torch
    from torch.export.pt2_archive import _package

    real_load, real_pickle_obj = torch.load, torch._C._pickle_load_obj

    def weights_only_load(*args, **kwargs):
        if getattr(_GUARD, "on", False):
            kwargs["weights_only"] = True
        return real_load(*args, **kwargs)

    def pickle_load_obj(*args, **kwargs):
        if getattr(_GUARD, "on", False):
            raise _Refused("a pickled Python object")
        return real_pickle_obj(*args, **kwargs)

    with _GUARD_LOCK, contextlib.ExitStack() as patches:
        patches.enter_context(mock.patch.object(torch, "load", weights_only_load))
        patches.enter_context(mock.patch.object(torch._C, "_pickle_load_obj", pickle_load_obj))
        if hasattr(_package, "pickle"):  # torch >= 2.12 unpickles some payloads with plain pickle; 2.11 does not
            patches.enter_context(mock.patch.object(_package, "pickle", _GuardedPickle()))
        _GUARD.on = True
        try:
            yield
        finally:
            _GUARD.on = False


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _torch_export_log_kept():
    """torch.export.load logs a damaged archive's error with its traceback on stderr and goes on; keep that record
    for our one-line message instead (shown as it is only with --debug, where the root logger is at DEBUG)."""
    logger = logging.getLogger("torch.export")
    kept = _Kept()
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        yield kept
        return
    # torch gives this logger a stderr handler of its own (torch._logging), so its handlers are swapped, not only
    # its propagation turned off.
    was, handlers = logger.propagate, logger.handlers[:]
    logger.handlers[:] = [kept]
    logger.propagate = False
    try:
        yield kept
    finally:
        logger.propagate = was
        logger.handlers[:] = handlers


def _logged_reason(kept: _Kept) -> str:
    for record in kept.records:
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            first = (str(error).splitlines() or [""])[0].split(". ")[0]  # torch's advice after it is about checkpoints
            return f"{type(error).__name__}: {first[:300]}"
    return ""


def load_exported_program(path: Path):
    """torch.export.load without running code, a damaged or foreign file reported by name instead of a traceback."""
    import torch

    kept = _Kept()
    try:
        with _torch_export_log_kept() as kept, _weights_only_unpickling():
            return torch.export.load(str(path))
    except Exception as exc:  # zip, JSON, version and unpickling failures all surface differently
        chain, error = [], exc
        while error is not None and len(chain) < 10:
            chain.append(error)
            error = error.__cause__ or error.__context__
        if any(isinstance(e, (_Refused, pickle.UnpicklingError)) for e in chain):
            raise JobError(f"source.file: {path} holds more than tensors and a graph (pickled Python objects). It "
                           "was NOT loaded, because unpickling it could run code; export the model again without "
                           "custom objects") from None
        first = (str(exc).splitlines() or [""])[0][:300]
        # torch's own reading error (a damaged zip, say) says more than the KeyError it raises after it.
        reason = _logged_reason(kept) or f"{type(exc).__name__}: {first}"
        raise JobError(f"source.file: {path} cannot be read as a saved ExportedProgram "
                       f"({reason}); save it with torch.export.save") from None
