"""The segmentation evaluation view: each class's IoU on the test split, the worst images with their predicted
mask over them, and the selected one large three ways (the image, the true mask over it, the predicted mask
over it), zoomed together. The pictures come from evaluation.json's thumbnails, never from the dataset again.

GUI side; never imports torch.
"""

from __future__ import annotations

import base64

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QSplitter, QVBoxLayout, QWidget

from workbench.gui.images import scaled_pixmap, to_qimage
from workbench.gui.panels.training.evaluation_common import BarTooltips, category_ticks, number
from workbench.gui.plots import RUN_HUES, SERIES_COLOURS, make_plot

IGNORE_INDEX = 255
ALPHA = 0.55  # how strongly a class colour covers the image under it
# A class with one of these names is the absence of anything: left clear so the shapes on it stand out.
BACKGROUND_NAMES = {"background", "bg", "_background_", "void", "none", "unlabeled", "unlabelled"}


def class_colours(count: int) -> np.ndarray:
    """(count, 3) uint8: the plots' hues first, then evenly spread hues for more classes."""
    colours = [
        pg.mkColor(RUN_HUES[k]) if k < len(RUN_HUES) else pg.intColor(k, hues=max(count, 1))
        for k in range(count)
    ]
    return np.array([[c.red(), c.green(), c.blue()] for c in colours], dtype=np.uint8).reshape(-1, 3)


def clear_classes(classes: list[str]) -> set[int]:
    """The classes drawn clear (no colour): a first class named like a background."""
    return {0} if classes and str(classes[0]).strip().lower() in BACKGROUND_NAMES else set()


def decode(text: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """base64 of raw uint8 bytes back to an array of `shape`; None if it does not fit (a damaged file)."""
    try:
        return np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8).reshape(shape)
    except (ValueError, TypeError):
        return None


def overlay(
    image: np.ndarray | None,
    mask: np.ndarray | None,
    colours: np.ndarray,
    clear: set[int],
    alpha: float = ALPHA,
) -> np.ndarray:
    """(h, w, 3) uint8: the image (grey when it has one channel; mid grey when there is none) with each
    pixel's class colour blended over it; ignored pixels (255), clear classes and classes without a colour
    stay as they are."""
    if image is None:
        h, w = mask.shape if mask is not None else (1, 1)
        base = np.full((h, w, 3), 96, dtype=np.float32)
    else:
        base = image.astype(np.float32)
        base = np.repeat(base[..., :1], 3, axis=2) if base.ndim == 2 or base.shape[2] == 1 else base[..., :3]
        base = base.reshape(base.shape[0], base.shape[1], 3)
    if mask is None:
        return base.round().astype(np.uint8)
    paint = mask < len(colours)
    for k in clear:
        paint &= mask != k
    out = base.copy()
    safe = np.where(paint, mask, 0)
    out[paint] = (1 - alpha) * base[paint] + alpha * colours[safe[paint]].astype(np.float32)
    return out.round().astype(np.uint8)


