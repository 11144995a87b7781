"""Diagnostic tasks that exercise the worker, the protocol and the run store without loading torch.

`debug.count` is also what the window's "Run worker self-test" starts; its crash options let tests
prove that a job whose worker died is reported as failed, with the signal or exit code.
"""

from __future__ import annotations

import ctypes
import math
import os
import signal
import time

import numpy as np

from workbench.errors import JobError
from workbench.specs import _to_float, _to_int
from workbench.worker.registry import register_task

CRASH_MODES = ("kill", "exit", "segfault", "raise", "job_error", "hang")


def _field(spec: dict, name: str, default, kind: type):
    """A diagnostic's field as `kind`, checked like a typed spec's: a bad value names the field."""
    value = spec.get(name, default)
    return _to_int(value, name) if kind is int else _to_float(value, name)


@register_task("debug.count", kind="job")
def count(spec: dict, ctx):
    """Count steps, streaming a metric per step; crash or emit NaN on request (for tests and self-checks)."""
    steps = _field(spec, "steps", 100, int)
    delay = _field(spec, "delay", 0.01, float)
    crash_at = _field(spec, "crash_at", -1, int)
    crash_mode = spec.get("crash_mode", "kill")
    if crash_mode not in CRASH_MODES:
        raise JobError(f"crash_mode: {crash_mode!r} is not allowed; choose one of: {', '.join(CRASH_MODES)}")
    for step in range(steps):
        if step == crash_at:
            if crash_mode == "hang":  # said first, so a test (or a person) knows the cancel cannot land now
                ctx.progress(
                    step, steps, f"hanging at step {step} (a diagnostic: it ignores cancel)", force=True
                )
            _crash(crash_mode, step)
        ctx.metrics(step, {"value": step, "sine": math.sin(step / 10)})
        ctx.progress(step + 1, steps, f"step {step + 1}/{steps}")
        if delay:
            time.sleep(delay)
        yield  # a step boundary: cancel is honoured here
    return {"steps_completed": steps}


def _crash(mode: str, step: int) -> None:
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "exit":
        os._exit(3)
    elif mode == "segfault":
        ctypes.string_at(0)  # reads address 0: a real SIGSEGV, like a crashing CUDA kernel
    elif mode == "raise":
        raise RuntimeError(f"deliberate failure at step {step}")
    elif mode == "hang":
        while True:  # a hung model: never reaches another step boundary, so a cancel cannot land
            time.sleep(0.05)
    raise JobError(f"deliberate job error at step {step}")


@register_task("debug.selftest", kind="query", creates_run=True)
def selftest(spec: dict, ctx):
    """The window's worker self-test: a short count with a run, metrics and progress.

    A "query" so that it runs in the worker's query pool beside a long training job instead of queueing
    behind it: it checks that the worker answers now, which is the point of a self-test.
    """
    result = yield from count(
        {"steps": _field(spec, "steps", 200, int), "delay": _field(spec, "delay", 0.01, float)}, ctx
    )
    return {**result, "selftest": "passed"}


@register_task("debug.echo", kind="query")
def echo(spec: dict, ctx):
    """Return the spec; with `array_size`, also send an array of that many float32 values."""
    size = _field(spec, "array_size", 0, int)
    if size:
        ctx.array("ramp", np.arange(size, dtype=np.float32))
    return {"echo": spec}


@register_task("debug.sleep", kind="job", creates_run=False)
def sleep(spec: dict, ctx):
    """Sleep in small steps until done or cancelled (tests cancel latency)."""
    seconds = _field(spec, "seconds", 10.0, float)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
        yield
    return {"slept_s": seconds}
