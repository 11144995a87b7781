"""The overlay legend: the colour ramp of the metric the graph is coloured by, with its range and scale. No
torch."""

from __future__ import annotations

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QHBoxLayout, QLabel, QWidget


def number_text(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return f"{value:.3g}"


class _Ramp(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.colors: list[str] = []
        self.setMinimumSize(120, 14)

    def sizeHint(self) -> QSize:  # noqa: N802 (Qt override)
        return QSize(160, 16)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt override)
        if not self.colors:
            return
        painter = QPainter(self)
        width = self.width() / len(self.colors)
        for i, colour in enumerate(self.colors):
            painter.fillRect(QRectF(i * width, 0, width + 1, self.height()), QColor(colour))
        painter.setPen(self.palette().mid().color())
        painter.drawRect(QRectF(0, 0, self.width() - 1, self.height() - 1))


class OverlayLegend(QWidget):
    """min ▭▭▭▭▭▭ max (log scale): what the node colours of the chosen overlay mean."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.low = QLabel(self)
        self.ramp = _Ramp(self)
        self.high = QLabel(self)
        self.note = QLabel(self)
        self.note.setEnabled(False)  # the palette's dim text: a footnote, not a value
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.low, self.ramp, self.high, self.note):
            layout.addWidget(widget, 1 if widget is self.ramp else 0, Qt.AlignVCenter)
        self.clear()

    def clear(self) -> None:
        self.ramp.colors = []
        for label in (self.low, self.high, self.note):
            label.setText("")
        self.ramp.update()
        self.hide()

    def set_legend(self, legend: dict) -> None:
        self.ramp.colors = list(legend.get("colors") or [])
        self.low.setText(number_text(float(legend.get("min", 0))))
        self.high.setText(number_text(float(legend.get("max", 0))))
        self.note.setText("log scale" if legend.get("scale") == "log" else "")
        self.ramp.update()
        self.show()
