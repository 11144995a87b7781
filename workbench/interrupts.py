"""Ctrl+C and SIGTERM for a headless job: the first asks the job to stop at its next step, the second stops now.

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

    def __init__(self, stop: threading.Event, force: Callable[[int], None], *,
                 notice: Callable[[str], None] | None = None):
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
                # The wakeup fd carries every signal that has a Python handler: torch's DataLoader installs one
                # for SIGCHLD, and its worker processes ending at an epoch's end are no request to stop.
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


def hard_exit(code: int) -> None:
    """Leave now, without running the stuck main thread's cleanup (it may never return)."""
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)
