"""One sample at full size: label, index, shape, per-channel value histogram, and the augmentation
before/after."""

from __future__ import annotations

import random

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QGroupBox,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.images import scaled_pixmap, to_qimage
from workbench.gui.panels.data.input_plots import draw_sample, sample_lines
from workbench.gui.plots import CHANNEL_COLOURS, make_plot


def _image_label(size: int) -> QLabel:
    label = QLabel()
    label.setAlignment(Qt.AlignCenter)
    label.setMinimumSize(size, size)
    # Ignored, not Expanding: a pixmap's size is the label's size hint, and the sample view sits in a scroll
    # area that sizes it by its hints, so each picture scaled to its label would make the label grow again.
    label.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Ignored)
    # Palette roles, not a style sheet: Qt reads palette() in a sheet once, so a sheet kept the light theme's
    # white behind the images after a switch to dark.
    label.setAutoFillBackground(True)
    label.setBackgroundRole(QPalette.AlternateBase)
    label.setFrameShape(QFrame.StyledPanel)
    return label


HISTOGRAM_MIN_HEIGHT = 180
PIXELS = ("Pixel values", "count", "value (0–255)")  # the plot's title and axes for an image


class SampleView(QWidget):
    reroll_requested = Signal(int)  # a new augmentation seed

    def __init__(self, parent=None):
        super().__init__(parent)
        self.result: dict | None = None
        self.title = QLabel("Click a thumbnail to inspect it.")
        self.title.setWordWrap(True)
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.15)
        font.setBold(True)
        self.title.setFont(font)
        self.details = QLabel("")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.image = _image_label(120)
        self.histogram = make_plot(*PIXELS, empty="The histogram of the sample's pixel values appears here.")
        # Room for a readable plot under its title and axis labels (110 px left about 40 px of bars).
        self.histogram.setMinimumHeight(HISTOGRAM_MIN_HEIGHT)
        self.before = _image_label(64)
        self.after = _image_label(64)
        self.reroll_button = QPushButton("Re-roll augmentation")
        self.reroll_button.setToolTip("Draw new random augmentation parameters for this sample (R)")
        self.reroll_button.setShortcut("R")
        self.reroll_button.clicked.connect(lambda: self.reroll_requested.emit(random.randrange(2**31)))
        self.transform_note = QLabel("")
        self.transform_note.setWordWrap(True)
        transforms = self.transforms = QGroupBox("Transforms: before / after")
        grid = QGridLayout(transforms)
        grid.addWidget(QLabel("Before"), 0, 0, Qt.AlignHCenter)
        grid.addWidget(QLabel("After augmentation"), 0, 1, Qt.AlignHCenter)
        grid.addWidget(self.before, 1, 0)
        grid.addWidget(self.after, 1, 1)
        grid.addWidget(self.transform_note, 2, 0, 1, 2)
        grid.addWidget(self.reroll_button, 3, 0, 1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.image, 3)
        layout.addWidget(self.details)
        layout.addWidget(self.histogram, 2)
        layout.addWidget(transforms, 2)
        self.clear()

    def heightForWidth(self, width: int) -> int:  # noqa: N802 (Qt override)
        """The least height at `width`: the layout's minimum plus the lines the wrapped texts add. The scroll
        area around the view sizes it by this, so the view fills what is shown and scrolls only when its texts
        wrap past that (the layout's own answer is its preferred height, which a scaled picture keeps
        raising)."""
        layout = self.layout()
        margins = layout.contentsMargins()
        inner = width - margins.left() - margins.right()
        extra = sum(
            max(0, label.heightForWidth(inner) - label.minimumSizeHint().height())
            for label in (self.title, self.details)
            if label.isVisible() and label.text()
        )
        return layout.totalMinimumSize().height() + extra

    def clear(self, message: str = "Click a thumbnail to inspect it.") -> None:
        self.result = None
        self.title.setText(message)
        self.details.setText("")
        for label in (self.image, self.before, self.after):
            label.clear()
        self.histogram.clear()
        self.reroll_button.setEnabled(False)

    def show_loading(self, text: str) -> None:
        self.title.setText(text)

    def show_sample(self, result: dict, augment_steps: list[dict], note: str = "") -> None:
        """Show a data.sample result; `note` (e.g. a model's wrong prediction for it) goes under the title."""
        if result.get("user"):
            self.show_user_sample(result, note)
            return
        self.transforms.show()
        self.image.show()
        self.result = result
        shape = "×".join(str(n) for n in result["shape"])
        title = f"{result['split']} #{result['index']} — {result['class_name']} (label {result['label']})"
        self.title.setText(f"{title}<br><span style='font-weight:normal'>{note}</span>" if note else title)
        mean = ", ".join(f"{v:.3f}" for v in result.get("mean", []))
        std = ", ".join(f"{v:.3f}" for v in result.get("std", []))
        lines = [f"Tensor shape {shape} (C×H×W) · normalised with mean [{mean}] std [{std}]"]
        if result.get("path"):
            lines.append(f"File {result['path']}")
        self.details.setText("\n".join(lines))
        self._set_image(self.image, result["image"])
        self._set_image(self.before, result["image"])
        self._set_image(self.after, result["augmented"])
        self._draw_histogram(result["histogram"])
        if augment_steps:
            names = ", ".join(step.get("name", "?") for step in augment_steps)
            self.transform_note.setText(f"Augmentation: {names}")
        else:
            self.transform_note.setText("No augmentation is set: choose some in the dataset dialog (Ctrl+D).")
        self.reroll_button.setEnabled(bool(augment_steps))

    def _set_image(self, label: QLabel, image: np.ndarray) -> None:
        size = max(32, min(label.width(), label.height()) - 4)
        label.setPixmap(scaled_pixmap(to_qimage(image), size))

    def _draw_histogram(self, histogram: dict) -> None:
        self.histogram.clear()
        self._pixel_axes()
        edges, counts = np.asarray(histogram["edges"]), np.asarray(histogram["counts"])
        colours = CHANNEL_COLOURS.get(counts.shape[0], CHANNEL_COLOURS[3])
        for channel, row in enumerate(counts):
            colour = colours[channel % len(colours)]
            self.histogram.plot(
                edges,
                row,
                stepMode="center",
                pen=pg.mkPen(colour, width=2),
                fillLevel=0,
                fillBrush=pg.mkColor(colour + "40"),
            )

    def show_user_sample(self, result: dict, note: str = "") -> None:
        """A sample of the user's own Dataset: the image with its mask blended in (and which colour is which
        class), or, for inputs that are not images, the input as its kind reads (a token sequence's text and
        ids, a signal's line, a row's features) over the shapes, dtypes and value ranges of its tensors."""
        self.result = result
        target = result["target"]
        title = f"{result['split']} #{result['index']} — target {target['text']}"
        self.title.setText(f"{title}<br><span style='font-weight:normal'>{note}</span>" if note else title)
        lines = [f"{s.get('name', 'input')}: {_tensor_text(s)}" for s in result["inputs"]]
        lines.append(f"target: {_tensor_text(target)}")
        legend = result.get("mask_classes") or []
        if legend:
            swatches = " ".join(
                f"<span style='color:rgb({c[0]},{c[1]},{c[2]})'>■</span> {item['id']}: {item['name']}"
                for item in legend
                for c in [item["colour"]]
            )
            lines.append(f"mask overlay: {swatches}")
        sample = result.get("sample") or {}
        lines[:0] = sample_lines(sample)  # the input itself first (its text, ids), its tensor summary after
        self.details.setText("<br>".join(lines))
        self.transforms.hide()  # the workbench does not augment a user's Dataset: its own transforms do
        self.histogram.clear()
        if "image" in result:
            self.image.show()
            self.histogram.show()
            self._set_image(self.image, result["image"])
            self._draw_histogram(result["histogram"])
        else:
            self.image.clear()
            self.image.hide()
            # A plot of what this input is (ids by position, a signal, a row's features); none for other
            # tensors, where an empty "Pixel values" histogram said nothing true.
            self.histogram.setVisible(draw_sample(self.histogram, sample))

    def _pixel_axes(self) -> None:
        """The plot back to an image's pixel histogram (after a token sequence or a signal was drawn on
        it)."""
        self.histogram.show()
        self.histogram.setTitle(PIXELS[0], size="10pt")
        self.histogram.setLabel("left", PIXELS[1])
        self.histogram.setLabel("bottom", PIXELS[2])
        self.histogram.getAxis("bottom").setTicks(None)


def _tensor_text(summary: dict) -> str:
    shape = "×".join(str(n) for n in summary["shape"]) or "scalar"
    if summary.get("min") is None:
        return f"{shape} {summary['dtype']}"
    return (
        f"{shape} {summary['dtype']}, {summary['min']:.4g} … {summary['max']:.4g}, mean {summary['mean']:.4g}"
    )
