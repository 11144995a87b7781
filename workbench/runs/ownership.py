"""Who owns a run: the process running its job holds an exclusive flock on the run's lock file for as long as
the job lives; staging leftovers of a dead owner are swept. No torch, no Qt.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from workbench.errors import JobError
from workbench.runs.layout import LOCK_NAME, _now

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are then not guarded against a second writer
    fcntl = None


# --- ownership -------------------------------------------------------------------------------------
# A run has one owner: the process that runs its job holds an exclusive flock on <run>/.owner.lock for
# as long as the job lives. The kernel drops the lock when that process dies, however it dies (SIGKILL,
# os._exit, a segfault), so "running" with a free lock can only mean the run was interrupted.


class RunBusyError(JobError):
    """Another live process owns the run: a second writer or a delete must wait for it or stop it."""


def _describe_owner(info: dict) -> str:
    parts = [
        f"pid {info['pid']}" if info.get("pid") else "",
        f"on {info['host']}" if info.get("host") else "",
        f"since {info['since']}" if info.get("since") else "",
    ]
    return " ".join(p for p in parts if p) or "another process"


def _read_owner_info(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        info = json.loads(data.decode("utf-8")) if data else {}
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


class RunOwner:
    """The exclusive lock that makes this process the one writer of a run; `release()` (or exit) frees it."""

    def __init__(self, run_dir: Path, fd: int | None):
        self.run_dir = run_dir
        self._fd = fd

    @classmethod
    def acquire(cls, run_dir: str | Path, *, wait: float = 0.5, doing: str = "write to it") -> RunOwner:
        """Take the lock, retrying for `wait` seconds; raises RunBusyError naming the live owner."""
        run_dir = Path(run_dir)
        if fcntl is None:
            return cls(run_dir, None)
        path = run_dir / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise JobError(f"Cannot lock run {run_dir.name} ({path}): {exc.strerror or exc}") from exc
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # A reader's brief shared probe (run_owner) also blocks us: retry before calling it busy.
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                info = _read_owner_info(fd)
                os.close(fd)
                raise RunBusyError(
                    f"Run {run_dir.name} is in use by a running job ({_describe_owner(info)}); "
                    f"stop it first, or wait for it to finish, before you {doing}."
                ) from None
            except OSError as exc:
                os.close(fd)
                raise JobError(f"Cannot lock run {run_dir.name} ({path}): {exc.strerror or exc}") from exc
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
        with contextlib.suppress(OSError):  # who holds it is for messages only
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        return cls(run_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor drops the flock


def run_owner(run_dir: str | Path) -> dict | None:
    """{pid, host, since} of the live process that owns the run, or None when nobody does.

    Read-only: a shared, non-blocking probe of the lock, which works on a read-only workspace too.
    """
    if fcntl is None:
        return None
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None  # no lock file: a run made before locks existed, or a half-made one; nobody owns it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner_info(fd)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _staging_leftovers(run_dir: Path) -> list[Path]:
    """Hidden staging folders (an export's `.model.onnx.<random>/`) and temp files (`.last.pt.<hex>.tmp`)
    that only a job killed mid-write leaves behind: a finished write renames or removes its own."""
    found = []
    for folder in (run_dir, run_dir / "artifacts", run_dir / "checkpoints"):
        try:
            items = list(folder.iterdir())
        except OSError:
            continue
        for item in items:
            if not item.name.startswith(".") or item.name.startswith(".creating-"):
                continue
            if (item.is_dir() and not item.is_symlink() and folder.name == "artifacts") or (
                item.name.endswith(".tmp") and item.is_file()
            ):
                found.append(item)
    return found


def _remove_leftovers(items: list[Path]) -> None:
    for item in items:
        with contextlib.suppress(OSError):  # a read-only workspace keeps them: they are hidden and harmless
            if item.is_dir():
                shutil.rmtree(item)
            else:
                item.unlink()


def sweep_dead_staging(run_dir: str | Path) -> None:
    """Remove what a killed job left half-written in its run, once nobody owns the run any more.

    Looks first and touches nothing when there is nothing to remove, so reading a clean run still changes
    nothing; the lock is held while removing, so a live job's staging is never taken from under it.
    """
    run_dir = Path(run_dir)
    leftovers = _staging_leftovers(run_dir)
    if not leftovers or fcntl is None:
        return
    try:
        # read-only: flock needs no write access, the file stays
        fd = os.open(run_dir / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return  # no lock file: nothing tells whether a job still writes there, so leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # a live job owns the run: its staging is in use
    try:
        _remove_leftovers(leftovers)
    finally:
        os.close(fd)
