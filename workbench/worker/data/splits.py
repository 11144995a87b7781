"""Deterministic train/val/test splits: seeded permutations of sample indices, sorted within each split.

Sorting keeps pages and gathers in file order; the seed alone decides which sample goes where.
"""

from __future__ import annotations

import math

import torch

from workbench.errors import JobError


def _count(n: int, fraction: float) -> int:
    return int(math.floor(n * fraction + 0.5))  # round half up: 179.5 -> 180, unlike Python's round()


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def _check_train(n_train: int, n: int, what: str) -> None:
    if n_train <= 0:
        raise JobError(f"{what} has only {n} samples; dataset.val_fraction and dataset.test_fraction leave none "
                       "for training. Lower the fractions or add data.")


def split_whole(n: int, val_fraction: float, test_fraction: float, seed: int, what: str = "the dataset") -> dict:
    """Carve test and val out of one set of `n` samples; returns {"train", "val", "test"} -> int64 indices."""
    perm = torch.randperm(n, generator=_generator(seed))
    n_test, n_val = _count(n, test_fraction), _count(n, val_fraction)
    _check_train(n - n_test - n_val, n, what)
    test, val, train = perm[:n_test], perm[n_test:n_test + n_val], perm[n_test + n_val:]
    return {"train": train.sort().values, "val": val.sort().values, "test": test.sort().values}


def split_train(n: int, val_fraction: float, seed: int, what: str = "the training set") -> dict:
    """Hold val out of a dataset's own train part; returns {"train", "val"} -> int64 indices."""
    perm = torch.randperm(n, generator=_generator(seed))
    n_val = _count(n, val_fraction)
    _check_train(n - n_val, n, what)
    return {"train": perm[n_val:].sort().values, "val": perm[:n_val].sort().values}
