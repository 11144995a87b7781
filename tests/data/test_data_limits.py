"""Limits that keep hostile or unlucky data from taking the machine: image headers that claim huge sizes,
folder links that loop, and the memory budget every in-memory dataset is checked against (issue #19)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from data_helpers import Recorder, make_image_folder, save_image

from workbench.errors import JobError
from workbench.specs import MAX_IMAGE_SIDE, DataSpec
from workbench.worker.context import TaskContext
from workbench.worker.data import load_dataset, scan_image_folder, stores
from workbench.worker.data.imagefolder import FileStore
from workbench.worker.data.normalize import compute_stats
from workbench.worker.data.stores import ImageStore, memory_budget, nbytes

REPO = Path(__file__).resolve().parents[2]


def spec(**fields) -> DataSpec:
    return DataSpec.from_dict(fields)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def tiny_png_claiming(path: Path, width: int, height: int) -> Path:
    """A few dozen bytes of valid PNG structure whose header claims width x height RGB pixels (a decompression
    bomb's header without the bomb: the pixel data is a single empty row)."""
    # 8 bits, RGB, deflate, no filter, no interlace
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(b"\x00" * 4))
        + _chunk(b"IEND", b"")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png)
    return path


# -- A: one header does not size the folder -----------------------------------------------------------


INFO_CHILD = """
import json, resource, sys
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task
root, workspace = sys.argv[1], sys.argv[2]
# A guard, not the measure: a regression fails fast here instead of taking the shared machine's memory.
resource.setrlimit(resource.RLIMIT_DATA, (4 * 2**30, 4 * 2**30))
result = run_task(get_task("data.info"), {"dataset": {"name": "imagefolder", "root": root}}, emit=lambda *a: None,
                  workspace=workspace)
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so it would report the forking pytest's own size.
with open("/proc/self/status") as status:
    peak_kb = next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")),
                   resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
print(json.dumps({"result": result, "peak_bytes": peak_kb * 1024}))
"""  # noqa: E501


def test_a_tiny_png_claiming_12000x12000_is_skipped_and_does_not_size_the_folder(tmp_path):
    root = tmp_path / "folder"
    make_image_folder(root, classes=("a", "b"), per_class=20, size=(8, 8))
    bomb = tiny_png_claiming(root / "a" / "000-first.png", 12000, 12000)  # sorted first, probed first
    assert len(bomb.read_bytes()) < 100
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", INFO_CHILD, str(root), str(tmp_path / "ws")],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    result = report["result"]
    assert result["status"] == "done", result.get("error")
    assert result["sample_shape"] == [3, 8, 8]
    assert sum(result["num_samples"].values()) == 40
    skipped = {item["path"]: item["reason"] for item in result["skipped_files"]}
    assert list(skipped) == [str(bomb)]
    assert "12000x12000" in skipped[str(bomb)] and str(MAX_IMAGE_SIDE) in skipped[str(bomb)]
    assert report["peak_bytes"] < 2**30, f"peak memory {report['peak_bytes'] / 2**20:,.0f} MB"


def test_the_automatic_size_is_the_most_common_one_not_the_first(tmp_path):
    root = tmp_path / "mixed"
    make_image_folder(root, classes=("a", "b"), per_class=3, size=(8, 6))
    save_image(root / "a" / "000-big.png", np.zeros((20, 30, 3), dtype=np.uint8))  # first, but alone
    recorder = Recorder()
    ctx = TaskContext(recorder, workspace=tmp_path)
    try:
        ds = load_dataset(spec(name="imagefolder", root=str(root), val_fraction=0, test_fraction=0), ctx=ctx)
    finally:
        ctx.close()
    assert ds.sample_shape == (3, 8, 6)
    notes = " ".join(log["text"] for log in recorder.of("log"))
    assert "most common" in notes and "dataset.image_size" in notes
    assert ds.splits["train"].images(range(7)).shape == (7, 3, 8, 6)
    assert ds.skipped_files == []  # a larger image is resized like any other, not skipped


def test_a_header_beyond_the_side_limit_never_becomes_the_automatic_size(tmp_path):
    root = tmp_path / "huge"
    for name in ("a", "b"):
        for i in range(3):
            tiny_png_claiming(root / name / f"{i}.png", MAX_IMAGE_SIDE + 1000, 5000)
    with pytest.raises(JobError) as err:
        load_dataset(spec(name="imagefolder", root=str(root)), workspace=tmp_path)
    message = str(err.value)
    assert "dataset.image_size" in message and str(root / "a" / "0.png") in message
    assert f"{MAX_IMAGE_SIDE + 1000}x5000" in message and str(MAX_IMAGE_SIDE) in message


def test_an_image_size_beyond_the_memory_budget_is_refused_before_anything_is_allocated(
    tmp_path, monkeypatch
):
    root = tmp_path / "folder"
    make_image_folder(root, classes=("a", "b"), per_class=2, size=(8, 8))
    monkeypatch.setattr(stores, "available_memory", lambda: 256 * 2**20)
    with pytest.raises(JobError) as err:
        load_dataset(
            spec(name="imagefolder", root=str(root), image_size=[MAX_IMAGE_SIDE]), workspace=tmp_path
        )
    message = str(err.value)
    assert "dataset.image_size" in message and str(root) in message and "MB" in message


