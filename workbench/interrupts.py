"""Ctrl+C and SIGTERM for a headless job: the first asks the job to stop at its next step, the second stops
now.

The signals are read by a watcher thread through `signal.set_wakeup_fd`, so a second Ctrl+C works even
while the main thread is stuck inside a user's `forward` (a sleep, a spin, a long C call). Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable

FIRST_NOTICE = "stopping at the next step (a checkpoint is kept); press Ctrl+C again to stop at once"


class JobInterrupts:
    """Context manager: `stop` is set on the first SIGINT/SIGTERM, `force(signum)` runs on the second."""

    def __init__(
        self,
        stop: threading.Event,
        force: Callable[[int], None],
        *,
        notice: Callable[[str], None] | None = None,
    ):
        self.stop = stop
        self.force = force
        self.notice = notice or (lambda text: print(f"workbench: {text}", file=sys.stderr, flush=True))
        self.count = 0
        self._previous: dict[int, object] = {}
        self._previous_wakeup = -1
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def __enter__(self) -> JobInterrupts:
        if threading.current_thread() is not threading.main_thread():
            return self  # signals only reach the main thread's handlers; a caller on a thread cancels itself
        reader, writer = socket.socketpair()
        reader.setblocking(True)
        writer.setblocking(False)
        self._pair = (reader, writer)
        for signum in (signal.SIGINT, signal.SIGTERM):
            # A Python-level handler must exist for the C-level one (which writes the wakeup fd) to be
            # installed; it does nothing itself, so an interrupted sleep in user code simply resumes.
            self._previous[signum] = signal.signal(signum, lambda *_: None)
        self._previous_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="interrupts", daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        reader = self._pair[0]
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data or self._closing:
                return
            for signum in data:
                # The wakeup fd carries every signal that has a Python handler: torch's DataLoader installs
                # one for SIGCHLD, and its worker processes ending at an epoch's end are no request to stop.
                if signum in (signal.SIGINT, signal.SIGTERM):
                    self._on_signal(signum)

    def _on_signal(self, signum: int) -> None:
        self.count += 1
        if self.count == 1:
            name = "Ctrl+C" if signum == signal.SIGINT else signal.Signals(signum).name
            # The notice goes first: whoever sees `stop` set may read what was said (a test did, and raced).
            self.notice(f"{name}: {FIRST_NOTICE}")
            self.stop.set()
        else:
            self.force(signum)

    def __exit__(self, *exc) -> None:
        if self._pair is None:
            return
        self._closing = True
        signal.set_wakeup_fd(self._previous_wakeup)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        reader, writer = self._pair
        with contextlib.suppress(OSError):
            writer.send(b"\0")  # wakes the watcher, which sees _closing and returns
        if self._thread is not None:
            self._thread.join(timeout=1)
        reader.close()
        writer.close()


def exit_code_for(signum: int) -> int:
    """130 for Ctrl+C, 143 for SIGTERM: the shell's own convention, 128 + the signal number."""
    return 128 + int(signum)


# kept before guard_exit replaces os._exit, so our own hard exit is never taken for user code's
_real_exit = os._exit


def _child_pids() -> list[int]:
    """This process's child processes (DataLoader workers, a user's subprocesses): /proc's parent pids on
    Linux, else the children multiprocessing started."""
    me = os.getpid()
    pids = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        import multiprocessing

        return [child.pid for child in multiprocessing.active_children() if child.pid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # The command name (field 2) may hold spaces and parentheses: the parent pid follows its last
                # ")".
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == me:
            pids.append(int(entry))
    return pids


def end_children() -> None:
    """SIGKILL this process's children: leaving without the main thread's cleanup would orphan them (a
    DataLoader worker busy in `__getitem__` never notices its parent is gone), and nothing a job started may
    outlive it."""
    for pid in _child_pids():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def hard_exit(code: int) -> None:
    """Leave now, without running the stuck main thread's cleanup (it may never return), and take the job's
    child processes along."""
    with contextlib.suppress(Exception):
        end_children()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    _real_exit(code)


@contextlib.contextmanager
def guard_exit(on_exit: Callable[[int], int]):
    """While a job runs, `os._exit` called by user code in this process (not in a forked child:
    multiprocessing's own children leave through it) first runs `on_exit(code)`, which says what happened and
    gives the exit code to leave with. Without this the process would vanish with its status and no result at
    all."""
    owner = os.getpid()

    def guarded(code: int) -> None:
        if os.getpid() != owner:
            _real_exit(code)
        leave_with = 1
        try:
            leave_with = on_exit(code)
        finally:
            hard_exit(leave_with)

    os._exit = guarded
    try:
        yield
    finally:
        os._exit = _real_exit
