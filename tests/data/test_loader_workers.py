"""dataset.num_workers = "auto", the default: background loaders where data streams from files, none where it
is held in memory (a measured default: an ImageFolder too big for memory trained at a third of the speed
without)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from data_helpers import make_image_folder

from workbench.errors import SpecError
from workbench.specs import DataSpec, TrainSpec
from workbench.worker.data import load_dataset, stores
from workbench.worker.data.loaded import MAX_AUTO_WORKERS, auto_worker_count


def test_auto_is_the_default_and_counts_still_read_as_counts():
    assert DataSpec().num_workers == "auto"
    assert DataSpec.from_dict({"num_workers": 3}).num_workers == 3
    assert DataSpec.from_dict({"num_workers": "2"}).num_workers == 2
    assert TrainSpec.from_dict({"dataset": {"num_workers": 0}}).dataset.num_workers == 0  # an old run's spec
    for bad in ("many", -1):
        with pytest.raises(SpecError, match="num_workers"):
            DataSpec.from_dict({"num_workers": bad})


def test_auto_loads_in_process_when_the_data_is_held_in_memory(tmp_path: Path):
    dataset = load_dataset(DataSpec(name="digits"), workspace=tmp_path)
    assert dataset.in_memory
    assert dataset.loader_workers() == 0
    assert "held in memory" in dataset.describe_workers()


def _streaming_folder(tmp_path: Path, monkeypatch, **fields):
    root = tmp_path / "folder"
    make_image_folder(root, classes=("a", "b"), per_class=40, size=(8, 8))  # 80 images of 192 bytes
    # "Too big for memory": a budget (half of this) that holds the few images a batch needs, not all 80.
    monkeypatch.setattr(stores, "available_memory", lambda: 20_000)
    return load_dataset(DataSpec(name="imagefolder", root=str(root), **fields), workspace=tmp_path)


def test_auto_uses_the_usable_cores_when_data_streams_from_files(tmp_path: Path, monkeypatch):
    dataset = _streaming_folder(tmp_path, monkeypatch)
    assert not dataset.in_memory
    assert (
        dataset.loader_workers()
        == auto_worker_count()
        == min(len(__import__("os").sched_getaffinity(0)), MAX_AUTO_WORKERS)
    )
    assert "streams from files" in dataset.describe_workers()
    # The same batches either way: the loaders only change when they are decoded.
    plain = _streaming_folder(tmp_path / "again", monkeypatch, num_workers=0)
    assert plain.loader_workers() == 0
    for (x1, y1), (x2, y2) in zip(
        dataset.splits["train"].batches(4, shuffle=True, seed=1),
        plain.splits["train"].batches(4, shuffle=True, seed=1),
        strict=True,
    ):
        assert torch.equal(x1, x2) and torch.equal(y1, y2)


def test_a_count_given_is_kept(tmp_path: Path, monkeypatch):
    dataset = _streaming_folder(tmp_path, monkeypatch, num_workers=3)
    assert dataset.loader_workers() == 3
    assert "dataset.num_workers=3" in dataset.describe_workers()
