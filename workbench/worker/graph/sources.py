"""Where a graph's model comes from: `model.*` or a training run (`source.run`) through the one resolver
(workbench/worker/source.py), or a saved file (`source.file`: a .pt2 loaded without running code, or ONNX).
Worker side.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import threading
from pathlib import Path
from unittest import mock

from workbench.errors import JobError
from workbench.specs import GraphSpec

CHECKPOINT_ORDER = ("best.pt", "last.pt", "model.pt")  # best, else the newest state training wrote
FILE_SUFFIXES = (".pt2", ".onnx")


def build_module(spec: GraphSpec, ctx):
    """(model in eval mode, its example inputs (a batch of one), label, the resolved Source) for `model.*` or
    `source.run`: the one resolver's, with the run's profile noted."""
    from workbench.worker.source import resolve

    source = resolve(
        spec.source,
        spec.model,
        spec.dataset,
        ctx,
        need_checkpoint=False,
        order=CHECKPOINT_ORDER,
        job="a graph needs a training run (or use model.* or source.file)",
    )
    # No trial forward pass: the graph shows any model whatever its outputs (a segmentation map, a custom
    # head), and analyze() runs it at once with its own message (a forward at the input size is a graph's
    # largest cost after the capture).
    model = source.build(ctx, check=False)
    if source.run_dir is not None and source.checkpoint is not None:
        ctx.log(f"weights from {source.checkpoint.relative_to(source.run_dir)} of run {source.run_dir.name}")
    example = source.example(ctx).first(1)
    source.release()
    return model, example, source.label, source


def has_profile(source) -> bool:
    """Whether the run the graph's model came from kept a profile of its operators."""
    return source.run_dir is not None and (source.run_dir / "artifacts" / "profile_top_ops.json").is_file()


def check_file(path_text: str) -> Path:
    path = Path(path_text).expanduser()
    if path.suffix.lower() not in FILE_SUFFIXES:
        raise JobError(
            f"source.file: {path} is not a saved ExportedProgram (.pt2) or an ONNX file (.onnx); "
            "for a model in a Python file use model.name=file:<path.py>:<ClassOrFactory>"
        )
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
    """torch.export.load unpickles some payloads with weights_only=False or plain pickle; here every
    torch.load is weights_only and the other unpickling paths refuse, so a .pt2 cannot run code
    (docs/architecture.md: hostile files).

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
        # torch >= 2.12 unpickles some payloads with plain pickle; 2.11 does not
        if hasattr(_package, "pickle"):
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
    """torch.export.load logs a damaged archive's error with its traceback on stderr and goes on; keep that
    record for our one-line message instead (shown as it is only with --debug, where the root logger is at
    DEBUG)."""
    logger = logging.getLogger("torch.export")
    kept = _Kept()
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        yield kept
        return
    # torch gives this logger a stderr handler of its own (torch._logging), so its handlers are swapped, not
    # only its propagation turned off.
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
            # torch's advice after it is about checkpoints
            first = (str(error).splitlines() or [""])[0].split(". ")[0]
            return f"{type(error).__name__}: {first[:300]}"
    return ""


def load_exported_program(path: Path):
    """torch.export.load without running code, a damaged or foreign file reported by name instead of a
    traceback."""
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
            raise JobError(
                f"source.file: {path} holds more than tensors and a graph (pickled Python objects). It "
                "was NOT loaded, because unpickling it could run code; export the model again without "
                "custom objects"
            ) from None
        first = (str(exc).splitlines() or [""])[0][:300]
        # torch's own reading error (a damaged zip, say) says more than the KeyError it raises after it.
        reason = _logged_reason(kept) or f"{type(exc).__name__}: {first}"
        raise JobError(
            f"source.file: {path} cannot be read as a saved ExportedProgram "
            f"({reason}); save it with torch.export.save"
        ) from None
