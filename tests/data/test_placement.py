"""Where batches are gathered (issue 12): kept on the device, staged through reused buffers by a background
thread, or on the host. Every placement must give the same batches; the choice follows dataset.on_device. On a
CPU-only machine the device and staged paths run with the CPU as their device, the same code as on CUDA."""

from __future__ import annotations

import threading

import pytest
import torch
from data_helpers import add_bad_files, make_image_folder

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.worker.data import load_dataset
from workbench.worker.data.placement import DEVICE, HOST, STAGED, Staging, choose
from workbench.worker.data.stores import TensorStore

AUGMENT = [
    {"name": "random_crop", "size": 8, "padding": 1},
    {"name": "hflip"},
    {"name": "rotation", "degrees": 10},
    {"name": "random_erasing", "p": 0.5},
]
PLACEMENTS = (HOST, DEVICE, STAGED)


def _spec(**changes) -> DataSpec:
    return DataSpec.from_dict({"name": "digits", **changes})


def _all(split, placement, **kw):
    return list(split.batches(kw.pop("batch_size", 64), placement=placement, **kw))


def _same(a, b) -> None:
    assert len(a) == len(b)
    for (xa, ya), (xb, yb) in zip(a, b):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("augment", [False, True])
def test_every_placement_gives_the_same_batches(tmp_path, augment):
    train = load_dataset(_spec(augment=AUGMENT), workspace=tmp_path).splits["train"]
    runs = {p: _all(train, p, shuffle=True, seed=3, epoch=1, augment=augment) for p in PLACEMENTS}
    assert sum(len(y) for _, y in runs[HOST]) == len(train)
    _same(runs[HOST], runs[DEVICE])
    _same(runs[HOST], runs[STAGED])


def test_evaluation_batches_keep_indices_and_a_rank_share_in_every_placement(tmp_path):
    val = load_dataset(_spec(), workspace=tmp_path).splits["val"]
    runs = {p: list(val.indexed_batches(16, placement=p, rank=1, world=2)) for p in PLACEMENTS}
    for placement, batches in runs.items():
        indices = torch.cat([i for i, _, _ in batches])
        # Batches 1, 3, 5, ... of 16 in split order: rank 1 of 2.
        expected = torch.cat([torch.arange(s, min(s + 16, len(val))) for s in range(16, len(val), 32)])
        assert torch.equal(indices, expected), placement
        for i, _x, y in batches:
            assert torch.equal(y, val.labels[i])
    for (ia, xa, ya), (ib, xb, yb) in zip(runs[HOST], runs[DEVICE]):
        assert torch.equal(ia, ib) and torch.equal(xa, xb) and torch.equal(ya, yb)
    for (ia, xa, ya), (ib, xb, yb) in zip(runs[HOST], runs[STAGED]):
        assert torch.equal(ia, ib) and torch.equal(xa, xb) and torch.equal(ya, yb)


def test_files_that_do_not_decode_leave_the_same_batches_in_every_placement(tmp_path):
    root = tmp_path / "pets"
    make_image_folder(root, per_class=6, size=(12, 10))
    add_bad_files(root, "cat")
    spec = _spec(name="imagefolder", root=str(root), val_fraction=0.0, test_fraction=0.0)
    runs = {}
    for placement in PLACEMENTS:
        train = load_dataset(spec, workspace=tmp_path).splits["train"]
        runs[placement] = _all(train, placement, batch_size=4, shuffle=True, seed=0, augment=False)
        assert sum(len(y) for _, y in runs[placement]) == 18  # the 2 bad files are left out of their batches
    _same(runs[HOST], runs[DEVICE])
    _same(runs[HOST], runs[STAGED])


def test_on_device_auto_keeps_host_memory_on_the_cpu_and_true_places_the_data(tmp_path):
    auto = load_dataset(_spec(), workspace=tmp_path)
    assert auto.prepare("cpu")[0] == HOST  # the CPU trains from host memory: nothing to move
    forced = load_dataset(_spec(on_device=True), workspace=tmp_path)
    mode, why = forced.prepare("cpu")
    assert mode == DEVICE and "on_device=true" in why
    train = forced.splits["train"]
    placed = forced.on_device_store(train.store, "cpu")
    # on the CPU the "device copy" is the store itself
    assert placed.data.data_ptr() == train.store.data.data_ptr()
    forced.release()
    assert forced._on_device == {}


def test_on_device_true_is_refused_for_data_read_from_files(tmp_path):
    root = tmp_path / "pets"
    make_image_folder(root, per_class=2, size=(12, 10))
    spec = _spec(name="imagefolder", root=str(root), val_fraction=0.0, test_fraction=0.0, on_device=True)
    ds = load_dataset(spec, workspace=tmp_path)
    for store in ds.core.stores:
        store.in_memory = False  # as a folder too big for memory is
    with pytest.raises(JobError, match="on_device: true needs a dataset held in memory"):
        ds.prepare("cpu")


class _Store(TensorStore):
    def __init__(self, n):
        super().__init__(torch.zeros((n, 1, 1, 1), dtype=torch.uint8), torch.zeros(n))


@pytest.mark.parametrize(
    ("setting", "free", "expected"),
    [
        ("auto", 4_000, DEVICE),  # 100 bytes of data: well under a quarter of 4,000 free
        ("auto", 400, STAGED),  # exactly a quarter is too much: the model needs the rest
        (False, 10**9, STAGED),
        (True, 10, DEVICE),  # asked for: tried even where it will hardly fit
    ],
)
def test_auto_keeps_data_on_cuda_only_under_a_quarter_of_free_memory(monkeypatch, setting, free, expected):
    # The rule alone, on any machine: free memory comes from a stand-in for torch.cuda.mem_get_info.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 10 * free))
    mode, why = choose(setting, torch.device("cuda"), [_Store(100)])
    assert mode == expected, why


def test_a_cuda_dataset_read_from_files_is_staged():
    store = _Store(10)
    store.in_memory = False
    # never asks the device: nothing to place
    assert choose("auto", torch.device("cuda"), [store])[0] == STAGED


def test_staging_buffers_are_reused_and_only_pinned_for_cuda():
    staging = Staging(8, (1, 4, 4), torch.device("cpu"), pin=True)
    assert len(staging.images) == 3 and not staging.pinned  # pinned memory is for copies to CUDA only
    assert all(image.shape == (8, 1, 4, 4) for image in staging.images)


def test_a_consumer_that_stops_early_stops_the_staging_thread(tmp_path):
    train = load_dataset(_spec(), workspace=tmp_path).splits["train"]
    before = {t.ident for t in threading.enumerate() if t.name == "batch-staging"}
    batches = train.batches(8, shuffle=True, placement=STAGED)
    next(batches)
    [thread] = [t for t in threading.enumerate() if t.name == "batch-staging" and t.ident not in before]
    batches.close()
    thread.join(timeout=30)  # a bound for a hung thread, not a speed expectation
    assert not thread.is_alive()


def test_an_unknown_placement_is_a_clear_error(tmp_path):
    train = load_dataset(_spec(), workspace=tmp_path).splits["train"]
    with pytest.raises(ValueError, match="placement must be one of"):
        next(train.batches(8, shuffle=False, placement="gpu"))
