"""The task registry: `register_task` / `get_task` / `list_tasks`, in the spirit of torchvision's
models/_api.py.

A task is a function or generator of (spec, ctx). "job" tasks run one at a time and get a run directory;
"query" tasks (device lists, thumbnails) run beside them and return quickly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workbench.registry import Registry
from workbench.task_ids import canonical_name

BUILTIN_TASK_MODULES = (
    "workbench.worker.tasks.diagnostics",
    "workbench.worker.tasks.devices",
    "workbench.worker.tasks.data",
    "workbench.worker.tasks.train",
    "workbench.worker.tasks.graph",
    "workbench.worker.tasks.quant",
    "workbench.worker.tasks.bench",
    "workbench.worker.tasks.export",
    "workbench.worker.tasks.predict",
)


@dataclass(frozen=True)
class TaskInfo:
    name: str
    fn: Callable
    kind: str  # "job" or "query"
    spec_type: type | None  # a workbench.specs.Spec subclass, or None for a plain dict
    creates_run: bool
    description: str


TASKS: Registry[TaskInfo] = Registry(
    "task", BUILTIN_TASK_MODULES, missing=lambda name, hint: f"no task named {name!r} in this worker; {hint}"
)


def register_task(
    name: str,
    *,
    kind: str = "job",
    spec: type | None = None,
    creates_run: bool | None = None,
    description: str = "",
) -> Callable:
    if kind not in ("job", "query"):
        raise ValueError(f"task kind must be 'job' or 'query', not {kind!r}")

    def decorator(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        TASKS.add(
            name, TaskInfo(name, fn, kind, spec, kind == "job" if creates_run is None else creates_run, doc)
        )
        return fn

    return decorator


def load_builtin_tasks() -> None:
    TASKS.load_builtins()


def get_task(name: str) -> TaskInfo:
    """The task `name` names; an old id (train.classifier) finds the task that took its place."""
    return TASKS.get(canonical_name(name))


def list_tasks() -> list[TaskInfo]:
    return TASKS.entries()
