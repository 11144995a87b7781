"""The dotted ids of the worker's jobs, named once for the window, the CLI and the worker alike (a run's task
id is stored in its folder, so these strings are part of every run). No torch, no Qt.
"""

from __future__ import annotations

from enum import Enum


class TaskId(str, Enum):
    """A job's id. Each member equals its string, so `entry["task"] == TaskId.QUANT` holds for a stored id."""

    TRAIN = "train.model"  # trains every learning task (classification, segmentation, regression, ...)
    QUANT = "quant.analyze"
    EXPORT = "export.model"
    BENCH = "bench.latency"
    GRAPH = "graph.build"
    PREDICT = "predict.model"
    LR_FIND = "lr.find"

    def __str__(self) -> str:
        return self.value


# The training job's id until it was named for what it trains: runs on disk, specs and scripts still say it.
TRAIN_ALIAS = "train.classifier"
ALIASES = {TRAIN_ALIAS: TaskId.TRAIN}

TRAIN_TASK = TaskId.TRAIN.value
TRAIN_TASKS = (TRAIN_TASK, TRAIN_ALIAS)  # every id a training run may be recorded under
QUANT_TASK = TaskId.QUANT.value
EXPORT_TASK = TaskId.EXPORT.value
BENCH_TASK = TaskId.BENCH.value
GRAPH_TASK = TaskId.GRAPH.value
PREDICT_TASK = TaskId.PREDICT.value
LR_FIND_TASK = TaskId.LR_FIND.value


def canonical(task_id: object) -> TaskId | None:
    """The job an id names, an old alias read as its new id; None for an id of no known job (a query, a
    typo)."""
    if isinstance(task_id, TaskId):
        return task_id
    name = str(task_id or "")
    if name in ALIASES:
        return ALIASES[name]
    try:
        return TaskId(name)
    except ValueError:
        return None


def canonical_name(task_id: str) -> str:
    """The id to look a task up by: the alias's new id, any other id unchanged."""
    task = ALIASES.get(task_id)
    return task.value if task is not None else task_id


def is_training(task_id: object) -> bool:
    """A training run, whichever id it was recorded under."""
    return canonical(task_id) is TaskId.TRAIN


def same_task(a: object, b: object) -> bool:
    """Two ids that name one job (the training id and its alias do)."""
    return a == b or (canonical(a) is not None and canonical(a) is canonical(b))


def with_aliases(task_ids) -> set[str]:
    """The ids `task_ids` name as stored in run folders: each id with every old name of its job (a tab that
    lists train.model runs lists the train.classifier runs on disk too)."""
    wanted = {canonical(t) for t in task_ids} - {None}
    return (
        {str(t) for t in task_ids}
        | {alias for alias, task in ALIASES.items() if task in wanted}
        | {t.value for t in wanted}
    )
