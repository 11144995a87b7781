"""Torch's CPU threads for one job, sized to the cores that are free when it starts.

A desktop user runs jobs side by side. With torch's default of a thread per core, a job whose cores are partly
busy (a training beside it, a second workbench) makes every parallel op wait for a descheduled partner thread:
measured, a quantize went from 3 s to 18 s on a loaded 2-core machine, and AdaRound from 15 s to 230 s. One
thread per free core keeps it near its quiet-machine time. OMP_NUM_THREADS, when set, is the user's word and
is left alone.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator

import torch

SAMPLE_S = 0.1  # how long the machine's load is looked at before the job starts


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot, from /proc/stat; None where there is none (not
    Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(value) for value in fields[1:]]
    # idle + iowait: a core waiting on a disk is free
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return sum(values) - idle, sum(values)


def busy_cores(sample_s: float = SAMPLE_S) -> float | None:
    """How many cores other work keeps busy now (this process is idle while it looks), or None if unknown."""
    first = _cpu_times()
    if first is None:
        return None
    time.sleep(sample_s)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return None
    share = (second[0] - first[0]) / (second[1] - first[1])
    return share * (os.cpu_count() or 1)


def threads_for(free: float, most: int) -> int:
    """One thread per free core (rounded, at least one), never more than `most`."""
    return max(1, min(most, math.floor(free + 0.5)))


@contextlib.contextmanager
def sized_threads(
    log: Callable[[str], None] | None = None, *, measure: Callable[[], float | None] = busy_cores
) -> Iterator[int]:
    """Inside: torch's intra-op threads sized to the CPU's free cores (on any device: a CUDA job's host-side
    ops use them too). Yields the thread count; restores torch's count after."""
    before = torch.get_num_threads()
    if os.environ.get("OMP_NUM_THREADS"):
        yield before
        return
    busy = measure()
    cores = os.cpu_count() or 1
    threads = before if busy is None else threads_for(cores - busy, before)
    if threads == before:
        yield before
        return
    torch.set_num_threads(threads)
    if log is not None:
        log(
            f"{busy:.1f} of {cores} cores are busy with other work: torch uses {threads} thread(s) for this "
            "job rather than waiting on busy ones (set OMP_NUM_THREADS to choose)"
        )
    try:
        yield threads
    finally:
        torch.set_num_threads(before)
