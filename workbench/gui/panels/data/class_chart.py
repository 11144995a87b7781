"""Class distribution per split as grouped bars, with the dataset's sizes and mean/std beside them."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from workbench.gui.plots import SERIES_COLOURS, add_legend, make_plot

SPLITS = ("train", "val", "test")
# Room above the tallest bar for the legend (top right): without it the legend covers the last classes' bars.
HEADROOM = 1.35
EMPTY = "How many samples each class has, per split, appears here once a dataset loads."


class ClassChart(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.plot = make_plot("Class distribution", "samples", "class", empty=EMPTY)
        add_legend(self.plot)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.bars: dict[str, pg.BarGraphItem] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.summary)
        layout.addWidget(self.plot, 1)

    def show_info(self, info: dict) -> None:
        self.plot.clear()
        self.bars.clear()
        classes = info["classes"]
        x = np.arange(len(classes), dtype=float)
        width = 0.8 / len(SPLITS)
        for i, split in enumerate(SPLITS):
            counts = info["class_counts"].get(split) or []
            if not counts:
                continue
            bar = pg.BarGraphItem(
                x=x + (i - 1) * width,
                height=np.asarray(counts, dtype=float),
                width=width,
                brush=SERIES_COLOURS[i],
                pen=None,
                name=f"{split} ({sum(counts):,})",
            )
            self.plot.addItem(bar)
            self.bars[split] = bar
        tallest = max((max(c) for c in info["class_counts"].values() if c), default=0)
        if tallest:
            self.plot.setYRange(0, tallest * HEADROOM, padding=0)
        # Names under the bars when they fit; with many classes every k-th one, so they stay readable.
        step = max(1, len(classes) // 25)
        self.plot.getAxis("bottom").setTicks(
            [[(float(i), str(classes[i])) for i in range(0, len(classes), step)]]
        )
        n = info["num_samples"]
        mean = ", ".join(f"{v:.4f}" for v in info["mean"])
        std = ", ".join(f"{v:.4f}" for v in info["std"])
        shape = "×".join(str(s) for s in info["sample_shape"])
        text = (
            f"<b>{info['dataset']}</b> · {len(classes)} classes · samples {shape} · "
            f"train {n.get('train', 0):,} / val {n.get('val', 0):,} / test {n.get('test', 0):,}<br>"
            f"mean [{mean}] · std [{std}] (train split, 0–1 scale)"
        )
        skipped = info.get("skipped_files") or []
        if skipped:
            text += f"<br><span style='color:#c77700'>{len(skipped)} file(s) skipped as unreadable</span>"
        self.summary.setText(text)

    def clear(self, message: str = "") -> None:
        self.plot.clear()
        self.bars.clear()
        self.plot.getAxis("bottom").setTicks(None)  # no stale class names under an empty chart
        self.summary.setText("")
        # The plot's empty state carries the message ("Computing class counts…"), where the bars will be.
        self.plot.set_empty_text(message or EMPTY)
