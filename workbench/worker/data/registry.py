"""The dataset registry: `register_dataset` / `list_datasets` / `get_dataset`, as torchvision's models/_api.py does.

A dataset is a loader function that takes a `SourceRequest` (the spec, the resolved root, a log callback)
and returns a `Source` (class names and the stores of its parts). Built-in loaders register on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from workbench.errors import JobError
from workbench.registry import Registry
from workbench.specs import DataSpec
from workbench.worker.data.stores import ImageStore

BUILTIN_MODULES = (
    "workbench.worker.data.builtin",
    "workbench.worker.data.torchvision_sets",
    "workbench.worker.data.imagefolder",
)


log = logging.getLogger(__name__)


@dataclass
class SourceRequest:
    spec: DataSpec
    root: Path
    log: Callable[[str], None] = log.info  # never print: the command line's stdout carries only the JSON result
    progress: Callable[[float, float, str], None] = lambda done, total, text: None


@dataclass
class Source:
    """What a loader returns: `parts` is {"train", "test"} when the dataset has its own test split, else {"all"}."""

    classes: list[str]
    parts: dict[str, ImageStore]
    root: str = ""  # the folder the files came from; "" for datasets without files
    fingerprint: str = ""  # changes when the files do, so cached statistics are not reused for other data
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    load: Callable[[SourceRequest], Source]
    has_test_split: bool
    description: str


DATASETS: Registry[DatasetEntry] = Registry(
    "dataset", BUILTIN_MODULES, error=JobError,
    missing=lambda name, hint: f"dataset.name: no dataset named {name!r}; {hint}")


def register_dataset(name: str, *, has_test_split: bool, description: str = "") -> Callable:
    def decorator(fn: Callable[[SourceRequest], Source]) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        DATASETS.add(name, DatasetEntry(name, fn, has_test_split, doc))
        return fn

    return decorator


def get_dataset(name: str) -> DatasetEntry:
    return DATASETS.get(name)


def list_datasets() -> list[str]:
    return DATASETS.names()
