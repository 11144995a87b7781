"""A detection run's evaluation view: AP per class as bars, each class's precision-recall curve at IoU .5,
and the test images worst first (by missed objects, or by false positives) with the true boxes and the
predictions above a score threshold (a slider, kept in the settings) drawn over the image."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSlider,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.panels.boxes_plot import BoxesPlot, class_colour
from workbench.gui.panels.training.evaluation_common import BarTooltips, category_ticks, number
from workbench.gui.plots import SERIES_COLOURS, make_plot

THRESHOLD_KEY = "evaluation/detection_score_threshold"


def _read_rgb(path: str) -> np.ndarray | None:
    """The image file as (H, W, 3) uint8, or None when it cannot be read (moved, deleted)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except (OSError, UnidentifiedImageError, ValueError):
        return None


class DetectionEvaluationView(QWidget):
    """show_evaluation(evaluation.json of a detection run); clear()."""

    def __init__(self, parent=None, settings: QSettings | None = None):
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings()  # the window's own by default
        self.evaluation: dict = {}
        self.classes: list[str] = []
        self.images: list[dict] = []
        self.ap_plot = make_plot(
            "AP per class", "AP", "class", categories=True, empty="AP per class appears here."
        )
        self.ap_bars = pg.BarGraphItem(x=[], height=[], width=0.35, brush=SERIES_COLOURS[0], pen=None)
        self.ap50_bars = pg.BarGraphItem(x=[], height=[], width=0.35, brush=SERIES_COLOURS[1], pen=None)
        self.ap_plot.addItem(self.ap_bars)
        self.ap_plot.addItem(self.ap50_bars)
        self.ap_plot.setToolTip(
            "Blue: AP over IoU .5:.95 (COCO); orange: AP at IoU .5. Hover a bar for its numbers"
        )
        self.tooltips = BarTooltips(self.ap_plot)
        self.pr_plot = make_plot(
            "Precision-recall at IoU .5", "precision", "recall", empty="PR curves appear here."
        )
        self.pr_plot.setXRange(0, 1)
        self.pr_plot.setYRange(0, 1.02)
        self.pr_plot.addLegend(offset=(-10, 10))
        self.picture = BoxesPlot(empty="Select a test image on the left.")
        self.image_plot, self.image_item = self.picture.plot, self.picture.image_item
        self.order = QComboBox()
        self.order.addItems(["most missed objects first", "most false positives first", "test split order"])
        self.order.setToolTip(
            "Which images come first: those missing most true objects, or with most false boxes"
        )
        self.gallery = QListWidget()
        self.gallery.setToolTip(
            "The test images; select one to see its true (gold, dashed) and predicted boxes"
        )
        self.threshold = QSlider(Qt.Horizontal)
        self.threshold.setRange(0, 100)
        self.threshold.setToolTip("Predictions scoring below this are not drawn")
        self.threshold_label = QLabel()
        self.caption = QLabel()
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.RichText)
        self._build_layout()
        self.threshold.setValue(int(round(100 * float(self.settings.value(THRESHOLD_KEY, 0.5)))))
        self._on_threshold(self.threshold.value(), save=False)
        self.order.currentIndexChanged.connect(lambda _: self._fill_gallery())
        self.gallery.currentRowChanged.connect(self.show_image)
        self.threshold.valueChanged.connect(self._on_threshold)

    def _build_layout(self) -> None:
        left = QWidget()
        box = QVBoxLayout(left)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.order)
        box.addWidget(self.gallery, 1)
        slider = QHBoxLayout()
        slider.addWidget(QLabel("Score ≥"))
        slider.addWidget(self.threshold, 1)
        slider.addWidget(self.threshold_label)
        centre = QWidget()
        middle = QVBoxLayout(centre)
        middle.setContentsMargins(0, 0, 0, 0)
        middle.addWidget(self.image_plot, 1)
        middle.addLayout(slider)
        middle.addWidget(self.caption)
        plots = QSplitter(Qt.Vertical)
        plots.addWidget(self.ap_plot)
        plots.addWidget(self.pr_plot)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(left)
        split.addWidget(centre)
        split.addWidget(plots)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 3)
        split.setStretchFactor(2, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    # -- showing ---------------------------------------------------------------------------------
    def clear(self) -> None:
        self.evaluation, self.images = {}, []
        self.gallery.clear()
        self.ap_bars.setOpts(x=[], height=[])
        self.ap50_bars.setOpts(x=[], height=[])
        self.tooltips.texts = []
        self.pr_plot.clear()
        self._clear_image()
        for plot in (self.ap_plot, self.pr_plot):
            plot.getPlotItem().update_empty_state()

    def show_evaluation(self, evaluation: dict) -> None:
        self.clear()
        self.evaluation = evaluation
        per_class = evaluation.get("per_class") or []
        self.classes = [str(c) for c in evaluation.get("classes") or [r["class"] for r in per_class]]
        x = np.arange(len(per_class), dtype=float)
        self.ap_bars.setOpts(x=x - 0.18, height=[float(r.get("ap") or 0) for r in per_class], width=0.35)
        self.ap50_bars.setOpts(x=x + 0.18, height=[float(r.get("ap_50") or 0) for r in per_class], width=0.35)
        self.tooltips.texts = [
            f"{r['class']}: AP {number(r.get('ap'))}, AP@.5 {number(r.get('ap_50'))}, "
            f"{int(r.get('count') or 0)} true boxes"
            for r in per_class
        ]
        category_ticks(self.ap_plot, self.classes)
        self.ap_plot.setXRange(-0.6, max(len(per_class), 1) - 0.4, padding=0)
        self.ap_plot.setYRange(0, 1.05, padding=0)
        for k, name in enumerate(self.classes):
            curve = (evaluation.get("pr") or {}).get(name) or {}
            pen = pg.mkPen(class_colour(k + 1), width=2)
            self.pr_plot.plot(curve.get("recall", []), curve.get("precision", []), pen=pen, name=name)
        for plot in (self.ap_plot, self.pr_plot):
            plot.getPlotItem().update_empty_state()
        self.images = [row for row in evaluation.get("images") or [] if isinstance(row, dict)]
        self._fill_gallery()

    def _fill_gallery(self) -> None:
        key = {0: "missed", 1: "false_positives"}.get(self.order.currentIndex())
        rows = sorted(self.images, key=lambda r: -int(r.get(key) or 0)) if key else list(self.images)
        self.ordered = rows
        self.gallery.blockSignals(True)
        self.gallery.clear()
        for row in rows:
            item = QListWidgetItem(
                f"#{row['index']}: {row.get('missed', 0)} missed, {row.get('false_positives', 0)} false"
            )
            item.setToolTip(str(row.get("file", "")))
            self.gallery.addItem(item)
        self.gallery.blockSignals(False)
        if rows:
            self.gallery.setCurrentRow(0)
            self.show_image(0)

    def _clear_image(self) -> None:
        self.picture.clear()
        self.caption.setText("")

    @property
    def overlays(self) -> list:
        return self.picture.overlays

    def show_image(self, row: int) -> None:
        """The row-th image of the list, its true boxes dashed gold, its predictions above the threshold in
        their class colour with the class name and score."""
        self._clear_image()
        if not 0 <= row < len(getattr(self, "ordered", [])):
            return
        info = self.ordered[row]
        threshold = self.threshold.value() / 100
        true = info.get("true") or {}
        shown = self.picture.show(
            _read_rgb(str(info.get("file", ""))),
            (info.get("width") or 0, info.get("height") or 0),
            true,
            info.get("pred") or {},
            self.classes,
            threshold,
        )
        self.caption.setText(
            f"<b>test #{info['index']}</b> · {len(true.get('boxes') or [])} true box(es) (gold, dashed) · "
            f"{shown} prediction(s) with score ≥ {threshold:.2f} · {info.get('missed', 0)} missed, "
            f"{info.get('false_positives', 0)} false positive(s) at 0.50"
        )

    def _on_threshold(self, value: int, save: bool = True) -> None:
        self.threshold_label.setText(f"{value / 100:.2f}")
        if save:
            self.settings.setValue(THRESHOLD_KEY, value / 100)
        if self.gallery.currentRow() >= 0:
            self.show_image(self.gallery.currentRow())
