"""The task registry: `register_task` / `get_task` / `list_tasks`, in the spirit of torchvision's models/_api.py.

A task is a function or generator of (spec, ctx). "job" tasks run one at a time and get a run directory;
"query" tasks (device lists, thumbnails) run beside them and return quickly.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass

from workbench.errors import UsageError

BUILTIN_TASK_MODULES = ("workbench.worker.tasks.diagnostics", "workbench.worker.tasks.devices", "workbench.worker.tasks.data", "workbench.worker.tasks.train")


@dataclass(frozen=True)
class TaskInfo:
    name: str
    fn: Callable
    kind: str  # "job" or "query"
    spec_type: type | None  # a workbench.specs.Spec subclass, or None for a plain dict
    creates_run: bool
    description: str


_TASKS: dict[str, TaskInfo] = {}


def register_task(name: str, *, kind: str = "job", spec: type | None = None, creates_run: bool | None = None,
                  description: str = "") -> Callable:
    if kind not in ("job", "query"):
        raise ValueError(f"task kind must be 'job' or 'query', not {kind!r}")

    def decorator(fn: Callable) -> Callable:
        if name in _TASKS:
            raise ValueError(f"task {name!r} is registered twice")
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        _TASKS[name] = TaskInfo(name, fn, kind, spec, kind == "job" if creates_run is None else creates_run, doc)
        return fn

    return decorator


def load_builtin_tasks() -> None:
    for module in BUILTIN_TASK_MODULES:
        importlib.import_module(module)


def get_task(name: str) -> TaskInfo:
    load_builtin_tasks()
    try:
        return _TASKS[name]
    except KeyError:
        close = difflib.get_close_matches(name, _TASKS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known tasks: {', '.join(sorted(_TASKS))}"
        raise UsageError(f"no task named {name!r} in this worker{hint}") from None


def list_tasks() -> list[TaskInfo]:
    load_builtin_tasks()
    return sorted(_TASKS.values(), key=lambda t: t.name)
