"""The target histogram of a dataset (data.info's `target_histogram`): bars per class, label or segmentation
class (pixels), or a histogram of regression target values; the hovered bar's name and count as a tooltip."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QCursor
from PySide6.QtWidgets import QLabel, QToolTip, QVBoxLayout, QWidget

from workbench.gui.plots import SERIES_COLOURS, make_plot

EMPTY = "A histogram of the training targets appears here once a dataset loads."
# kind -> (title, y axis, x axis, what one count is)
KINDS = {
    "classes": ("Samples per class", "samples", "class", "samples"),
    "labels": ("Samples per label (multi-label)", "samples with the label", "label", "samples"),
    "pixels": ("Pixels per class (segmentation)", "pixels", "class", "pixels"),
    "values": ("Target values (regression)", "count", "target value", "values"),
}
MAX_TICKS = 25


class TargetChart(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.plot = make_plot("Targets", "count", "", empty=EMPTY)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.histogram: dict | None = None
        self.bars: pg.BarGraphItem | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.summary)
        layout.addWidget(self.plot, 1)
        self.plot.scene().sigMouseMoved.connect(self._on_plot_mouse_moved)

    def show_histogram(self, histogram: dict | None, note: str = "") -> None:
        """Draw a target_histogram; None (a target with no histogram) leaves the empty state with `note`."""
        self.clear(note or "This dataset's targets have no histogram.")
        if not histogram:
            return
        self.histogram = histogram
        kind = histogram.get("kind", "values")
        title, left, bottom, unit = KINDS.get(kind, KINDS["values"])
        counts = np.asarray(histogram.get("counts") or [], dtype=float)
        self.plot.setTitle(title, size="10pt")
        self.plot.setLabel("left", left)
        self.plot.setLabel("bottom", bottom)
        if kind == "values":
            edges = np.asarray(histogram.get("edges") or [], dtype=float)
            if len(edges) != len(counts) + 1 or not len(counts):
                return
            self.bars = pg.BarGraphItem(
                x0=edges[:-1],
                x1=edges[1:],
                height=counts,
                brush=SERIES_COLOURS[0],
                pen=pg.mkPen(SERIES_COLOURS[0]),
            )
            self.plot.addItem(self.bars)
            self.plot.getAxis("bottom").setTicks(None)
        else:
            names = list(histogram.get("names") or [])
            x = np.arange(len(counts), dtype=float)
            self.bars = pg.BarGraphItem(x=x, height=counts, width=0.8, brush=SERIES_COLOURS[0], pen=None)
            self.plot.addItem(self.bars)
            # every k-th name when there are many, so they stay readable
            step = max(1, len(counts) // MAX_TICKS)
            self.plot.getAxis("bottom").setTicks(
                [[(float(i), names[i] if i < len(names) else str(i)) for i in range(0, len(counts), step)]]
            )
        if counts.size and counts.max() > 0:
            self.plot.setYRange(0, counts.max() * 1.1, padding=0)
            # Room for the widest count label, set now: drawn on a hidden tab, the axis would not grow to fit
            # it later and would drop every label wider than its first ("100,000" beside "50,000").
            widest = self.plot.fontMetrics().horizontalAdvance(f"{int(counts.max() * 1.1):,}")
            self.plot.getAxis("left").setWidth(widest + 34)
        sampled, total = histogram.get("sampled"), histogram.get("total")
        read = ""
        if sampled is not None:
            read = (
                f"from the first {sampled:,} train samples"
                if total and sampled < total
                else f"from all {sampled:,} train samples"
            )
        self.summary.setText(
            f"{title}, {read}: {int(counts.sum()):,} {unit} in all." + (f"<br>{note}" if note else "")
        )

    def clear(self, message: str = "") -> None:
        self.plot.clear()
        self.bars = None
        self.histogram = None
        self.plot.getAxis("bottom").setTicks(None)
        self.summary.setText("")
        self.plot.set_empty_text(message or EMPTY)

    # -- tooltips --------------------------------------------------------------------------------
    def bar_at(self, x: float) -> int | None:
        """The bar under data coordinate x, or None."""
        h = self.histogram
        if not h or self.bars is None:
            return None
        counts = h.get("counts") or []
        if h.get("kind") == "values":
            edges = h.get("edges") or []
            i = int(np.searchsorted(edges, x, side="right")) - 1
            return i if 0 <= i < len(counts) else None
        i = int(round(x))
        return i if 0 <= i < len(counts) and abs(x - i) <= 0.4 else None

    def tooltip_at(self, x: float) -> str:
        i = self.bar_at(x)
        if i is None:
            return ""
        h = self.histogram
        unit = KINDS.get(h.get("kind"), KINDS["values"])[3]
        count = h["counts"][i]
        if h.get("kind") == "values":
            low, high = h["edges"][i], h["edges"][i + 1]
            return f"{low:.4g} to {high:.4g}: {count:,} {unit}"
        names = h.get("names") or []
        name = names[i] if i < len(names) else str(i)
        label = f"{i}: {name}" if name != str(i) else name
        return f"{label}: {count:,} {unit}"

    def _on_plot_mouse_moved(self, pos) -> None:
        view = self.plot.getPlotItem().vb
        if not view.sceneBoundingRect().contains(pos):
            return
        text = self.tooltip_at(view.mapSceneToView(pos).x())
        if text:
            QToolTip.showText(QCursor.pos(), text, self.plot)
        else:
            QToolTip.hideText()
