"""Try it: a finished training or quantize run's model on an image file (dropped, or Open image…) or a
sample of its dataset, through the worker's `predict.model` query: the image, what the model saw, and the
top-k classes as a table and bars, FP32 beside quantized for a quantize run. The Training and Quantization
tabs open it. Never imports torch.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QImageReader, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import WorkbenchError
from workbench.gui.images import scaled_pixmap, to_qimage
from workbench.gui.panels.data.input_plots import draw_sample, sample_lines
from workbench.gui.panels.try_it_boxes import BoxPictures, shown_count
from workbench.gui.panels.try_it_masks import MaskPanel, fill_share_table
from workbench.gui.panels.try_it_masks import verdict as mask_verdict
from workbench.gui.plots import SERIES_COLOURS, add_legend, make_plot
from workbench.gui.widgets.spec_form import ERROR_COLOUR
from workbench.results import dig
from workbench.runs import RunStore
from workbench.task_ids import PREDICT_TASK, QUANT_TASK

TASK = PREDICT_TASK
# The worker refuses a bigger file (workbench.worker.predict.MAX_INPUT_PIXELS); the window does not decode one
# either.
MAX_SHOWN_PIXELS = 50_000_000
IMAGE_BOX = 220
SEEN_BOX = 96
SPLITS = ("test", "val", "train")
IMAGE_FILTER = "Images (*.png *.jpg *.jpeg *.bmp *.gif *.tif *.tiff *.webp *.ppm *.pgm);;All files (*)"
MISMATCH = QColor(214, 39, 40, 70)  # translucent: reads on the light and the dark theme alike
DROP_TEXT = "Drop an image file here\n(PNG, JPEG, BMP, …)"


@dataclass
class RunInfo:
    """What the view says of its run before the first prediction: read from the run folders, no worker
    needed."""

    id: str
    kind: str  # "train" or "quantize"
    model: str = ""
    dataset: str = ""
    dataset_spec: dict | None = None
    scheme: str = ""  # a quantize run's bit widths, e.g. W8A8

    @property
    def takes_images(self) -> bool:
        """Whether an image file can be its input: a user's own Dataset (file:, lightning:) makes its inputs
        with its own code, token ids or signals as often as images, and the worker refuses a file for it."""
        return not self.dataset.startswith(("file:", "lightning:"))

    @property
    def quantized_name(self) -> str:
        return self.scheme or "quantized"

    @property
    def label(self) -> str:
        parts = [self.model, self.dataset, self.scheme]
        return " · ".join(p for p in parts if p) + f" (run {self.id})"


def describe_run(workspace, run_id: str) -> RunInfo:
    """The run's kind, model, dataset and (quantize runs) bit widths, its training run's where the quantize
    run's spec takes them from there; whatever cannot be read stays empty (the worker's answer names the
    problem)."""
    from workbench.gui.panels.quant.results import bit_widths

    store = RunStore(workspace)
    try:
        with store.open_run(run_id) as run:
            task, spec = run.task, run.read_spec()
    except WorkbenchError:
        return RunInfo(run_id, "train")
    kind = "quantize" if task == QUANT_TASK else "train"
    dataset = dict(spec.get("dataset") or {})
    info = RunInfo(
        run_id, kind, dig(spec, "model", "name", default=""), dataset.get("name", "digits"), dataset
    )
    if kind == "quantize":
        info.scheme = bit_widths(spec)
        source = dig(spec, "source", "run", default="")
        if source:
            try:
                with store.open_run(source) as trained:
                    trained_spec = trained.read_spec()
            except WorkbenchError:
                return info
            # The quantize run's own dataset fields that differ from the default override its training run's.
            info.dataset_spec = {
                **(trained_spec.get("dataset") or {}),
                **{k: v for k, v in dataset.items() if k != "name" or v != "digits"},
            }
            info.dataset = info.dataset_spec.get("name", "digits")
            info.model = dig(trained_spec, "model", "name", default="")
    return info


def _image_box(size: int, text: str = "") -> QLabel:
    label = QLabel(text)
    label.setAlignment(Qt.AlignCenter)
    label.setWordWrap(True)
    label.setMinimumSize(size, size)
    label.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)
    label.setAutoFillBackground(True)  # palette roles, not a sheet: they follow a theme switch
    label.setBackgroundRole(QPalette.AlternateBase)
    label.setFrameShape(QFrame.StyledPanel)
    return label


def _percent(value) -> str:
    """93.1%, and a small probability with two significant digits (0.042%), never a bare 0.0%."""
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value:.1%}" if value >= 0.001 or value == 0 else f"{value * 100:.2g}%"


DETECTION_ROWS = 20  # a detector's boxes listed, best first (it may give a hundred)


def _cell_text(row: dict | None) -> tuple[str, str]:
    """(class or output, probability or value) of one row of a prediction list."""
    if row is None:
        return "", ""
    if "probability" in row:
        on = " (on)" if row.get("positive") else ""
        return f"{row['label']}{on}", _percent(row["probability"])
    return row.get("label", ""), f"{row.get('value', float('nan')):.4g}"


class TryItView(QWidget):
    """Drop an image (or open one, or pick a dataset sample) and see the run's prediction; a quantize run's
    FP32 and quantized answers side by side, rows where they differ highlighted."""

    def __init__(
        self,
        queries,
        workspace,
        run_id: str,
        data_sample: Callable[[], dict | None] | None = None,
        parent=None,
        settings=None,
    ):
        super().__init__(parent)
        self.queries = queries
        self.settings = settings  # a QSettings (the window's): where the box score threshold is kept
        self.run = describe_run(workspace, run_id)
        self.data_sample = data_sample  # the Data tab's shown sample: {"dataset", "split", "index"} or None
        self.job: str | None = None
        self.request: dict | None = None  # the spec of the latest prediction asked for
        self.result: dict | None = None
        self.setAcceptDrops(True)
        self._build()
        self.clear_results()

    # -- layout ----------------------------------------------------------------------------------------------
    def _build(self) -> None:
        quantized = self.run.kind == "quantize"
        self._build_input_widgets(quantized)
        left = self._build_input_side()
        self._build_answer_widgets(quantized)
        right = self._build_answer_side()
        self._build_layout(left, right)
        self._connect()

    def _build_input_widgets(self, quantized: bool) -> None:
        """The heading and what picks the input: an image box, Open image, the dataset sample row, top k."""
        self.heading = QLabel(
            f"<b>Try {html.escape(self.run.label)}</b><br>"
            + (
                f"The FP32 model beside the {html.escape(self.run.quantized_name)} quantized one, on the "
                "same input."
                if quantized
                else "The model's most likely classes for one image."
                if self.run.takes_images
                else "The model's answer for one sample of its dataset."
            )
        )
        self.heading.setWordWrap(True)
        self.image = _image_box(IMAGE_BOX, DROP_TEXT)
        self.image.setToolTip(
            "Drop an image file here to try the model on it; it is converted to the model's "
            "channels, resized to its input size and normalised as the run's dataset was"
        )
        self.open_button = QPushButton("Open image…")
        self.open_button.setToolTip("Choose an image file to try the model on")
        self.split_combo = QComboBox()
        for split in SPLITS:
            self.split_combo.addItem(split, split)
        self.split_combo.setToolTip("The split of the run's own dataset to take a sample from")
        self.index_spin = QSpinBox()
        self.index_spin.setRange(0, 99_999_999)
        self.index_spin.setToolTip("The sample's index within its split (#index in the Data tab)")
        self.sample_button = QPushButton("Predict sample")
        self.sample_button.setToolTip(
            "Try the model on this sample of the run's dataset; its true label is shown"
        )
        self.data_tab_button = QPushButton("Data tab's sample")
        self.data_tab_button.setToolTip(
            "Try the model on the sample shown in the Data tab (when the Data tab shows the run's dataset)"
        )
        self.data_tab_button.setEnabled(self.data_sample is not None)
        if not self.run.takes_images:
            # Its Dataset's own code makes the inputs (token ids, signals, rows as often as images): a file
            # cannot become one, so the sample row below is the way in.
            self.open_button.setEnabled(False)
            self.open_button.hide()
            self.open_button.setToolTip(
                f"This run trained on {self.run.dataset}, your own Dataset, whose code makes "
                "its inputs; an image file cannot become one. Pick a sample below"
            )
            self.image.setText(
                "Pick a sample of the run's dataset below:<br>its split and index, then Predict sample"
            )
            self.image.setToolTip("The sample tried: its ids and decoded text, or its values")
            self.image.setTextFormat(Qt.RichText)
            self.image.setAlignment(Qt.AlignLeft | Qt.AlignTop)
            self.image.setTextInteractionFlags(Qt.TextSelectableByMouse)
            self.image.setMargin(8)
        # A signal or a row of features is drawn (a line, bars) where an image would be.
        self.sample_plot = make_plot("", "", "", empty="The sample is drawn here after a prediction.")
        self.sample_plot.setMinimumSize(IMAGE_BOX, IMAGE_BOX // 2)
        self.sample_plot.setToolTip(
            "The sample tried: a signal's values by step, or a row's value per feature"
        )
        self.sample_plot.hide()
        self.top_k_spin = QSpinBox()
        self.top_k_spin.setRange(1, 20)
        self.top_k_spin.setValue(5)
        self.top_k_spin.setPrefix("top ")
        self.top_k_spin.setToolTip("How many of the most likely classes to list")
        self.seen = _image_box(SEEN_BOX)
        self.seen.setToolTip(
            "What the model saw: the image at the model's input size and channels, before normalisation"
        )
        self.input_note = QLabel("")
        self.input_note.setWordWrap(True)
        self.input_note.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.input_note.setToolTip("How the input was read: its size and mode, and what was done to it")

    def _build_input_side(self) -> QWidget:
        """The left side: the input, how to pick another, and what the model saw."""
        sample_box = QGroupBox("Or a sample of the run's dataset")
        sample_box.setToolTip(
            f"A sample of {self.run.dataset or 'the run dataset'}, as the Data tab shows it"
        )
        sample_row = QHBoxLayout(sample_box)
        sample_row.addWidget(self.split_combo)
        sample_row.addWidget(self.index_spin)
        sample_row.addWidget(self.sample_button)
        sample_row.addWidget(self.data_tab_button)
        open_row = QHBoxLayout()
        open_row.addWidget(self.open_button)
        open_row.addStretch(1)
        open_row.addWidget(self.top_k_spin)
        seen_row = QHBoxLayout()
        seen_row.addWidget(self.seen)
        seen_row.addWidget(self.input_note, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(self.image, 3)
        left_layout.addWidget(self.sample_plot, 3)
        left_layout.addLayout(open_row)
        left_layout.addWidget(sample_box)
        left_layout.addLayout(seen_row, 1)
        return left

    def _build_answer_widgets(self, quantized: bool) -> None:
        """The answer's widgets: busy bar, status, verdict, the ranked table, its bar chart and the masks."""
        self.busy = QProgressBar()
        self.busy.setRange(0, 0)  # busy: one forward pass has no steps worth counting
        self.busy.setTextVisible(False)
        self.busy.setMaximumHeight(8)
        self.busy.setToolTip("The worker is predicting")
        self.busy.hide()
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.verdict.setToolTip("The top answer" + (" of each model" if quantized else ""))
        self.table = QTableWidget(0, 0)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setToolTip(
            "The most likely classes, ranked"
            + ("; a highlighted row is a rank where FP32 and the quantized model differ" if quantized else "")
        )
        self.chart = make_plot(
            "",
            "",
            "probability",
            x_format="percent",
            empty="The probabilities appear here after a prediction.",
        )
        self.chart.invertY(True)  # rank 1 on top, as in the table
        self.chart.setMouseEnabled(x=False, y=False)
        self.chart.setToolTip(
            "Probability of each listed class" + (", FP32 beside quantized" if quantized else "")
        )
        self.legend = add_legend(self.chart, offset=(-8, -8))  # bottom right: the top bars are the long ones
        # A segmentation run's answer is a mask: drawn over the image where the bars would be.
        self.masks = MaskPanel()
        self.masks.setToolTip(
            "The predicted mask over the image the model saw"
            + (", FP32 beside quantized" if quantized else "")
            + "; the true mask beside it for a dataset sample"
        )
        self.masks.hide()
        # A detector's answer: its boxes over the image (FP32 beside quantized for a quantize run).
        self.boxes = BoxPictures(settings=self.settings)
        self.boxes.threshold_changed.connect(self._box_verdict)
        self.boxes.hide()

    def _build_answer_side(self) -> QWidget:
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.busy)
        right_layout.addWidget(self.status)
        right_layout.addWidget(self.verdict)
        right_layout.addWidget(self.table, 2)
        right_layout.addWidget(self.chart, 3)
        right_layout.addWidget(self.masks, 3)
        right_layout.addWidget(self.boxes, 3)
        return right

    def _build_layout(self, left: QWidget, right: QWidget) -> None:
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 2)
        splitter.setStretchFactor(1, 3)
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(splitter, 1)

    def _connect(self) -> None:
        self.open_button.clicked.connect(self._on_open_clicked)
        self.sample_button.clicked.connect(
            lambda: self.predict_sample(self.split_combo.currentData(), self.index_spin.value())
        )
        self.data_tab_button.clicked.connect(self._on_data_tab_clicked)

    # -- asking ----------------------------------------------------------------------------------------------
    def predict_file(self, path: str) -> None:
        """Show the file and ask the worker for its prediction."""
        self._show_file(path)
        self._submit({"input": str(path)})

    def predict_sample(self, split: str, index: int) -> None:
        self.image.clear()
        self.image.setText(
            f"{split} #{index} of {html.escape(self.run.dataset)}<br>(loading…)"
            if not self.run.takes_images
            else f"{split} #{index} of {self.run.dataset}\n(loading…)"
        )
        self._submit({"sample": {"split": split, "index": int(index)}})

    def _submit(self, part: dict) -> None:
        if self.job is not None:
            self.queries.forget(self.job)  # only the latest input matters
        self.request = {
            "source": {"run": self.run.id},
            "top_k": self.top_k_spin.value(),
            "preview": True,
            **part,
        }
        self.busy.show()
        self._say("Predicting with the worker…")
        self.job = self.queries.query(TASK, self.request, self._on_result, self._on_error)

    def stop(self) -> None:
        """Forget the pending prediction (the view is closing): its late reply changes nothing."""
        if self.job is not None:
            self.queries.forget(self.job)
            self.job = None
        self.busy.hide()

    def _on_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open an image to try the model on", "", IMAGE_FILTER)
        if path:
            self.predict_file(path)

    def _on_data_tab_clicked(self) -> None:
        shown = self.data_sample() if self.data_sample is not None else None
        if not shown:
            self._say(
                "Click a sample in the Data tab first; its split and index are then tried here.", error=True
            )
            return
        dataset = dig(shown, "dataset", "name", default="digits")
        if dataset != self.run.dataset:
            self._say(
                f"The Data tab shows {dataset}, but this run was trained on {self.run.dataset}: open "
                f"{self.run.dataset} there, or drop an image file here.",
                error=True,
            )
            return
        self.split_combo.setCurrentIndex(max(0, self.split_combo.findData(shown["split"])))
        self.index_spin.setValue(int(shown["index"]))
        self.predict_sample(shown["split"], int(shown["index"]))

    # -- drag and drop ---------------------------------------------------------------------------------------
    @staticmethod
    def _dropped_file(mime) -> str | None:
        for url in mime.urls() if mime.hasUrls() else []:
            if url.isLocalFile():
                return url.toLocalFile()
        return None

    def dragEnterEvent(self, event) -> None:
        if self.run.takes_images and self._dropped_file(event.mimeData()):
            event.acceptProposedAction()

    def dragMoveEvent(self, event) -> None:
        if self.run.takes_images and self._dropped_file(event.mimeData()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        path = self._dropped_file(event.mimeData())
        if path:
            event.acceptProposedAction()
            self.predict_file(path)

    # -- answers ---------------------------------------------------------------------------------------------
    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(text)
        self.status.setStyleSheet(f"color: {ERROR_COLOUR}" if error else "color: palette(placeholder-text)")

    def _on_error(self, error: dict) -> None:
        self.job = None
        self.busy.hide()
        if error.get("type") == "JobCancelled":
            self._say("Cancelled.")
            return
        self.clear_results()
        self._say(f"Could not predict: {error.get('message') or error.get('type')}", error=True)

    def _on_result(self, result: dict) -> None:
        self.job = None
        self.busy.hide()
        self.show_result(result)

    def _show_file(self, path: str) -> None:
        """The file as it is, decoded by Qt at most a few hundred pixels a side (never a huge one in full)."""
        self.image.clear()
        reader = QImageReader(str(path))
        reader.setAutoTransform(True)
        size = reader.size()
        name = Path(path).name
        if size.isValid() and size.width() * size.height() > MAX_SHOWN_PIXELS:
            self.image.setText(f"{name}\n{size.width()}×{size.height()}: too large to show")
            return
        if size.isValid() and max(size.width(), size.height()) > 2 * IMAGE_BOX:
            reader.setScaledSize(size.scaled(QSize(2 * IMAGE_BOX, 2 * IMAGE_BOX), Qt.KeepAspectRatio))
        image = reader.read()
        if image.isNull():
            self.image.setText(f"{name}\n(not shown: {reader.errorString()})")
            return
        box = max(32, min(self.image.width(), self.image.height()) - 4)
        self.image.setPixmap(scaled_pixmap(image, box))

    def clear_results(self) -> None:
        self.result = None
        self.verdict.setText("")
        self.table.clear()
        self.table.setRowCount(0)
        self.table.setColumnCount(0)
        self.chart.clear()
        self.legend.clear()
        self.chart.getAxis("left").setTicks(None)
        self.masks.clear()
        self.boxes.clear()
        self.boxes.hide()
        self.table.setMinimumHeight(0)
        self.seen.clear()
        self.input_note.setText("")
        self.sample_plot.hide()
        self.image.show()

    def series(self, result: dict) -> list[tuple[str, list[dict]]]:
        """(name, ranked rows) per model: FP32 then quantized for a quantize run, else the run's one model."""
        if result.get("run_kind") == "quantize":
            named = [("FP32", result.get("fp32")), (self.run.quantized_name, result.get("quantized"))]
            return [(name, rows) for name, rows in named if rows is not None]
        return [("FP32", result.get("predictions") or [])]

    def show_result(self, result: dict) -> None:
        self.clear_results()
        self.result = result
        series = self.series(result)
        notes = list(result.get("notes") or [])
        self._say(" ".join(notes), error=False)
        if result.get("task") == "detection":
            self._show_boxes(result)
            return
        segmentation = result.get("task") == "segmentation"
        self.masks.setVisible(segmentation)
        # Every class of a mask, every value of a regression is listed: no top k to choose.
        self.top_k_spin.setVisible(result.get("task") not in ("segmentation", "regression"))
        # A regression's values are in the table (with the true ones): no probability bars to draw.
        self.chart.setVisible(result.get("task") not in ("segmentation", "regression"))
        if segmentation:
            fill_share_table(self.table, result, series)
            preview = result.get("preview")
            self.masks.show_result(
                result, preview if isinstance(preview, np.ndarray) else None, self.run.quantized_name
            )
            self.verdict.setText(mask_verdict(result, series))
        else:
            self.table.setMaximumHeight(16777215)
            self._fill_table(series, result.get("task", "classification"))
            if result.get("task") == "regression":
                self._add_true_values(result)
            self._draw_bars(series)
            self.verdict.setText(self._verdict(result, series))
        self._show_input(result)

    def _show_boxes(self, result: dict) -> None:
        """A detector's answer: the image with its boxes above the score threshold drawn (FP32 beside the
        quantized detector's for a quantize run), and the boxes as rows (class, score, box), best first."""
        self.masks.setVisible(False)
        self.top_k_spin.setVisible(False)
        self.chart.setVisible(False)
        # the best boxes readable above the pictures: about six rows
        self.table.setMinimumHeight(7 * self.table.verticalHeader().defaultSectionSize())
        if result.get("run_kind") == "quantize":
            series = [(name, rows[:DETECTION_ROWS]) for name, rows in self.series(result)]
            self._fill_table(series, "detection")
        else:
            rows = list(result.get("predictions") or [])[:DETECTION_ROWS]
            self._fill_table([("FP32", rows)], "detection")
            self.table.setColumnCount(4)
            self.table.setHorizontalHeaderLabels(["#", "Class", "Score", "Box (x1, y1, x2, y2)"])
            for i, row in enumerate(rows):
                self.table.setItem(i, 3, QTableWidgetItem(", ".join(f"{v:.0f}" for v in row.get("box", []))))
        self._show_input(result)
        shown = result.get("image")
        if not isinstance(shown, np.ndarray):
            shown = result.get("preview")
        if isinstance(shown, np.ndarray) and shown.ndim == 3:
            size = max(32, min(self.image.width(), self.image.height()) - 4)
            self.image.setPixmap(scaled_pixmap(to_qimage(shown), size))
        self.boxes.show_result(result, self.run.quantized_name)
        self.boxes.setVisible(True)
        self._box_verdict(self.boxes.value())

    def _box_verdict(self, threshold: float) -> None:
        """How many boxes score `threshold` or more (each model's for a quantize run), the best named."""
        result = self.result or {}
        if result.get("task") != "detection":
            return
        if result.get("run_kind") == "quantize":
            self.verdict.setText(
                " · ".join(
                    f"{name}: {shown_count(result.get(key), threshold)} box(es) score {threshold:g} or more"
                    for name, key in (("FP32", "fp32"), (self.run.quantized_name, "quantized"))
                    if result.get(key) is not None
                )
            )
            return
        rows = list(result.get("predictions") or [])
        shown = [r for r in rows if r.get("probability", 0) >= threshold]
        named = ", ".join(f"{r['label']} {r['probability']:.2f}" for r in shown[:6])
        self.verdict.setText(
            f"{len(shown)} box(es) score {threshold:g} or more"
            + (f": {named}" if named else "")
            + f" · {len(rows)} in all"
        )

    @staticmethod
    def mismatched_rows(series) -> list[int]:
        """Ranks at which the two models name different classes (regression values always differ a little, so
        they are compared in the table's numbers, not highlighted)."""
        if len(series) < 2:
            return []
        (_, a), (_, b) = series[:2]

        def cls(rows, i):
            return rows[i].get("class") if i < len(rows) else None

        return [i for i in range(max(len(a), len(b))) if cls(a, i) != cls(b, i)]

    def _fill_table(self, series, task: str) -> None:
        value = {"regression": "value", "detection": "score"}.get(task, "probability")
        first = "output" if task == "regression" else "label" if task == "multilabel" else "class"
        headers = ["#"]
        for name, _ in series:
            headers += (
                [f"{name} {first}", f"{name} {value}"]
                if len(series) > 1
                else [first.capitalize(), value.capitalize()]
            )
        rows = max((len(r) for _, r in series), default=0)
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(headers)
        self.table.setRowCount(rows)
        mismatched = set(self.mismatched_rows(series))
        for i in range(rows):
            cells = [str(i + 1)]
            for _, ranked in series:
                cells += list(_cell_text(ranked[i] if i < len(ranked) else None))
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column and column % 2 == 0:
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                if i in mismatched:
                    item.setBackground(MISMATCH)
                    item.setToolTip(f"At rank {i + 1} FP32 and the quantized model differ")
                self.table.setItem(i, column, item)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        header.setStretchLastSection(True)

    def _add_true_values(self, result: dict) -> None:
        """A regression sample's true value beside each predicted one, when the sample's target lists them."""
        truth = dig(result, "truth", "value")
        values = truth if isinstance(truth, list) else [truth] if isinstance(truth, (int, float)) else None
        rows = self.table.rowCount()
        if values is None:
            return
        flat = np.asarray(values, dtype=float).reshape(-1)
        if len(flat) != rows:
            return
        column = self.table.columnCount()
        self.table.setColumnCount(column + 1)
        self.table.setHorizontalHeaderItem(column, QTableWidgetItem("True"))
        for i, value in enumerate(flat.tolist()):
            item = QTableWidgetItem(f"{value:.4g}")
            item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
            item.setToolTip("The sample's true value")
            self.table.setItem(i, column, item)

    def _draw_bars(self, series) -> None:
        """Horizontal bars of each listed class's probability, one colour per model (none for regression)."""
        order: list[int] = []
        labels: dict[int, str] = {}
        for _, ranked in series:
            for row in ranked:
                if "probability" in row and row["class"] not in labels:
                    order.append(row["class"])
                    labels[row["class"]] = str(row["label"])
        if not order:
            self.chart.set_empty_text(
                "A regression run's values are in the table."
                if series and series[0][1]
                else "The probabilities appear here after a prediction."
            )
            return
        position = {cls: i for i, cls in enumerate(order)}
        thickness = 0.8 / len(series)
        for s, (name, ranked) in enumerate(series):
            probabilities = {row["class"]: row["probability"] for row in ranked if "probability" in row}
            ys = (
                np.array([position[c] for c in probabilities], dtype=float)
                + (s - (len(series) - 1) / 2) * thickness
            )
            bars = pg.BarGraphItem(
                x0=0,
                y=ys,
                height=thickness,
                width=np.array(list(probabilities.values())),
                brush=SERIES_COLOURS[s % len(SERIES_COLOURS)],
                pen=None,
                name=name,
            )
            self.chart.addItem(bars)
        self.chart.getAxis("left").setTicks([[(float(i), labels[c]) for i, c in enumerate(order)]])
        self.chart.setXRange(0, 1, padding=0.02)
        self.chart.setYRange(-0.6, len(order) - 0.4, padding=0)

    def _verdict(self, result: dict, series) -> str:
        def top(ranked) -> str:
            if not ranked:
                return "nothing"
            if result.get("task") == "multilabel":
                on = [str(r["label"]) for r in ranked if r.get("positive")]
                return f"<b>{html.escape(', '.join(on) or 'no label on')}</b>"
            text, value = _cell_text(ranked[0])
            return f"<b>{html.escape(text)}</b> ({value})"

        if len(series) > 1:
            text = " · ".join(f"{name} says {top(ranked)}" for name, ranked in series)
        else:
            text = top(series[0][1]) if series else ""
        truth = result.get("truth") or {}
        if "label" in truth:
            text += f" · true label <b>{html.escape(str(truth['label']))}</b>"
        elif result.get("task") == "regression" and isinstance(truth.get("value"), (int, float, list)):
            flat = np.asarray(truth["value"], dtype=float).reshape(-1)
            if len(flat) == 1:
                text += f" · true value <b>{flat[0]:.4g}</b>"
        if len(series) > 1 and result.get("agree") is not None:
            agree = bool(result["agree"])
            text += (
                " — <span>they agree</span>"
                if agree
                else f" — <span style='color:{ERROR_COLOUR}'>they disagree</span>"
            )
        elif result.get("run_kind") == "quantize" and result.get("fp32") is None:
            text += " (no FP32 model to compare with)"
        return text

    def _show_input(self, result: dict) -> None:
        info = result.get("input") or {}
        preview = result.get("preview")
        if isinstance(preview, np.ndarray) and preview.ndim == 3 and preview.shape[2] in (1, 3):
            image = to_qimage(preview)
            self.seen.setPixmap(scaled_pixmap(image, SEEN_BOX - 4))
            if info.get("kind") == "sample":
                self.image.setPixmap(
                    scaled_pixmap(image, max(32, min(self.image.width(), self.image.height()) - 4))
                )
        lines = []
        height, width = (info.get("model_size") or [0, 0])[:2]
        shape = f"{width}×{height} {'grayscale' if info.get('channels') == 1 else 'RGB'}"
        if info.get("kind") == "file":
            w, h = info.get("size") or [0, 0]
            lines.append(
                f"<b>{html.escape(Path(info.get('path', '')).name)}</b>: {info.get('format') or '?'} "
                f"{info.get('mode', '')} {w}×{h} → the model's {shape}"
            )
            lines += [html.escape(note) for note in info.get("notes") or []]
        elif info.get("kind") == "sample":
            lines.append(
                f"<b>{info.get('split')} #{info.get('index')}</b> of {html.escape(result.get('dataset', ''))}"
                + (f", the model's {shape}" if height else "")
            )
            if info.get("note"):
                lines.append(html.escape(info["note"]))
            sample = info.get("sample") or {}
            if sample:  # not an image: the sample as its kind reads, where the picture would be
                self.image.setText("<br>".join(sample_lines(sample)))
                self.seen.setText(
                    f"{sample.get('length', '')} tokens"
                    if sample.get("kind") == "tokens"
                    else sample.get("kind", "")
                )
                self._draw_sample(sample)
                if not self.sample_plot.isHidden():  # drawn: its numbers go under the picture
                    lines += sample_lines(sample)
        norm = info.get("normalize")
        if norm:
            numbers = ", ".join(f"{m:.3g}/{s:.3g}" for m, s in zip(norm["mean"], norm["std"]))
            lines.append(f"normalised with mean/std {numbers} ({norm.get('how')}, as the run's dataset)")
        self.input_note.setText("<br>".join(lines))

    def _draw_sample(self, sample: dict) -> None:
        """A signal as lines, a row of features as bars, in place of the text box; the row's values also
        listed under it, to be read exactly."""
        if sample.get("kind") not in ("signal", "tabular") or not draw_sample(self.sample_plot, sample):
            return
        self.sample_plot.setMouseEnabled(x=False, y=False)
        self.image.hide()
        self.sample_plot.show()
        if sample.get("kind") == "signal":
            self.seen.setText(f"{sample.get('length', '')} steps")
        else:
            self.seen.setText(f"{len(sample.get('values') or [])} features")


class TryItDialog(QDialog):
    """A window around a TryItView; closing it forgets the pending prediction."""

    def __init__(
        self,
        queries,
        workspace,
        run_id: str,
        data_sample: Callable[[], dict | None] | None = None,
        parent=None,
        settings=None,
    ):
        super().__init__(parent)
        self.view = TryItView(queries, workspace, run_id, data_sample, self, settings=settings)
        self.setWindowTitle(f"Try it: {self.view.run.label}")
        self.resize(1000, 640)
        close = QPushButton("Close")
        close.setToolTip("Close Try it")
        close.clicked.connect(self.reject)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addWidget(self.view, 1)
        layout.addLayout(row)

    def done(self, code: int) -> None:
        self.view.stop()
        super().done(code)


__all__ = ["TASK", "RunInfo", "TryItDialog", "TryItView", "describe_run"]
