"""Python's cycle collector runs in whatever thread happens to allocate. In the GUI process it must run only
in the GUI thread: a Qt object freed from another thread (the worker client's I/O thread, say) takes Qt's
locks and then waits for the GIL, and deadlocks against a GUI thread that holds the GIL and waits for those
locks."""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer


class GuiThreadGarbageCollector(QObject):
    """Turns automatic collection off and collects on a GUI-thread timer instead, generation by generation,
    with the thresholds Python would have used (pyqtgraph's GarbageCollector does the same; importing
    pyqtgraph for it would cost the window's first paint). `stop()` collects once more and restores automatic
    collection."""

    def __init__(self, interval_ms: int = 1000, parent: QObject | None = None):
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.timeout.connect(self.check)
        self._timer.start(interval_ms)

    def check(self) -> None:
        # gc.get_count() keeps counting while collection is disabled: collect each generation past its
        # threshold.
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self._thresholds[generation]:
                gc.collect(generation)
                return

    def stop(self) -> None:
        self._timer.stop()
        gc.collect()
        if self._was_enabled:
            gc.enable()
