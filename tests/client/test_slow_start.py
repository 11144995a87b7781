"""A worker that is slow to start: the caller never blocks, and a start that takes too long is reported."""

from __future__ import annotations

import sys
import time

import pytest

from workbench.client import WorkerManager

SLOW = "import time, sys; time.sleep({delay}); from workbench.worker.__main__ import main; sys.exit(main())"


def _slow_command(delay: float) -> list[str]:
    return [sys.executable, "-c", SLOW.format(delay=delay)]


@pytest.mark.slow
def test_a_slow_worker_start_does_not_block_the_caller(tmp_path):
    manager = WorkerManager(command=_slow_command(1.5), runtime_dir=tmp_path)
    states = []
    manager.add_listener(lambda kind, payload: kind == "state" and states.append(payload[0]))
    try:
        started = time.monotonic()
        manager.start(wait=False)
        # The worker sleeps 1.5 s before it can answer, so a start() that waited for it could not return
        # sooner.
        assert time.monotonic() - started < 1.5
        assert manager.state == "starting"
        deadline = time.monotonic() + 30
        while manager.state != "ready" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manager.state == "ready" and states[:2] == ["starting", "ready"]
        record = manager.submit("debug.count", {"steps": 3, "delay": 0})
        assert manager.wait_job(record.job_id, 20).state == "done"
    finally:
        manager.shutdown()


@pytest.mark.slow
def test_a_worker_that_never_opens_its_ports_is_reported_dead(tmp_path):
    manager = WorkerManager(command=_slow_command(30), runtime_dir=tmp_path, start_timeout=1.0)
    try:
        assert manager.start(wait=True) is False
        assert manager.state == "dead"
        assert "did not open its ports within 1 s" in manager.detail
        assert manager.process.poll() is not None  # the stuck process was not left behind
    finally:
        manager.shutdown()
