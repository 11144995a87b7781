"""Try it on a detection run: the image with the detector's boxes over it as a zoomable plot, the sample's
true boxes dashed, and a score threshold (a slider, kept in the settings) for which boxes are drawn; for a
detection quantize run the FP32 detector's boxes beside the quantized one's, and how far the two agree. GUI
side; never imports torch.
"""

from __future__ import annotations

import html

import numpy as np
from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSlider, QVBoxLayout, QWidget

from workbench.box_agreement import agreement
from workbench.gui.panels.boxes_plot import BoxesPlot
from workbench.gui.widgets.layouts import clear_layout

THRESHOLD_KEY = "try_it/detection_score_threshold"


def boxes_of(rows) -> dict:
    """The worker's rows ({class, probability, box}) as the plot's {boxes, labels, scores}."""
    rows = rows or []
    return {
        "boxes": [row["box"] for row in rows],
        "labels": [int(row["class"]) for row in rows],
        "scores": [float(row["probability"]) for row in rows],
    }


def shown_count(rows, threshold: float) -> int:
    return sum(1 for row in rows or [] if row.get("probability", 0) >= threshold)


def agreement_text(result: dict, quantized_name: str, threshold: float) -> str:
    """One line: how many of the FP32 detector's boxes scoring `threshold` or more the quantized one also
    finds."""
    if result.get("fp32") is None or result.get("quantized") is None:
        return ""
    found = agreement(result["fp32"], result["quantized"], threshold)
    text = (
        f"{quantized_name} finds {found['matched']} of the FP32 detector's {found['fp32']} box(es) "
        f"(same class, IoU ≥ {found['iou_min']:g})"
    )
    if found.get("mean_iou") is not None:
        text += f", mean IoU {found['mean_iou']:.3f}"
    extra = found["quantized"] - found["matched"]
    if extra > 0:
        text += f"; {extra} box(es) of its own"
    return text


class BoxPictures(QWidget):
    """show_result(a predict.model answer for a detection run, the quantized model's name); clear().
    `threshold_changed` fires when the slider moves, so the view's verdict counts the same boxes."""

    threshold_changed = Signal(float)

    def __init__(self, parent=None, settings: QSettings | None = None):
        super().__init__(parent)
        self.settings = settings if settings is not None else QSettings()  # the window's own by default
        self.result: dict | None = None
        self.quantized_name = "quantized"
        self.pictures: dict[str, BoxesPlot] = {}
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.setSpacing(8)
        self.threshold = QSlider(Qt.Horizontal)
        self.threshold.setRange(0, 100)
        self.threshold.setToolTip("Boxes scoring below this are not drawn (kept for next time)")
        self.threshold_label = QLabel()
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        self.caption.setTextFormat(Qt.RichText)
        slider = QHBoxLayout()
        slider.addWidget(QLabel("Score ≥"))
        slider.addWidget(self.threshold, 1)
        slider.addWidget(self.threshold_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.row, 1)
        layout.addLayout(slider)
        layout.addWidget(self.caption)
        self.threshold.setValue(int(round(100 * float(self.settings.value(THRESHOLD_KEY, 0.5)))))
        self.threshold_label.setText(f"{self.value():.2f}")
        self.threshold.valueChanged.connect(self._on_threshold)

    def value(self) -> float:
        return self.threshold.value() / 100

    def clear(self) -> None:
        clear_layout(self.row)
        self.pictures = {}
        self.result = None
        self.caption.setText("")

    def show_result(self, result: dict, quantized_name: str) -> None:
        self.clear()
        self.result, self.quantized_name = result, quantized_name
        if result.get("run_kind") == "quantize":
            named = [("fp32", "FP32"), ("quantized", quantized_name)]
        else:
            named = [("predictions", "Predicted")]
        for key, title in named:
            if result.get(key) is None:
                continue
            picture = BoxesPlot(title=title, empty="No image to draw on.")
            picture.plot.setToolTip(
                f"{title}: its boxes at the score threshold in their class colours"
                + ("; the sample's true boxes dashed gold" if result.get("truth") else "")
                + ". Scroll to zoom, drag to pan"
            )
            self.row.addWidget(picture.plot)
            self.pictures[key] = picture
        self._draw()

    def _draw(self) -> None:
        result = self.result or {}
        image = result.get("image")
        pixels = image if isinstance(image, np.ndarray) and image.ndim == 3 else None
        classes = [str(c) for c in result.get("classes") or []] or self._classes(result)
        size = tuple((result.get("input") or {}).get("model_size") or [0, 0])[::-1]
        counts = []
        for key, picture in self.pictures.items():
            shown = picture.show(
                pixels, size, result.get("truth"), boxes_of(result.get(key)), classes, self.value()
            )
            title = "FP32" if key == "fp32" else self.quantized_name if key == "quantized" else "Predicted"
            counts.append(f"{title}: {shown} box(es)")
        agreement = agreement_text(result, self.quantized_name, self.value())
        self.caption.setText(
            html.escape(" · ".join(counts) + (f" — {agreement}" if agreement else ""), quote=False)
        )

    @staticmethod
    def _classes(result: dict) -> list[str]:
        """The class names the answer's rows carry, by class index (1..K)."""
        names: dict[int, str] = {}
        for key in ("predictions", "fp32", "quantized"):
            for row in result.get(key) or []:
                names.setdefault(int(row["class"]), str(row["label"]))
        return [names.get(k, str(k)) for k in range(1, max(names, default=0) + 1)]

    def _on_threshold(self, value: int) -> None:
        self.threshold_label.setText(f"{value / 100:.2f}")
        self.settings.setValue(THRESHOLD_KEY, value / 100)
        if self.result is not None:
            self._draw()
        self.threshold_changed.emit(value / 100)
