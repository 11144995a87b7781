"""The log view: what the worker and the window said, with level colours and a bounded history."""

from __future__ import annotations

import html
import time

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

LEVEL_COLOURS = {"debug": "#8a8f98", "info": None, "warning": "#c77700", "error": "#d0342c"}


class LogPanel(QWidget):
    def __init__(self, parent=None, max_lines: int = 5000):
        super().__init__(parent)
        self.view = QPlainTextEdit(self)
        self.view.setReadOnly(True)
        self.view.setMaximumBlockCount(max_lines)  # a chatty job must not grow memory without bound
        self.view.setPlaceholderText("Messages from the worker and the jobs appear here.")
        self.show_debug = QCheckBox("Show debug details", self)
        self.show_debug.setToolTip("Also show tracebacks and protocol detail (off by default)")
        clear = QPushButton("Clear", self)
        clear.setToolTip("Clear the log view (Ctrl+L)")
        clear.setShortcut("Ctrl+L")
        clear.clicked.connect(self.view.clear)
        bar = QHBoxLayout()
        bar.addWidget(self.show_debug)
        bar.addStretch(1)
        bar.addWidget(clear)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.view)

    def append(self, text: str, level: str = "info") -> None:
        if level == "debug" and not self.show_debug.isChecked():
            return
        stamp = time.strftime("%H:%M:%S")
        colour = LEVEL_COLOURS.get(level)
        body = html.escape(text).replace("\n", "<br>")
        line = f'<span style="color:#8a8f98">{stamp}</span> '
        line += f'<span style="color:{colour}">{body}</span>' if colour else body
        self.view.appendHtml(line)

    def lines(self) -> list[str]:
        return self.view.toPlainText().splitlines()
