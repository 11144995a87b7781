"""A disk that fills up while training writes checkpoints on its background thread (issue #7): the job fails
with "disk full while saving checkpoints/last.pt", not torch's "unexpected pos", and the previous last.pt
survives."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch
from training_helpers import QUICK, failed, merge, train

from workbench.errors import CheckpointError
from workbench.runs import Run
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.training import load_last
from workbench.worker.training.writer import CheckpointWriter

PROC_FD = Path("/proc/self/fd")


class _NoRoom:
    """A file object whose writes fail with ENOSPC after its first KB: the low-level write of a disk filling
    up. (That first KB matters: torch then reports the failure as "unexpected pos", not as the OSError.)"""

    def __init__(self, real):
        self._real = real
        self._room = 1024

    def write(self, data) -> int:
        size = memoryview(data).nbytes
        if size > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= size
        return self._real.write(data)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._real.close()


def _disk_fills_for(monkeypatch, name: str, after: int, via: str) -> None:
    """Writing (via="write": torch.save's writes; via="fsync": the sync after them) the temp file of a
    checkpoint called `name` fails with ENOSPC once `after` of them succeeded; every other file (spec, report,
    events) is written as usual. The temp file's name comes from /proc."""
    if not PROC_FD.is_dir():
        pytest.skip("needs /proc/self/fd to tell which file is being written")
    done = {"count": 0}

    def full(fd) -> bool:
        target = Path(os.readlink(PROC_FD / str(fd)))
        if target.parent.name != "checkpoints" or not target.name.startswith(f".{name}."):
            return False
        if done["count"] >= after:
            return True
        done["count"] += 1
        return False

    if via == "write":
        real_fdopen = os.fdopen
        monkeypatch.setattr(
            os,
            "fdopen",
            lambda fd, *args, **kwargs: (
                _NoRoom(real_fdopen(fd, *args, **kwargs)) if full(fd) else real_fdopen(fd, *args, **kwargs)
            ),
        )
    else:
        real_fsync = os.fsync

        def fsync(fd):
            if full(fd):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)


def _hidden(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("via", ["write", "fsync"])
def test_a_full_disk_fails_the_job_with_a_clear_message_and_keeps_the_previous_last_pt(
    tmp_path, monkeypatch, via
):
    # epoch 1's last.pt is written; epoch 2's is not
    _disk_fills_for(monkeypatch, "last.pt", after=1, via=via)
    result = train(tmp_path, merge(QUICK, epochs=2, model={"name": "mlp"}))
    # Before: via write, torch's RuntimeError "[enforce fail at inline_container.cc:...] unexpected pos" as an
    # internal error; via fsync, "Cannot write checkpoint /full/path/last.pt: No space left on device".
    message = failed(result)
    assert message.startswith("disk full while saving checkpoints/last.pt; the previous checkpoint is intact")
    checkpoints = Path(result["run_dir"]) / "checkpoints"
    assert _hidden(checkpoints) == []
    saved = load_last(checkpoints / "last.pt")
    assert saved["state"]["epoch"] == 1 and saved["state"]["global_step"] == 23
    assert not (checkpoints / "model.pt").exists()
    with Run(result["run_dir"]) as run:
        assert run.status == "failed" and run.message.startswith("disk full while saving checkpoints/last.pt")
    assert result["error"]["type"] == "CheckpointError"


def test_the_writer_hands_the_error_to_the_next_wait_and_names_the_file_relative_to_the_run(
    tmp_path, monkeypatch
):
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    writer = CheckpointWriter(relative_to=tmp_path)
    writer.submit({"w": torch.ones(3)}, checkpoints / "best.pt")
    writer.wait()
    _disk_fills_for(monkeypatch, "best.pt", after=0, via="write")
    writer.submit({"w": torch.zeros(3)}, checkpoints / "best.pt")
    with pytest.raises(
        CheckpointError,
        match="^disk full while saving checkpoints/best.pt; the previous checkpoint is intact",
    ):
        writer.wait()
    writer.close()
    assert torch.equal(load_state_dict(checkpoints / "best.pt")["w"], torch.ones(3))
    assert _hidden(checkpoints) == []
