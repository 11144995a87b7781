"""A tab's first-run page (no runs yet): a headline, a wrapped explanation and the buttons that start one,
centred."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget


class EmptyState(QWidget):
    """`text` is the explanation label (set_text changes it); `buttons` sit under it, side by side when
    `row`."""

    def __init__(
        self,
        headline: str,
        buttons: list[QPushButton],
        *,
        text: str = "",
        width: int = 620,
        row: bool = False,
        parent=None,
    ):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.addStretch(2)
        title = QLabel(f"<h2>{headline}</h2>")
        title.setAlignment(Qt.AlignCenter)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setAlignment(Qt.AlignCenter)
        # An aligned item in a layout gets its size hint, not its height for width: a wrapped label is clipped
        # unless its width is fixed and its height set from it (set_text).
        self.text.setFixedWidth(width)
        for widget in (title, self.text):
            layout.addWidget(widget, 0, Qt.AlignHCenter)
        if row:
            line = QHBoxLayout()
            line.addStretch(1)
            for button in buttons:
                line.addWidget(button)
            line.addStretch(1)
            layout.addLayout(line)
        else:
            for button in buttons:
                layout.addWidget(button, 0, Qt.AlignHCenter)
        layout.addStretch(3)
        self.set_text(text)

    def set_text(self, text: str) -> None:
        self.text.setText(text)
        self.text.setMinimumHeight(self.text.heightForWidth(self.text.width()) + 8 if text else 0)
