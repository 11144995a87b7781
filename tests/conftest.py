"""Test-wide setup: Qt renders offscreen (set before any Qt import), settings never touch the user's own, and
Python's cycle collector runs only in the main thread, as in the app (workbench/gui/gui_thread_gc.py)."""

import gc
import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# One intra-op thread per torch process (this one, its workers, its CLI children), set before torch is
# imported. The suite runs a process per core, and each spawns more: with torch's default of a thread per
# core, OpenMP's spinning threads fought over two cores and a digits epoch ran at 28 samples/s instead of
# 6,000.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("QTWEBENGINE_DISABLE_SANDBOX", "1")

_THRESHOLDS = gc.get_threshold()

# Tests never assert on time: hypothesis's 200 ms deadline per example failed a pure-numpy property on a
# loaded two-core CI machine (an example took 460 ms once, 25 ms on replay).
from hypothesis import settings  # noqa: E402

settings.register_profile("workbench", deadline=None)
settings.load_profile("workbench")


def pytest_configure(config):
    # GUI tests run a fake worker in a thread of this process: left automatic, the collector would now and
    # then free a test's Qt widgets in that thread and deadlock on Qt's locks against the GIL (it hung CI
    # once).
    gc.disable()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # Collect between tests, in the main thread, each generation that is due (as automatic collection would).
    counts = gc.get_count()
    for generation in (2, 1, 0):
        if counts[generation] > _THRESHOLDS[generation]:
            gc.collect(generation)
            return


os.environ.setdefault("WORKBENCH_NO_OPEN", "1")  # the window opens no browser or file manager from a test
