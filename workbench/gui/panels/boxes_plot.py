"""An image with a detector's boxes over it, as a zoomable plot: the true boxes dashed gold, the predictions
scoring at least a threshold in their class colour with the class name and score. The detection evaluation
view and Try it draw boxes with it. Never imports torch.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QPen

from workbench.gui.plots import RUN_HUES, make_plot

TRUE_COLOUR = "#ffd700"  # the true boxes: gold, dashed (clear of the class colours)


def class_colour(label: int) -> QColor:
    """One colour per class label (1..K), the window's run hues in turn."""
    return QColor(RUN_HUES[(max(label, 1) - 1) % len(RUN_HUES)])


class BoxesPlot:
    """show(pixels, true boxes, predicted boxes, classes, threshold) on `plot` (a themed PlotWidget, image
    rows down); clear()."""

    def __init__(self, empty: str = "", title: str = ""):
        self.plot = make_plot(title, empty=empty, grid=False)
        self.plot.getPlotItem().invertY(True)
        self.plot.setAspectLocked(True)
        for axis in ("left", "bottom"):
            self.plot.getAxis(axis).setStyle(showValues=False)
            self.plot.getAxis(axis).values_wanted = False
        self.image_item = pg.ImageItem()
        self.plot.addItem(self.image_item)
        self.overlays: list[pg.GraphicsObject] = []

    def clear(self) -> None:
        for overlay in self.overlays:
            self.plot.removeItem(overlay)
        self.overlays = []
        self.image_item.clear()
        self.plot.getPlotItem().update_empty_state()

    def show(
        self,
        pixels: np.ndarray | None,
        size: tuple[float, float] | None,
        true: dict | None,
        predicted: dict | None,
        classes: list[str],
        threshold: float,
    ) -> int:
        """Draw the image (H x W x 3 uint8, or None when it cannot be read) and the boxes; `size` (width,
        height) frames a missing image. Returns how many predictions were drawn."""
        self.clear()
        if pixels is not None:
            self.image_item.setImage(pixels.transpose(1, 0, 2), levels=(0, 255))
        for box in (true or {}).get("boxes") or []:
            self._box(box, QColor(TRUE_COLOUR), dashed=True, text="")
        predicted = predicted or {}
        shown = 0
        for box, label, score in zip(
            predicted.get("boxes") or [], predicted.get("labels") or [], predicted.get("scores") or []
        ):
            if score < threshold:
                continue
            shown += 1
            name = classes[label - 1] if 1 <= label <= len(classes) else str(label)
            self._box(box, class_colour(label), dashed=False, text=f"{name} {score:.2f}")
        height, width = pixels.shape[:2] if pixels is not None else (0, 0)
        if size is not None:
            width, height = size[0] or width, size[1] or height
        self.plot.setRange(xRange=(0, width), yRange=(0, height), padding=0.02)
        self.plot.getPlotItem().update_empty_state()
        return shown

    def _box(self, box, colour: QColor, *, dashed: bool, text: str) -> None:
        x1, y1, x2, y2 = map(float, box)
        pen = QPen(colour, 2)
        pen.setCosmetic(True)
        if dashed:
            pen.setStyle(Qt.DashLine)
        rect = pg.QtWidgets.QGraphicsRectItem(x1, y1, x2 - x1, y2 - y1)
        rect.setPen(pen)
        self.plot.addItem(rect)
        self.overlays.append(rect)
        if text:
            label = pg.TextItem(text, color=colour, anchor=(0, 1), fill=pg.mkBrush(255, 255, 255, 200))
            label.setPos(x1, y1)
            self.plot.addItem(label)
            self.overlays.append(label)