# -- B: a link to a folder's own ancestor ----------------------------------------------------------------


def test_a_link_to_an_ancestor_is_not_followed_and_is_named_as_skipped(tmp_path):
    root = tmp_path / "pets"
    make_image_folder(root, per_class=4)
    loop = root / "cat" / "loopup"
    os.symlink("..", loop)
    deep_loop = root / "dog" / "nested" / "back"
    os.symlink(root / "dog", deep_loop)
    outside = tmp_path / "more-fish"
    save_image(outside / "extra.png", np.zeros((12, 10, 3), dtype=np.uint8))
    os.symlink(outside, root / "fish" / "more")  # an ordinary link still counts
    everything = root / "zz-all"
    os.symlink(root, everything)  # a "class" that is the root itself
    scan = scan_image_folder(root)
    assert scan.classes == ["cat", "dog", "fish"] and scan.counts == [4, 4, 5]
    reasons = {item["path"]: item["reason"] for item in scan.skipped}
    assert set(reasons) == {str(loop), str(deep_loop), str(everything)}
    assert "loop" in reasons[str(loop)] and str(root) in reasons[str(loop)]
    ds = load_dataset(spec(name="imagefolder", root=str(root)), workspace=tmp_path)
    assert sum(len(s) for s in ds.splits.values()) == 13
    assert {item["path"] for item in ds.skipped_files} == {str(loop), str(deep_loop), str(everything)}


# -- C: one memory budget, from the machine's available memory -------------------------------------------


def test_the_budget_scales_with_the_available_memory():
    big = nbytes(3840, (3, 224, 224))  # the fake dataset refused on a 128 GB machine
    assert memory_budget(128 * 2**30) > 100 * big
    assert memory_budget(512 * 2**20) < big
    assert memory_budget(2 * 2**30) == 2 * memory_budget(2**30)
    available = stores.available_memory()
    assert available is None or available > 0
    assert memory_budget() > 0


def test_fake_is_checked_against_the_machine_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(stores, "available_memory", lambda: 8 * 2**20)
    # 7.7 MB: under the old fixed 512 MB, over this budget
    fields = dict(name="fake", size=100, image_size=[160])
    with pytest.raises(JobError) as err:
        load_dataset(spec(**fields), workspace=tmp_path)
    message = str(err.value)
    assert "dataset.size" in message and "dataset.image_size" in message and "available" in message
    monkeypatch.setattr(stores, "available_memory", lambda: 4 * 2**30)
    assert load_dataset(spec(**fields), workspace=tmp_path).sample_shape == (3, 160, 160)


class RecordingStore(ImageStore):
    """Claims images of `shape` but hands out 1x1 ones, recording how many each fetch asks for: what matters
    is the size of the float64 copy that mean/std would make of a chunk at the claimed shape."""

    def __init__(self, count: int, shape: tuple[int, int, int]):
        self.labels = torch.zeros(count, dtype=torch.int64)
        self.shape = shape
        self.asked: list[int] = []

    def fetch(self, indices):
        self.asked.append(len(indices))
        return torch.full((len(indices), self.shape[0], 1, 1), 7, dtype=torch.uint8), torch.ones(
            len(indices), dtype=torch.bool
        )


def test_mean_and_std_of_large_images_are_summed_a_few_at_a_time():
    store = RecordingStore(40, (3, MAX_IMAGE_SIDE, MAX_IMAGE_SIDE))
    compute_stats(store, torch.arange(40))
    assert sum(store.asked) == 40
    # not 40 images' 16 GB as float64 at once
    assert max(store.asked) * 8 * nbytes(1, store.shape) <= 512 * 2**20


class GroupRecordingFileStore(FileStore):
    def _decode_many(self, indices):
        self.groups = [*getattr(self, "groups", []), len(indices)]
        return super()._decode_many(indices)


@pytest.mark.parametrize("memory_limit", [0, None])  # read from the files as used, and held whole
def test_decoding_many_files_holds_a_cache_worth_of_images_at_once(tmp_path, memory_limit):
    paths = [str(p) for p in make_image_folder(tmp_path / "f", classes=("a", "b"), per_class=5, size=(8, 8))]
    store = GroupRecordingFileStore(
        paths, torch.zeros(10, dtype=torch.int64), (3, 8, 8), "RGB", memory_limit=memory_limit
    )
    store._lru_capacity = 4  # as for images of 64 MB each
    store.decode(torch.arange(10))
    assert store.groups == [4, 4, 2] and store.fully_decoded and store.skipped_files == []


def test_resizing_a_builtin_dataset_is_checked_against_the_budget_before_it_is_allocated(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(stores, "available_memory", lambda: 8 * 2**20)
    with pytest.raises(JobError) as err:  # 1,797 digits at 64x64 take 7.4 MB, over the 4 MB budget of 8 MB
        load_dataset(spec(name="digits", image_size=[64]), workspace=tmp_path)
    assert "dataset.image_size" in str(err.value) and "64x64" in str(err.value)
