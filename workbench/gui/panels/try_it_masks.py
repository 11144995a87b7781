"""Try it on a segmentation run: the image as the model saw it with each predicted mask over it (FP32 beside
the quantized one for a quantize run), the true mask over it when the sample's is known, a legend of the class
colours, and a table of each class's pixel share and (with a true mask) IoU. The colours and the blend are the
segmentation evaluation view's, so a class looks the same in both.

GUI side; never imports torch.
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.images import scaled_pixmap, to_qimage
from workbench.gui.panels.training.evaluation_segmentation import class_colours, clear_classes, overlay
from workbench.gui.widgets.layouts import clear_layout
from workbench.results import dig

MASK_BOX = 240


def _percent(value) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) else "—"


def mask_array(value) -> np.ndarray | None:
    """A mask as the worker sends it (a uint8 array, or rows of ints from JSON) as (H, W) uint8, else None."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.ndim != 2 or array.size == 0:
        return None
    return array.astype(np.uint8, copy=False)


def panels_of(result: dict, quantized_name: str) -> list[tuple[str, str, np.ndarray]]:
    """(key, title, mask) of each picture to draw: the predicted mask(s) first, then the true mask."""
    masks = result.get("masks") or {}
    if result.get("run_kind") == "quantize":
        named = [("fp32", "FP32"), ("quantized", quantized_name)]
    else:
        named = [("fp32", "Predicted")]
    if not masks:  # only the one predicted mask
        masks, named = {"fp32": result.get("mask")}, [("fp32", "Predicted")]
    out = [(key, title, mask_array(masks.get(key))) for key, title in named]
    out.append(("true", "True mask", mask_array(result.get("true_mask"))))
    return [(key, title, mask) for key, title, mask in out if mask is not None]


