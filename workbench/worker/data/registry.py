"""The dataset registry: `register_dataset` / `list_datasets` / `get_dataset`, as torchvision's models/_api.py
does.

A dataset is a loader function that takes a `SourceRequest` (the spec, the resolved root, a log callback)
and returns a `Source` (class names and the stores of its parts); a dataset family (`file:`, `lightning:`)
opens its dataset itself, uncached. Built-in loaders and families register on first use.
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
    "workbench.worker.data.user_family",
    "workbench.worker.lightning.data",
    "workbench.worker.data.detection.dataset",
)


log = logging.getLogger(__name__)


@dataclass
class SourceRequest:
    spec: DataSpec
    root: Path
    # never print: the command line's stdout carries only the JSON result
    log: Callable[[str], None] = log.info
    progress: Callable[[float, float, str], None] = lambda done, total, text: None


@dataclass
class Source:
    """What a loader returns: `parts` is {"train", "test"} when the dataset has its own test split, else
    {"all"}."""

    classes: list[str]
    parts: dict[str, ImageStore]
    root: str = ""  # the folder the files came from; "" for datasets without files
    fingerprint: str = ""  # changes when the files do, so cached statistics are not reused for other data
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DatasetEntry:
    name: str
    # A dataset's: (SourceRequest) -> Source; a family's: (spec, workspace, ctx) -> the dataset itself.
    load: Callable
    has_test_split: bool
    description: str
    # True: the name is a prefix, `name:<arg>`, and load_dataset neither splits nor caches what it opens.
    family: bool = False
    usage: str = ""  # how the name is written, e.g. "file:<path.py>:<Name>"
    user_code: bool = False  # the name names a user's Python file: it is code, run only where trusted
    # True: a plain name whose loader opens the dataset itself, `(spec, workspace, ctx)`, as a family does
    # (a detection set: images of many sizes and box targets, which are no ImageStore).
    opens: bool = False


def _missing(name: str, hint: str) -> str:
    return f"dataset.name: no dataset named {name!r}; {hint}"


DATASETS: Registry[DatasetEntry] = Registry("dataset", BUILTIN_MODULES, error=JobError, missing=_missing)


def register_dataset(name: str, *, has_test_split: bool, description: str = "") -> Callable:
    def decorator(fn: Callable[[SourceRequest], Source]) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        DATASETS.add(name, DatasetEntry(name, fn, has_test_split, doc))
        return fn

    return decorator


def register_dataset_family(
    name: str, *, usage: str, user_code: bool = False, description: str = ""
) -> Callable:
    """Register `name:<arg>` datasets: `fn(spec, workspace, ctx)` returns the dataset itself (e.g. a
    UserDataset), opened afresh for every job since the user's file may have changed."""

    def decorator(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        DATASETS.add(name, DatasetEntry(name, fn, False, doc, family=True, usage=usage, user_code=user_code))
        return fn

    return decorator


def register_dataset_opener(name: str, *, description: str = "") -> Callable:
    """Register a plain `name` whose `fn(spec, workspace, ctx)` opens the dataset itself (see `opens`)."""

    def decorator(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        DATASETS.add(name, DatasetEntry(name, fn, False, doc, opens=True))
        return fn

    return decorator


def find_dataset(name: str) -> DatasetEntry | None:
    """The entry for a dataset name: a plain name's own, or its family's for `family:<arg>`; None (no
    error)."""
    prefix, sep, arg = name.partition(":")
    entry = DATASETS.lookup(prefix)
    if entry is not None and entry.family == bool(sep) and (arg or not sep):
        return entry
    return None


def get_dataset(name: str) -> DatasetEntry:
    entry = find_dataset(name)
    if entry is None:
        usages = list_datasets() + sorted(family.usage for family in DATASETS.entries() if family.family)
        raise JobError(_missing(name, DATASETS.hint(name, usages)))
    return entry


def is_user_dataset(name: str) -> bool:
    """Whether a dataset name names a user's own Python file (file:, lightning:)."""
    entry = find_dataset(name)
    return entry is not None and entry.user_code


def list_datasets() -> list[str]:
    """The plain dataset names (families such as file:<path.py>:<Name> are written with an argument)."""
    return [entry.name for entry in DATASETS.entries() if not entry.family]
