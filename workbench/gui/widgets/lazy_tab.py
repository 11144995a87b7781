"""A tab page that builds its panel the first time it is shown or asked for, so the window paints before any
tab's heavy parts (pyqtgraph, the run store) are even imported: the start-up stays a fraction of `import
torch`."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, Qt, QTimer, Signal
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

FALLBACK_MS = 300  # build even if the window never reports a paint (a platform without one)


class LazyTab(QWidget):
    """Holds `factory()`'s panel once built. Shown unbuilt, it says "Loading…" and builds on the next turn of
    the event loop, after the window has painted; `panel()` builds at once for a caller that needs it now."""

    built = Signal(object)  # the panel

    def __init__(self, factory: Callable[[], QWidget], what: str, parent=None):
        super().__init__(parent)
        self._factory = factory
        self._panel: QWidget | None = None
        self._building = False
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._placeholder = QLabel(f"Loading the {what} tab…", self)
        self._placeholder.setAlignment(Qt.AlignCenter)
        self._layout.addWidget(self._placeholder)

    @property
    def is_built(self) -> bool:
        return self._panel is not None

    def panel(self) -> QWidget:
        if self._panel is None:
            if self._building:
                raise RuntimeError(
                    "a tab's panel was asked for while it was being built (a cycle in its factory)"
                )
            self.window().removeEventFilter(self)  # built before the paint came: nothing left to wait for
            self._building = True
            try:
                panel = self._factory()
            finally:
                self._building = False
            self._placeholder.hide()
            self._layout.addWidget(panel)
            self._panel = panel
            self.built.emit(panel)
        return self._panel

    def showEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().showEvent(event)
        if self._panel is None:
            window = self.window()
            if window.property("painted"):
                QTimer.singleShot(0, self.panel)
            else:
                # The window's first paint comes first: platforms differ in whether a paint or a zero-timer
                # runs first after show(), so wait for the paint itself (and build anyway if none comes).
                window.installEventFilter(self)
                QTimer.singleShot(FALLBACK_MS, self.panel)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt override)
        if event.type() == QEvent.Paint:
            watched.removeEventFilter(self)
            watched.setProperty("painted", True)
            QTimer.singleShot(0, self.panel)
        return False
