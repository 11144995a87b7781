"""Deterministic train/val/test splits: seeded permutations of sample indices, sorted within each split.

Sorting keeps pages and gathers in file order; the seed alone decides which sample goes where. Given the
samples' class labels, a split is stratified: every class is cut in the same proportions (to within one
sample), so a small test split cannot miss a class (60 images in 3 classes once gave a 6-image test split with
none of one class).
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
        raise JobError(
            f"{what} has only {n} samples; dataset.val_fraction and dataset.test_fraction leave none "
            "for training. Lower the fractions or add data."
        )


def _order(n: int, seed: int, labels: torch.Tensor | None) -> torch.Tensor:
    """The seeded order in which samples go to test, then val, then train.

    Without labels, a random permutation. With labels, each class's samples in a random order are given keys
    (rank + offset) / class size, the offset a random fraction per class, and all samples are ordered by key:
    any prefix of the order then holds every class in proportion to its size, to within one sample, while the
    split sizes stay exactly those of the unstratified split.
    """
    generator = _generator(seed)
    perm = torch.randperm(n, generator=generator)
    if labels is None or n == 0:
        return perm
    if labels.numel() != n:
        raise ValueError(f"{labels.numel()} labels for {n} samples")
    _classes, inverse = torch.unique(labels.reshape(-1).to(torch.int64), return_inverse=True)
    shuffled = inverse[perm]
    by_class = torch.argsort(shuffled, stable=True)  # grouped by class, random order kept within each
    grouped = shuffled[by_class]
    counts = torch.bincount(grouped)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(n) - starts[grouped]
    offsets = torch.rand(counts.numel(), generator=generator, dtype=torch.float64)
    keys = (rank.to(torch.float64) + offsets[grouped]) / counts[grouped].to(torch.float64)
    return perm[by_class[torch.argsort(keys, stable=True)]]


def split_whole(
    n: int,
    val_fraction: float,
    test_fraction: float,
    seed: int,
    what: str = "the dataset",
    labels: torch.Tensor | None = None,
) -> dict:
    """Carve test and val out of one set of `n` samples; returns {"train", "val", "test"} -> int64 indices.
    `labels` (N,) class indices: stratified by class."""
    perm = _order(n, seed, labels)
    n_test, n_val = _count(n, test_fraction), _count(n, val_fraction)
    _check_train(n - n_test - n_val, n, what)
    test, val, train = perm[:n_test], perm[n_test : n_test + n_val], perm[n_test + n_val :]
    return {"train": train.sort().values, "val": val.sort().values, "test": test.sort().values}


def split_train(
    n: int, val_fraction: float, seed: int, what: str = "the training set", labels: torch.Tensor | None = None
) -> dict:
    """Hold val out of a dataset's own train part; returns {"train", "val"} -> int64 indices. `labels` (N,)
    class indices: stratified by class."""
    perm = _order(n, seed, labels)
    n_val = _count(n, val_fraction)
    _check_train(n - n_val, n, what)
    return {"train": perm[n_val:].sort().values, "val": perm[:n_val].sort().values}
