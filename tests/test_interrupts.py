"""JobInterrupts, the headless job's Ctrl+C: only SIGINT and SIGTERM count, though the wakeup fd it reads carries
every signal with a Python handler (torch's DataLoader installs one for SIGCHLD: its workers ending at an
epoch's end once stopped a whole `workbench train` run)."""

from __future__ import annotations

import os
import signal
import threading
import time

from workbench.interrupts import JobInterrupts, exit_code_for


def _wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_child_ending_is_no_interrupt_but_sigterm_is():
    stop, forced = threading.Event(), []
    notices: list[str] = []
    previous = signal.signal(signal.SIGCHLD, lambda *_: None)  # what torch's DataLoader does
    try:
        with JobInterrupts(stop, forced.append, notice=notices.append) as interrupts:
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGCHLD)
            time.sleep(0.3)
            assert not stop.is_set() and interrupts.count == 0 and notices == []
            os.kill(os.getpid(), signal.SIGTERM)
            assert _wait_for(stop.is_set)
            assert interrupts.count == 1 and notices and notices[0].startswith("SIGTERM:")
            assert forced == []
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_exit_codes_follow_the_shell():
    assert exit_code_for(signal.SIGINT) == 130 and exit_code_for(signal.SIGTERM) == 143
