"""`load_dataset`: a DataSpec to a LoadedDataset. Resolves the root, runs the registered loader, makes the
splits, and keeps the result in the worker's LRU cache.

The cache is keyed by the fields that change what is loaded (name, root, fractions, seed, image size, fake's
size and classes) and the workspace; augment and normalize only change the view, so editing them reuses the
decoded images.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from workbench.specs import DataSpec
from workbench.worker.data.cache import DatasetCache
from workbench.worker.data.loaded import DatasetCore, LoadedDataset
from workbench.worker.data.normalize import stats_key
from workbench.worker.data.registry import SourceRequest, find_dataset, get_dataset
from workbench.worker.data.splits import split_train, split_whole

if TYPE_CHECKING:
    from workbench.worker.data.user import UserDataset

log = logging.getLogger(__name__)

_cache = DatasetCache()


def resolve_workspace(workspace=None, ctx=None) -> Path:
    if workspace:
        return Path(workspace).expanduser().absolute()
    if ctx is not None and getattr(ctx, "workspace", None):
        return Path(ctx.workspace).expanduser().absolute()
    from workbench.workspace import default_workspace

    return default_workspace().absolute()


def resolve_root(spec: DataSpec, workspace: Path) -> Path:
    """dataset.root, or <workspace>/data when it is empty."""
    return Path(spec.root).expanduser().absolute() if spec.root else workspace / "data"


def _core_key(spec: DataSpec, root: Path, workspace: Path) -> str:
    fields = {
        "name": spec.name,
        "root": str(root),
        "val_fraction": spec.val_fraction,
        "test_fraction": spec.test_fraction,
        "seed": spec.seed,
        "image_size": list(spec.image_size),
        "size": spec.size,
        "num_classes": spec.num_classes,
        "workspace": str(workspace),
        "stratify": spec.stratify,
    }
    return json.dumps(fields, sort_keys=True)


def _load_core(spec: DataSpec, root: Path, workspace: Path, ctx) -> DatasetCore:
    entry = get_dataset(spec.name)

    def say(text: str) -> None:
        log.info("%s", text)
        if ctx is not None:
            ctx.log(text)

    def progress(done: float, total: float, text: str) -> None:
        if ctx is not None:
            ctx.progress(done, total, text)

    source = entry.load(SourceRequest(spec, root, log=say, progress=progress))
    what = f"the {spec.name} dataset"
    if "all" in source.parts:
        store = source.parts["all"]
        # A registered dataset's targets are classes: its splits are stratified by them.
        defs = {
            name: (store, idx)
            for name, idx in split_whole(
                len(store),
                spec.val_fraction,
                spec.test_fraction,
                spec.seed,
                what,
                labels=store.labels if spec.stratify else None,
            ).items()
        }
    else:
        train, test = source.parts["train"], source.parts["test"]
        defs = {
            name: (train, idx)
            for name, idx in split_train(
                len(train),
                spec.val_fraction,
                spec.seed,
                f"the training set of {spec.name}",
                labels=train.labels if spec.stratify else None,
            ).items()
        }
        defs["test"] = (test, torch.arange(len(test)))
    return DatasetCore(
        name=spec.name,
        classes=source.classes,
        root=source.root,
        workspace=workspace,
        split_defs={name: defs[name] for name in ("train", "val", "test")},
        stats_key=stats_key(spec, source.root, source.fingerprint),
    )


def load_dataset(spec: DataSpec, workspace=None, ctx=None) -> LoadedDataset | UserDataset:
    """Load (or take from the cache) the dataset a spec describes; bad files or folders raise JobError.
    A `file:<path.py>:<Name>` dataset is the user's own torch Dataset: a UserDataset (see user.py).

    `workspace` (else `ctx.workspace`, else the default workspace) holds <workspace>/data, the default root,
    and <workspace>/cache, where normalisation statistics are kept. `ctx` (a TaskContext) gets logs and
    progress.
    """
    if not isinstance(spec, DataSpec):
        spec = DataSpec.from_dict(spec, path="dataset")
    workspace = resolve_workspace(workspace, ctx)
    family = find_dataset(spec.name)
    if family is not None and (family.family or family.opens):
        # The user's own Dataset or LightningDataModule: opened afresh for every job (their file may have
        # changed), never split or cached here.
        return family.load(spec, workspace, ctx)
    root = resolve_root(spec, workspace)
    core = _cache.get_or_load(
        _core_key(spec, root, workspace), lambda: _load_core(spec, root, workspace, ctx)
    )
    return LoadedDataset(core, spec)


def clear_cache() -> None:
    """Forget every loaded dataset (tests, and freeing memory)."""
    _cache.clear()
