"""Checkpoints with real torch files: round trips, damaged files, and pickles that must never be executed."""

from __future__ import annotations

import errno
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.errors import CheckpointError
from workbench.worker.checkpoints import load_state_dict, save_state_dict


class _RunsShell:
    """Unpickling this runs a shell command: the classic malicious checkpoint."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))


def _hidden_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


def test_state_dict_round_trip(tmp_path):
    model = _model()
    path = tmp_path / "ckpt.pt"
    save_state_dict(model.state_dict(), path)
    loaded = load_state_dict(path)
    assert loaded.keys() == model.state_dict().keys()
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded[key], tensor), key
    fresh = _model()
    with torch.no_grad():
        for p in fresh.parameters():
            p.add_(1.0)
    fresh.load_state_dict(loaded)
    x = torch.randn(2, 1, 8, 8)
    model.eval(), fresh.eval()
    assert torch.equal(model(x), fresh(x))
    assert _hidden_files(tmp_path) == []


def test_training_checkpoint_dict_round_trip(tmp_path):
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 1, 8, 8)).sum().backward()
    opt.step()
    path = tmp_path / "resume.pt"
    save_state_dict({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}, path)
    loaded = load_state_dict(path)
    assert loaded["epoch"] == 3
    opt2 = torch.optim.SGD(_model().parameters(), lr=0.5, momentum=0.9)
    opt2.load_state_dict(loaded["optimizer"])
    assert opt2.param_groups[0]["lr"] == 0.1


def test_failed_save_keeps_previous_checkpoint(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_state_dict({"w": torch.ones(3)}, path)
    before = path.read_bytes()
    with pytest.raises(Exception):  # noqa: B017 - whatever pickle raises, the old file must survive
        save_state_dict({"w": torch.zeros(3), "hook": lambda: None}, path)
    assert path.read_bytes() == before
    assert torch.equal(load_state_dict(path)["w"], torch.ones(3))
    assert _hidden_files(tmp_path) == []


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere.pt"
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*does not exist"):
        load_state_dict(path)


def test_truncated_file(tmp_path):
    path = tmp_path / "half.pt"
    save_state_dict(_model().state_dict(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value)
    assert "is truncated or not a PyTorch checkpoint" in str(info.value)


@pytest.mark.parametrize("content", [b"", b"just some text\n", bytes(range(256)) * 4])
def test_empty_or_foreign_file(tmp_path, content):
    path = tmp_path / "odd.pt"
    path.write_bytes(content)
    with pytest.raises(
        CheckpointError, match=re.escape(str(path)) + ".*truncated or not a PyTorch checkpoint"
    ):
        load_state_dict(path)


def test_whole_module_is_refused_with_resave_advice(tmp_path):
    path = tmp_path / "whole_model.pt"
    torch.save(_model(), path)  # the common mistake: the module object, not its state_dict
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    message = str(info.value)
    assert str(path) in message
    assert "more than plain weights" in message and "NOT loaded" in message
    assert "torch.save(model.state_dict(), path)" in message


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_malicious_pickle_is_refused_and_not_run(tmp_path, protocol):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    with open(path, "wb") as f:
        pickle.dump(_RunsShell(f"touch {marker}"), f, protocol=protocol)
    with pytest.raises(CheckpointError) as info:
        load_state_dict(path)
    assert str(path) in str(info.value) and "NOT loaded" in str(info.value)
    assert not marker.exists()


def test_malicious_pickle_inside_zip_checkpoint_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil_zip.pt"
    torch.save({"weights": torch.ones(2), "payload": _RunsShell(f"touch {marker}")}, path)
    with pytest.raises(CheckpointError, match="NOT loaded"):
        load_state_dict(path)
    assert not marker.exists()


def test_tensor_alone_is_not_a_state_dict(tmp_path):
    path = tmp_path / "tensor.pt"
    torch.save(torch.arange(4), path)
    with pytest.raises(CheckpointError, match=re.escape(str(path)) + ".*is not a state_dict"):
        load_state_dict(path)


def test_save_refuses_non_dict(tmp_path):
    with pytest.raises(TypeError):
        save_state_dict(torch.ones(2), tmp_path / "x.pt")
    assert list(tmp_path.iterdir()) == []


# --- a full disk (issue #7): a message that says so, and the previous checkpoint untouched ------------------


class _FillsUp:
    """A file object whose writes fail with `error` once `room` bytes are written: a disk that fills
    mid-save."""

    def __init__(self, real, room: int, error: OSError):
        self._real, self._room, self._error = real, room, error

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if size > self._room:
            raise self._error
        self._room -= size
        return self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


def _fill_up_after(monkeypatch, room: int, code: int) -> None:
    real_fdopen = os.fdopen
    error = OSError(code, os.strerror(code))
    monkeypatch.setattr(
        os, "fdopen", lambda *args, **kwargs: _FillsUp(real_fdopen(*args, **kwargs), room, error)
    )


def _previous_checkpoint(directory: Path) -> tuple[Path, bytes]:
    path = directory / "last.pt"
    save_state_dict({"w": torch.ones(3)}, path)
    return path, path.read_bytes()


def _assert_untouched(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert torch.equal(load_state_dict(path)["w"], torch.ones(3))
    assert _hidden_files(path.parent) == []  # the temp file is gone too


@pytest.mark.parametrize(
    "code",
    [
        pytest.param(errno.ENOSPC, id="ENOSPC"),
        pytest.param(
            getattr(errno, "EDQUOT", 0),
            id="EDQUOT",
            marks=pytest.mark.skipif(not hasattr(errno, "EDQUOT"), reason="this platform has no disk quotas"),
        ),
    ],
)
def test_a_disk_that_fills_during_torch_save_is_reported_as_full(tmp_path, monkeypatch, code):
    path, before = _previous_checkpoint(tmp_path)
    _fill_up_after(monkeypatch, 1000, code)  # torch wraps this OSError in "[enforce fail ...] unexpected pos"
    with pytest.raises(CheckpointError) as info:
        save_state_dict({"w": torch.zeros(100_000)}, path, name="checkpoints/last.pt")
    message = str(info.value)
    assert message.startswith("disk full while saving checkpoints/last.pt; the previous checkpoint is intact")
    assert "unexpected pos" not in message and "about 391 KB" in message
    _assert_untouched(path, before)


def test_enospc_from_fsync_is_reported_as_full(tmp_path, monkeypatch):
    path, before = _previous_checkpoint(tmp_path)

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(
        CheckpointError, match=r"^disk full while saving .*last\.pt; the previous checkpoint is intact"
    ):
        save_state_dict({"w": torch.zeros(10)}, path)
    _assert_untouched(path, before)


def test_a_full_disk_with_no_earlier_file_says_none_was_left(tmp_path, monkeypatch):
    _fill_up_after(monkeypatch, 1000, errno.ENOSPC)
    with pytest.raises(CheckpointError, match="no earlier copy of it existed, and no partial file is left"):
        save_state_dict({"w": torch.zeros(100_000)}, tmp_path / "best.pt", name="checkpoints/best.pt")
    assert list(tmp_path.iterdir()) == []


def test_torchs_bare_write_error_counts_as_disk_full_only_when_the_disk_is_full(tmp_path, monkeypatch):
    # An I/O error torch reports as "unexpected pos": the errno is no help, the free space decides.
    path, before = _previous_checkpoint(tmp_path)
    _fill_up_after(monkeypatch, 1000, errno.EIO)
    with pytest.raises(CheckpointError) as info:
        save_state_dict({"w": torch.zeros(100_000)}, path, name="checkpoints/last.pt")
    assert str(info.value) == f"Cannot write checkpoint checkpoints/last.pt: {os.strerror(errno.EIO)}."
    _assert_untouched(path, before)

    real_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real_usage(p)._replace(free=4096))
    with pytest.raises(
        CheckpointError, match="^disk full while saving checkpoints/last.pt; the previous checkpoint"
    ):
        save_state_dict({"w": torch.zeros(100_000)}, path, name="checkpoints/last.pt")
    _assert_untouched(path, before)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs: a real file system that runs out of space (needs root, or the right to mount)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    if sys.platform != "linux" or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs Linux and mount(8)")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def test_a_real_full_disk_keeps_the_previous_checkpoint(tiny_disk):
    path, before = _previous_checkpoint(tiny_disk)
    with pytest.raises(CheckpointError) as info:
        save_state_dict(
            {"w": torch.zeros(2_000_000)}, path, name="checkpoints/last.pt"
        )  # 8 MB on a 1 MB disk
    message = str(info.value)
    assert message.startswith("disk full while saving checkpoints/last.pt; the previous checkpoint is intact")
    assert "7.6 MB" in message and str(tiny_disk) in message
    _assert_untouched(path, before)
    save_state_dict({"w": torch.ones(3)}, path)  # and the space came back: the temp file is really gone
