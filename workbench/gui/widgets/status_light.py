"""The worker status light: a coloured dot, the worker's state in words, and a restart button."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

from workbench.gui.theme import STATE_COLOURS

STATE_WORDS = {
    "ready": "Worker ready",
    "starting": "Worker starting…",
    "restarting": "Worker restarting…",
    "unresponsive": "Worker not answering",
    "dead": "Worker stopped unexpectedly",
    "stopped": "Worker stopped",
}


class _Dot(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.colour = QColor(STATE_COLOURS["stopped"])
        self.setFixedSize(QSize(14, 14))

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        painter = QPainter(self)
        painter.setRenderHint(QPainter.Antialiasing)
        painter.setPen(self.colour.darker(140))
        painter.setBrush(self.colour)
        painter.drawEllipse(self.rect().adjusted(1, 1, -1, -1))


class StatusLight(QWidget):
    restart_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.state = "stopped"
        self.dot = _Dot(self)
        self.label = QLabel(STATE_WORDS["stopped"], self)
        self.restart_button = QToolButton(self)
        self.restart_button.setText("Restart worker")
        self.restart_button.setToolTip(
            "Stop the worker process and start a fresh one (Ctrl+Shift+R).\n"
            "Running jobs are stopped; finished runs are kept."
        )
        self.restart_button.clicked.connect(self.restart_requested)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.addWidget(self.dot)
        layout.addWidget(self.label)
        layout.addWidget(self.restart_button)

    def set_state(self, state: str, detail: str = "") -> None:
        self.state = state
        self.dot.colour = QColor(STATE_COLOURS.get(state, STATE_COLOURS["stopped"]))
        self.dot.update()
        self.label.setText(STATE_WORDS.get(state, state))
        tip = f"Worker: {state}" + (f"\n{detail}" if detail else "")
        self.setToolTip(tip)
        self.label.setToolTip(tip)
        # Restarting is always offered except mid-start, where it would only race the start in flight.
        self.restart_button.setEnabled(state not in ("starting", "restarting"))
        emphasise = state in ("dead", "unresponsive")
        self.restart_button.setStyleSheet("font-weight: bold" if emphasise else "")
        self.label.setAlignment(Qt.AlignVCenter)
