"""A signal drawn small: a pixmap of its first channel as a line, for a table cell (the Data tab's rows of
signals), so a sine reads as a sine before a row is opened. GUI side; never imports torch.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QPixmap, QPolygonF

WIDTH = 180
HEIGHT = 28


def sparkline(values, colour: str, width: int = WIDTH, height: int = HEIGHT) -> QPixmap | None:
    """The values as a line across a transparent width×height pixmap, scaled to their own range; None when
    there is nothing finite to draw."""
    data = np.asarray(values, dtype=float).reshape(-1)
    data = data[np.isfinite(data)]
    if data.size < 2:
        return None
    low, high = float(data.min()), float(data.max())
    span = high - low or 1.0
    xs = np.linspace(1, width - 2, data.size)
    ys = (height - 2) - (data - low) / span * (height - 4)
    pixmap = QPixmap(width, height)
    pixmap.fill(Qt.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.Antialiasing)
    painter.setPen(QPen(QColor(colour), 1.2))
    painter.drawPolyline(QPolygonF([QPointF(float(x), float(y)) for x, y in zip(xs, ys, strict=True)]))
    painter.end()
    return pixmap


__all__ = ["HEIGHT", "WIDTH", "sparkline"]
