"""Splits are stratified by class (#21 part 6.5): a 60-image, 3-class image folder's 6-image test split holds
two of each class; splits stay deterministic for a seed, disjoint, and sized exactly as before."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from data_helpers import save_image, write_mnist_like

from workbench.specs import DataSpec
from workbench.worker.data.loader import clear_cache, load_dataset
from workbench.worker.data.splits import split_train, split_whole


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def _image_folder(root, counts: dict[str, int]):
    rng = np.random.default_rng(0)
    for name, n in counts.items():
        for i in range(n):
            save_image(root / name / f"{i:03d}.png", rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8))
    return root


def _class_counts(split) -> dict[int, int]:
    return dict(Counter(split.labels.tolist()))


def test_a_small_image_folder_keeps_every_class_in_every_split(tmp_path):
    root = _image_folder(tmp_path / "images", {"cat": 20, "dog": 20, "fox": 20})
    spec = DataSpec.from_dict(
        {"name": "imagefolder", "root": str(root), "val_fraction": 0.1, "test_fraction": 0.1, "seed": 0}
    )
    for seed in range(5):  # unstratified, about one seed in five left a class out of the test split
        ds = load_dataset(DataSpec.from_dict({**spec.to_dict(), "seed": seed}), workspace=tmp_path)
        assert {name: len(split) for name, split in ds.splits.items()} == {"train": 48, "val": 6, "test": 6}
        assert _class_counts(ds.splits["test"]) == {0: 2, 1: 2, 2: 2}
        assert _class_counts(ds.splits["val"]) == {0: 2, 1: 2, 2: 2}
        assert _class_counts(ds.splits["train"]) == {0: 16, 1: 16, 2: 16}
        everything = torch.cat([split.indices for split in ds.splits.values()]).tolist()
        assert sorted(everything) == list(range(60))  # disjoint, and nothing left out
    clear_cache()
    again = load_dataset(spec, workspace=tmp_path)
    first = load_dataset(DataSpec.from_dict({**spec.to_dict(), "seed": 0}), workspace=tmp_path / "other")
    assert all(
        torch.equal(again.splits[k].indices, first.splits[k].indices) for k in ("train", "val", "test")
    )


def test_stratified_splits_are_proportional_deterministic_and_sized_as_before():
    generator = torch.Generator().manual_seed(1)
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate((500, 120, 33, 7, 1))])
    labels = labels[torch.randperm(labels.numel(), generator=generator)]
    n = labels.numel()
    plain = split_whole(n, 0.15, 0.2, seed=3)
    parts = split_whole(n, 0.15, 0.2, seed=3, labels=labels)
    assert {k: len(v) for k, v in parts.items()} == {k: len(v) for k, v in plain.items()}
    assert sorted(torch.cat(list(parts.values())).tolist()) == list(range(n))
    for name, fraction in (("test", 0.2), ("val", 0.15)):
        got = torch.bincount(labels[parts[name]], minlength=5)
        wanted = torch.bincount(labels, minlength=5) * fraction
        assert torch.all((got - wanted).abs() <= 1.0 + 1e-9), (name, got, wanted)
    again = split_whole(n, 0.15, 0.2, seed=3, labels=labels)
    assert all(torch.equal(parts[k], again[k]) for k in parts)
    other = split_whole(n, 0.15, 0.2, seed=4, labels=labels)
    assert not torch.equal(parts["test"], other["test"])
    held = split_train(n, 0.1, seed=3, labels=labels)
    got = torch.bincount(labels[held["val"]], minlength=5)
    assert torch.all((got - torch.bincount(labels, minlength=5) * 0.1).abs() <= 1.0 + 1e-9)


def test_a_held_out_test_sets_validation_split_is_stratified(tmp_path):
    write_mnist_like(tmp_path, "mnist", n_train=200, n_test=20)
    ds = load_dataset(
        DataSpec.from_dict({"name": "mnist", "root": str(tmp_path), "val_fraction": 0.1}), workspace=tmp_path
    )
    train_labels = torch.cat([ds.splits["train"].labels, ds.splits["val"].labels])
    wanted = torch.bincount(train_labels, minlength=10) * 0.1
    got = torch.bincount(ds.splits["val"].labels, minlength=10)
    assert len(ds.splits["val"]) == 20 and torch.all((got - wanted).abs() <= 1.0 + 1e-9)


def test_stratify_false_is_the_plain_seeded_split_of_earlier_runs(tmp_path):
    # The split every run made before stratified splits had: the seed's permutation, test first, then val.
    plain = load_dataset(DataSpec(name="digits", stratify=False, seed=3), workspace=tmp_path)
    perm = torch.randperm(1797, generator=torch.Generator().manual_seed(3))
    n_test, n_val = len(plain.splits["test"]), len(plain.splits["val"])
    assert torch.equal(plain.splits["test"].indices, perm[:n_test].sort().values)
    assert torch.equal(plain.splits["val"].indices, perm[n_test : n_test + n_val].sort().values)
    stratified = load_dataset(DataSpec(name="digits", seed=3), workspace=tmp_path)
    assert not torch.equal(stratified.splits["test"].indices, plain.splits["test"].indices)


def test_a_run_made_before_stratify_reads_back_as_unstratified():
    from workbench.runs import upgrade_run_spec

    assert upgrade_run_spec({"dataset": {"name": "digits"}})["dataset"]["stratify"] is False
    assert upgrade_run_spec({"dataset": {"name": "digits", "stratify": True}})["dataset"]["stratify"] is True
    assert upgrade_run_spec({"epochs": 1}) == {"epochs": 1}  # no dataset table: nothing to say
