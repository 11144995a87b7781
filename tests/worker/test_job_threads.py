"""Torch's threads for a job are sized to the free cores (issue #22 part 4): a real busy neighbour is seen,
the count follows it, OMP_NUM_THREADS is the user's word, and torch's own count comes back after the job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from workbench.worker.job_threads import busy_cores, sized_threads, threads_for


def test_threads_follow_the_free_cores():
    assert threads_for(free=2.0, most=2) == 2
    assert threads_for(free=1.1, most=2) == 1
    assert threads_for(free=0.2, most=8) == 1  # at least one
    assert threads_for(free=7.6, most=4) == 4  # never more than torch's own count
    assert threads_for(free=2.5, most=8) == 3


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="reads Linux's /proc/stat")
def test_a_busy_neighbour_is_counted():
    neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = busy_cores(0.5)
    finally:
        neighbour.kill()
        neighbour.wait()
    assert busy is not None and busy >= 0.7  # the spinning process keeps about one core busy


def test_the_job_gets_one_thread_per_free_core_and_torch_its_count_back(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    said = []
    try:
        with sized_threads(said.append, measure=lambda: 2.6) as threads:
            assert threads == torch.get_num_threads() == 1
        assert torch.get_num_threads() == 4
        assert said == [
            "2.6 of 4 cores are busy with other work: torch uses 1 thread(s) for this job rather than "
            "waiting on busy ones (set OMP_NUM_THREADS to choose)"
        ]
        # a quiet machine: as it was, nothing said
        with sized_threads(said.append, measure=lambda: 0.1) as threads:
            assert threads == 4
        with sized_threads(said.append, measure=lambda: None) as threads:  # no /proc/stat: as it was
            assert threads == 4
        assert len(said) == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        with sized_threads(said.append, measure=lambda: 3.9) as threads:  # the user's word
            assert threads == 4 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