class MaskPanel(QWidget):
    """The pictures and the legend of one segmentation answer."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(12)
        self.legend = QLabel("")
        self.legend.setTextFormat(Qt.RichText)
        self.legend.setWordWrap(True)
        self.legend.setToolTip("Each class's colour over the image; a background class is left clear")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.row)
        layout.addWidget(self.legend)
        layout.addStretch(1)  # the pictures right under the table, the spare room below
        self.pictures: dict[str, QLabel] = {}

    def clear(self) -> None:
        clear_layout(self.row)
        self.pictures = {}
        self.legend.setText("")

    def show_result(self, result: dict, image: np.ndarray | None, quantized_name: str) -> None:
        self.clear()
        classes = [str(c) for c in result.get("classes") or []]
        colours = class_colours(len(classes))
        clear = clear_classes(classes)
        scores = result.get("scores") or {}
        for key, title, mask in panels_of(result, quantized_name):
            base = image if image is not None and image.shape[:2] == mask.shape else None
            picture = QLabel()
            picture.setAlignment(Qt.AlignCenter)
            picture.setMinimumSize(MASK_BOX // 2, MASK_BOX // 2)
            picture.setPixmap(scaled_pixmap(to_qimage(overlay(base, mask, colours, clear)), MASK_BOX))
            found = scores.get(key) or {}
            # Two lines under every picture, so the pictures of a row stay level.
            second = (
                f"pixel accuracy {_percent(found['pixel_accuracy'])} · mIoU {_percent(found.get('miou'))}"
                if found.get("pixel_accuracy") is not None
                else "the sample's own labels"
                if key == "true"
                else "no true mask to compare with"
            )
            caption = QLabel(f"<b>{html.escape(title)}</b><br>{second}")
            caption.setAlignment(Qt.AlignHCenter | Qt.AlignTop)
            caption.setTextFormat(Qt.RichText)
            box = QWidget()
            box.setToolTip(
                f"{title}: each pixel's class colour over the image the model saw"
                if key != "true"
                else "The sample's true mask over the image, to compare with"
            )
            column = QVBoxLayout(box)
            column.setContentsMargins(0, 0, 0, 0)
            column.addWidget(picture, 1)
            column.addWidget(caption)
            self.row.addWidget(box)
            self.pictures[key] = picture
        self.legend.setText(
            "Classes: "
            + " &nbsp; ".join(
                (
                    f"<span style='font-size: large'>□</span> {html.escape(name)} (clear)"
                    if k in clear
                    else (
                        f"<span style='color: rgb({r},{g},{b}); font-size: large'>■</span> "
                        f"{html.escape(name)}"
                    )
                )
                for k, (name, (r, g, b)) in enumerate(zip(classes, colours.tolist()))
            )
        )


def fill_share_table(table: QTableWidget, result: dict, series: list[tuple[str, list[dict]]]) -> None:
    """One row per class: its share of the pixels per model and, with a true mask, its IoU per model."""
    classes = [str(c) for c in result.get("classes") or []]
    scores = result.get("scores") or {}
    keys = ["fp32", "quantized"] if len(series) > 1 else ["fp32"]
    named = [(name, rows, scores.get(key) or {}) for (name, rows), key in zip(series, keys)]
    headers = ["Class"]
    for name, _, found in named:
        prefix = f"{name} " if len(named) > 1 else ""
        headers.append(f"{prefix}pixels")
        if found.get("iou"):
            headers.append(f"{prefix}IoU")
    table.setColumnCount(len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.setRowCount(len(classes))
    colours = class_colours(len(classes))
    clear = clear_classes(classes)
    for k, label in enumerate(classes):
        cells = [label]
        for _, rows, found in named:
            share = next((row.get("share") for row in rows if row.get("class") == k), None)
            cells.append(_percent(share))
            if found.get("iou"):
                iou = next((row.get("iou") for row in found["iou"] if row.get("class") == k), None)
                cells.append(f"{iou:.3f}" if isinstance(iou, (int, float)) else "—")
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            if column:
                item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
            elif k not in clear:  # a clear class has no colour over the image: no swatch either
                r, g, b = colours[k].tolist()
                item.setData(Qt.DecorationRole, _swatch(r, g, b))
            table.setItem(k, column, item)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.Stretch)
    header.setSectionResizeMode(0, QHeaderView.ResizeToContents)
    # As tall as its rows (a class per row), so the pictures below get the room.
    table.resizeRowsToContents()
    height = (
        header.height() + sum(table.rowHeight(r) for r in range(table.rowCount())) + 2 * table.frameWidth()
    )
    table.setMaximumHeight(height + 2 if table.rowCount() <= 12 else 16777215)


def _swatch(r: int, g: int, b: int):
    from PySide6.QtGui import QColor, QPixmap

    pixmap = QPixmap(12, 12)
    pixmap.fill(QColor(r, g, b))
    return pixmap


def verdict(result: dict, series: list[tuple[str, list[dict]]]) -> str:
    """The class covering most pixels besides the background, per model, and how well it matches the truth."""
    classes = [str(c) for c in result.get("classes") or []]
    clear = clear_classes(classes)

    def top(rows) -> str:
        shown = [row for row in rows if row.get("class") not in clear and row.get("share", 0) > 0]
        if not shown:
            return "<b>only background</b>"
        best = max(shown, key=lambda row: row["share"])
        return f"mostly <b>{html.escape(str(best['label']))}</b> ({_percent(best['share'])} of the pixels)"

    parts = [f"{name}: {top(rows)}" if len(series) > 1 else top(rows) for name, rows in series]
    text = " · ".join(parts)
    scores = dig(result, "scores", "quantized" if len(series) > 1 else "fp32", default={})
    if scores.get("miou") is not None:
        text += f" · against the true mask: mIoU <b>{_percent(scores['miou'])}</b>"
    if result.get("mask_agreement") is not None:
        text += f" · the masks agree on {_percent(result['mask_agreement'])} of the pixels"
    return text


__all__ = ["MaskPanel", "fill_share_table", "mask_array", "panels_of", "verdict"]
