"""How run_task reports a job whose run cannot be written (a full disk) and what a library's terminal colours
become on the way to the user (issue #19, 5.9 and 5.14): real run folders, a disk
that reports itself full at fsync."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from workbench.errors import JobError
from workbench.runs import RunStore
from workbench.worker.registry import TaskInfo
from workbench.worker.runner import run_task

COLOURED = "\x1b[96mThis is step 1/3\x1b[0m: \x1b[1mexport failed\x1b[0m"


def _task(fn, name: str = "test.task") -> TaskInfo:
    return TaskInfo(name, fn, "job", None, True, "")


class FillableDisk:
    """A workspace whose disk fills on demand: once `fill()` is called, every fsync fails with ENOSPC, as a
    full disk with delayed allocation does. (A real tmpfs needs mount rights, and a sandbox that ignores its
    size lets a filler loop write into memory without end: the CI run on record hung there.)"""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.full = False
        real_fsync = os.fsync

        def fsync(fd):
            if self.full:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)

    def fill(self) -> None:
        self.full = True


@pytest.fixture
def tiny_disk(tmp_path: Path, monkeypatch) -> FillableDisk:
    return FillableDisk(tmp_path / "disk", monkeypatch)


def test_a_disk_that_fills_after_the_run_is_made_still_names_the_run(tiny_disk, monkeypatch):
    workspace = tiny_disk.root / "ws"
    real_create = RunStore.create_run

    def create_then_fill(self, *args, **kwargs):
        run = real_create(self, *args, **kwargs)
        tiny_disk.fill()  # completely full from the first status write on
        return run

    monkeypatch.setattr(RunStore, "create_run", create_then_fill)
    result = run_task(_task(lambda spec, ctx: {"value": 1}), {}, emit=lambda *a: None, workspace=workspace)
    run_dirs = [p for p in (workspace / "runs").iterdir() if not p.name.startswith(".")]
    assert len(run_dirs) == 1
    assert result["run_dir"] == str(run_dirs[0])
    assert result["status"] == "failed"
    assert "full" in result["error"]["message"] or "space" in result["error"]["message"]


def test_a_job_that_fills_the_disk_says_its_outcome_was_not_saved(tiny_disk):
    def fills(spec, ctx):
        tiny_disk.fill()
        return {"value": 1}

    result = run_task(_task(fills), {}, emit=lambda *a: None, workspace=tiny_disk.root / "ws")
    assert result["run_dir"] and Path(result["run_dir"]).is_dir()
    assert result["status"] == "failed"
    assert "could not be saved in " + result["run_dir"] in result["error"]["message"]


def test_terminal_colours_never_reach_the_user(tmp_path: Path):
    events: list[tuple[str, dict]] = []

    def coloured(spec, ctx):
        ctx.log(COLOURED, "warning")
        ctx.progress(1, 2, COLOURED, force=True)
        ctx.array("bench/results", [1.0], rows=[{"backend": "onnxruntime", "reason": COLOURED}])
        raise JobError(COLOURED)

    result = run_task(
        _task(coloured),
        {},
        emit=lambda kind, content, buffers: events.append((kind, content)),
        workspace=tmp_path / "ws",
    )
    plain = "This is step 1/3: export failed"
    assert result["error"]["message"] == plain
    assert [c["text"] for k, c in events if k == "log"] == [plain]
    assert [c["text"] for k, c in events if k == "progress"] == [plain]
    assert [c["rows"][0]["reason"] for k, c in events if k == "array"] == [plain]
    assert "\x1b" not in Path(result["run_dir"], "report.json").read_text()
    with RunStore(tmp_path / "ws").open_run(Path(result["run_dir"]).name) as run:
        assert "\x1b" not in repr(run.summary())


def test_strip_ansi_leaves_plain_text_alone():
    from workbench.text import strip_ansi, strip_ansi_deep

    assert strip_ansi("loss 0.5 [ok]") == "loss 0.5 [ok]"
    assert strip_ansi("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x1b[2K\x1b[1;31mred\x1b[m") == "link red"
    assert strip_ansi_deep({"rows": [{"reason": "\x1b[96mx\x1b[0m"}], "n": 3}) == {
        "rows": [{"reason": "x"}],
        "n": 3,
    }
