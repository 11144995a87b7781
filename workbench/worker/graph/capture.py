"""Capturing a model's graph: torch.export non-strict, then strict; the caller falls back to the module
hierarchy when both fail (data-dependent control flow, say), and each failure is kept as a one-line reason.
Non-strict goes first because it captures the same operator graph of nearly every model at a fraction of the
time (strict traces the Python bytecode with Dynamo: 2.5-4.5x slower on torchvision models); strict still
catches a model that non-strict cannot run.

Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import traceback
from dataclasses import dataclass

import torch
from torch import nn

_NOISY_LOGGERS = (
    "torch._dynamo",
    "torch.export",
    "torch._export",
    "torch.fx.experimental.symbolic_shapes",
    "torch._guards",
    "torch._subclasses",
)
_USER_FRAME = re.compile(r'File "?([^",\n]+?\.py)"?(?:, line |:)(\d+)')


@dataclass
class Capture:
    program: torch.export.ExportedProgram | None
    how: str  # "export", "non_strict" or "modules"
    reason: str


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch logs, and prints to stderr, the whole traced graph when an export fails; the reason is enough."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _user_site(exc: BaseException) -> str:
    """'file, line N' of the deepest frame outside torch: in the traceback, else named in the message
    (dynamo)."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if "/torch/" not in f.filename and "/workbench/" not in f.filename
    ]
    if frames:
        return f"{frames[-1].filename}, line {frames[-1].lineno}"
    found = [m for m in _USER_FRAME.finditer(str(exc)) if "/torch/" not in m[1] and "/workbench/" not in m[1]]
    return f"{found[-1][1]}, line {found[-1][2]}" if found else ""


def describe_failure(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0][:200] if lines else ""
    site = _user_site(exc)
    return f"{type(exc).__name__}: {first}" + (f" (at {site})" if site else "")


def capture(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], log=None, kwargs: dict | None = None
) -> Capture:
    """torch.export non-strict, then strict; `program` is None when neither could capture the model. `kwargs`:
    the inputs of a model that takes them by name."""
    failures = []
    for strict, how, label in ((False, "non_strict", "non-strict export"), (True, "export", "strict export")):
        try:
            with _quiet_torch_logs():
                program = torch.export.export(model, inputs, kwargs=kwargs or None, strict=strict)
        except Exception as exc:  # anything the user's code or the tracer raises means: try the next way
            failures.append(f"{label} failed: {describe_failure(exc)}")
            if log is not None:
                log(failures[-1], "warning")
            continue
        reason = f"torch.export ({'strict' if strict else 'non-strict'}) captured the whole model"
        if failures:
            reason += f"; {failures[0]}"
        return Capture(program, how, reason)
    return Capture(
        None,
        "modules",
        "; ".join(failures) + "; showing the module hierarchy, with shapes from one "
        "forward pass, instead of the operator graph",
    )
