"""Garbage in the GUI process is freed in the GUI thread, never in a background thread that happened to
allocate (where freeing a Qt object deadlocks against the GUI thread)."""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject

from workbench.gui.gui_thread_gc import GuiThreadGarbageCollector


def _churn() -> None:
    junk = [[] for _ in range(50_000)]  # far past the youngest generation's threshold
    for item in junk:
        item.append(item)


def test_a_qt_object_in_a_cycle_is_freed_by_the_gui_thread_not_by_the_thread_that_allocates(qtbot):
    was_enabled = gc.isenabled()
    gc.enable()  # what a fresh process has; the collector must be what turns it off
    collector = GuiThreadGarbageCollector(interval_ms=20)
    try:
        freed_in: list[str] = []
        gc.collect()  # so the cycle below is young, and any collection in the churning thread would free it
        holder = {"widget-ish": QObject()}
        holder["self"] = holder
        weakref.finalize(holder["widget-ish"], lambda: freed_in.append(threading.current_thread().name))
        del holder
        churner = threading.Thread(target=_churn, name="io-thread")
        churner.start()
        churner.join()
        assert freed_in == []  # nothing was collected in the background thread
        qtbot.waitUntil(lambda: bool(freed_in), timeout=5_000)
        assert freed_in == [threading.main_thread().name]
    finally:
        collector.stop()
        (gc.enable if was_enabled else gc.disable)()


def test_stop_restores_automatic_collection(qtbot):
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        collector = GuiThreadGarbageCollector()
        assert not gc.isenabled()
        collector.stop()
        assert gc.isenabled()
    finally:
        (gc.enable if was_enabled else gc.disable)()