def thumbnail_arrays(info: dict) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(image (h, w, c) or None, true mask or None, predicted mask or None) of one worst image as stored."""
    thumb = info.get("thumbnail")
    if isinstance(thumb, dict):
        h, w, c = int(thumb.get("height", 0)), int(thumb.get("width", 0)), int(thumb.get("channels", 0))
        image = decode(thumb["image"], (h, w, c)) if c and thumb.get("image") else None
        true = decode(thumb.get("true_mask", ""), (h, w))
        predicted = decode(thumb.get("predicted_mask", ""), (h, w))
        return image, true, predicted
    if isinstance(info.get("predicted_mask"), list):  # a run from before thumbnails: its predicted mask alone
        try:
            return (
                None,
                None,
                np.asarray(info["predicted_mask"], dtype=np.int64).clip(0, IGNORE_INDEX).astype(np.uint8),
            )
        except ValueError:
            pass
    return None, None, None


def _image_plot(title: str) -> pg.PlotWidget:
    plot = make_plot(title, empty="Select one of the worst images below.", grid=False)
    plot.getPlotItem().invertY(True)
    plot.setAspectLocked(True)
    for axis in ("left", "bottom"):
        plot.getAxis(axis).setStyle(showValues=False)
        plot.getAxis(axis).values_wanted = False
    return plot


class SegmentationEvaluationView(QWidget):
    sample_requested = Signal(str, int, str)  # split, index, a note (the image's mIoU)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.classes: list[str] = []
        self.colours = class_colours(0)
        self.clear_set: set[int] = set()
        self.worst: list[dict] = []
        self.iou_plot = make_plot(
            "Per-class IoU",
            "IoU",
            "class",
            categories=True,
            empty="Each class's IoU on the test split appears here.",
        )
        self.iou_plot.setYRange(0, 1)
        self.iou_bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=SERIES_COLOURS[0], pen=None)
        self.iou_plot.addItem(self.iou_bars)
        self.tooltips = BarTooltips(self.iou_plot)
        self.image_plots = [_image_plot("image"), _image_plot("true mask"), _image_plot("predicted mask")]
        self.image_items = [pg.ImageItem() for _ in self.image_plots]
        for plot, item in zip(self.image_plots, self.image_items):
            plot.addItem(item)
        self.legend = QLabel()
        self.legend.setTextFormat(Qt.RichText)
        self.legend.setWordWrap(True)
        self.detail_title = QLabel("")
        detail = QWidget()
        detail_layout = QVBoxLayout(detail)
        detail_layout.setContentsMargins(0, 0, 0, 0)
        images = QSplitter(Qt.Horizontal)
        for plot in self.image_plots:
            images.addWidget(plot)
        detail_layout.addWidget(self.detail_title)
        detail_layout.addWidget(images, 1)
        detail_layout.addWidget(self.legend)
        self.gallery = QListWidget()
        self.gallery.setViewMode(QListWidget.IconMode)
        self.gallery.setIconSize(QSize(72, 72))
        self.gallery.setGridSize(QSize(104, 112))
        self.gallery.setWordWrap(True)
        self.gallery.setMinimumHeight(130)
        self.gallery.setResizeMode(QListWidget.Adjust)
        self.gallery.setMovement(QListWidget.Static)
        self.gallery.setToolTip(
            "The test images with the lowest mIoU of their own, with the predicted mask over "
            "them; select one to see it large, double-click to open it in the Data tab"
        )
        self.gallery.currentRowChanged.connect(self.show_image)
        self.gallery.itemActivated.connect(self._on_gallery_activated)
        top = QSplitter(Qt.Horizontal)
        # Room for the bars: narrower, and the class names under them would all be turned upright and elided.
        self.iou_plot.setMinimumWidth(260)
        top.addWidget(self.iou_plot)
        top.addWidget(detail)
        top.setStretchFactor(0, 2)
        top.setStretchFactor(1, 3)
        gallery_box = QWidget()
        box = QVBoxLayout(gallery_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("Worst images (lowest mIoU first; the predicted mask over each)"))
        box.addWidget(self.gallery)
        split = QSplitter(Qt.Vertical)
        split.addWidget(top)
        split.addWidget(gallery_box)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def clear(self) -> None:
        self.worst = []
        self.gallery.clear()
        self.iou_bars.setOpts(x=[], height=[])
        self.tooltips.texts = []
        self.iou_plot.getPlotItem().update_empty_state()
        self._clear_images()

    def _clear_images(self) -> None:
        self.detail_title.setText("")
        for plot, item in zip(self.image_plots, self.image_items):
            item.clear()
            plot.getPlotItem().update_empty_state()

    def show_evaluation(self, evaluation: dict) -> None:
        self.clear()
        per_class = evaluation.get("per_class") or []
        self.classes = [
            str(c) for c in evaluation.get("classes") or [r.get("class", i) for i, r in enumerate(per_class)]
        ]
        self.colours = class_colours(len(self.classes))
        self.clear_set = clear_classes(self.classes)
        iou = np.array([r.get("iou") if r.get("iou") is not None else np.nan for r in per_class], dtype=float)
        self.iou_bars.setOpts(
            x=np.arange(len(per_class)),
            height=np.nan_to_num(iou),
            width=0.7,
            brushes=[
                pg.mkBrush(*self.colours[k]) if k not in self.clear_set else pg.mkBrush(SERIES_COLOURS[0])
                for k in range(len(per_class))
            ],
        )
        self.tooltips.texts = [
            f"{self.classes[k] if k < len(self.classes) else k}: IoU {number(r.get('iou'))}, "
            f"{int(r.get('pixels') or 0):,} pixels"
            for k, r in enumerate(per_class)
        ]
        category_ticks(self.iou_plot, self.classes)
        self.iou_plot.setXRange(-0.6, max(len(per_class), 1) - 0.4, padding=0)
        self.iou_plot.setYRange(0, 1.05, padding=0)
        self.iou_plot.getPlotItem().update_empty_state()
        self.legend.setText(
            " ".join(
                f"<span style='color: rgb({r},{g},{b})'>■</span> {name}"
                + (" (clear)" if k in self.clear_set else "")
                for k, (name, (r, g, b)) in enumerate(zip(self.classes, self.colours.tolist()))
            )
        )
        worst = evaluation.get("worst") or []
        # The worst few carry thumbnails; the rest (and a run from before thumbnails: all) only a predicted
        # mask.
        if any("thumbnail" in w for w in worst):
            worst = [w for w in worst if "thumbnail" in w]
        self.worst = [w for w in worst if any(a is not None for a in thumbnail_arrays(w))]
        for info in self.worst:
            image, _true, predicted = thumbnail_arrays(info)
            item = QListWidgetItem(f"#{info['index']}\nmIoU {number(info.get('miou'))}")
            item.setToolTip(
                f"{info.get('split', 'test')} #{info['index']}: mIoU {number(info.get('miou'))}, "
                f"pixel accuracy {number(info.get('pixel_acc'))}"
            )
            item.setIcon(
                QIcon(scaled_pixmap(to_qimage(overlay(image, predicted, self.colours, self.clear_set)), 72))
            )
            self.gallery.addItem(item)
        if self.worst:
            self.gallery.setCurrentRow(0)

    def show_image(self, row: int) -> None:
        """The row-th worst image large: the image, the true mask over it, the predicted mask over it."""
        if not 0 <= row < len(self.worst):
            self._clear_images()
            return
        info = self.worst[row]
        image, true, predicted = thumbnail_arrays(info)
        pictures = [
            overlay(image, None, self.colours, self.clear_set) if image is not None else None,
            overlay(image, true, self.colours, self.clear_set) if true is not None else None,
            overlay(image, predicted, self.colours, self.clear_set) if predicted is not None else None,
        ]
        for plot, item, picture in zip(self.image_plots, self.image_items, pictures):
            if picture is None:
                item.clear()
            else:
                item.setImage(picture.transpose(1, 0, 2), levels=(0, 255))  # ImageItem wants (x, y, rgb)
            plot.getPlotItem().update_empty_state()
        shown = next((picture for picture in pictures if picture is not None), None)
        if shown is not None:
            # Each plot to the image's own bounds. They are not linked: aspect-locked views linked to each
            # other widen each other's range in turn at every resize, which left the image a third of its
            # plot.
            height, width = shown.shape[:2]
            for plot in self.image_plots:
                plot.getPlotItem().vb.setRange(xRange=(0, width), yRange=(0, height), padding=0.02)
        self.detail_title.setText(
            f"{info.get('split', 'test')} #{info['index']} · mIoU {number(info.get('miou'))} · "
            f"pixel accuracy {number(info.get('pixel_acc'))}"
        )

    def _on_gallery_activated(self, item: QListWidgetItem) -> None:
        row = self.gallery.row(item)
        if 0 <= row < len(self.worst):
            info = self.worst[row]
            self.sample_requested.emit(
                str(info.get("split", "test")),
                int(info["index"]),
                f"mIoU {number(info.get('miou'))} on this image",
            )
