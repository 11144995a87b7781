"""The evaluation view of a finished run: confusion matrix heat map, per-class accuracy, and a gallery of
the most confidently wrong test samples (click one to open it in the Data tab); runs of another task get that
task's view (evaluation_<task>.py), chosen by evaluation.json's "task" (absent in runs from before tasks).

It reads the run's artifacts/evaluation.json; classification's images come from the worker's data.sample
query, and inputs that are not images (token sequences, signals, rows) from evaluation.json itself, shown as
rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import (
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.images import scaled_pixmap, to_qimage
from workbench.gui.panels.training.evaluation_common import checkpoint_text, header_html
from workbench.gui.panels.training.evaluation_detection import DetectionEvaluationView
from workbench.gui.panels.training.evaluation_metrics import MetricsEvaluationView
from workbench.gui.panels.training.evaluation_multilabel import MultilabelEvaluationView
from workbench.gui.panels.training.evaluation_regression import RegressionEvaluationView
from workbench.gui.panels.training.evaluation_rows import WorstRows, has_rows, input_text
from workbench.gui.panels.training.evaluation_segmentation import SegmentationEvaluationView
from workbench.gui.plots import SERIES_COLOURS, make_plot, update_empty_state
from workbench.results import Evaluation

# The view of each task; a task not named here (custom, or one this window does not know) gets the metrics
# table.
TASK_VIEWS = {
    "regression": RegressionEvaluationView,
    "multilabel": MultilabelEvaluationView,
    "segmentation": SegmentationEvaluationView,
    "detection": DetectionEvaluationView,
}


def load_evaluation(run_dir: str | Path) -> dict | None:
    path = Path(run_dir) / "artifacts" / "evaluation.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class EvaluationView(QWidget):
    sample_requested = Signal(dict, str, int, str)  # dataset spec, split, index, a note (the prediction)

    def __init__(self, queries, parent=None):
        super().__init__(parent)
        self.queries = queries
        self.evaluation: dict | None = None
        self.dataset: dict | None = None
        self._gallery_jobs: list[str] = []
        self.task_views: dict[str, QWidget] = {}  # made when a run of that task is first shown
        self.title = QLabel("Select a finished training run to see how it does on the test split.")
        self.title.setWordWrap(True)
        self.confusion = make_plot(
            "Confusion matrix (rows: true class, columns: predicted)",
            "true",
            "predicted",
            empty="The confusion matrix on the test split appears when a run finishes.",
            grid=False,
            categories=True,
        )
        self.confusion.getPlotItem().invertY(True)
        self.confusion.setAspectLocked(True)
        self.confusion_image = pg.ImageItem()
        self.confusion.addItem(self.confusion_image)
        self.colour_bar = None
        self.cell_labels: list[pg.TextItem] = []
        self.per_class = make_plot(
            "Per-class accuracy",
            "accuracy",
            "class",
            y_format="percent",
            categories=True,
            empty="Each class's test accuracy appears when a run finishes.",
        )
        self.per_class.setYRange(0, 1)
        self.gallery = QListWidget()
        self.gallery.setViewMode(QListWidget.IconMode)
        self.gallery.setIconSize(QSize(64, 64))
        self.gallery.setGridSize(QSize(112, 112))
        self.gallery.setWordWrap(True)
        self.gallery.setMinimumHeight(130)
        self.gallery.setResizeMode(QListWidget.Adjust)
        self.gallery.setMovement(QListWidget.Static)
        self.gallery.setToolTip(
            "The most confidently wrong test samples; double-click to open one in the Data tab"
        )
        self.gallery.itemActivated.connect(self._on_gallery_activated)
        self.worst_rows = WorstRows()  # the same samples when they are not images: text, ids or values
        self.worst_rows.sample_activated.connect(self._on_task_sample_requested)
        self.worst_pages = QStackedWidget()
        self.worst_pages.addWidget(self.gallery)
        self.worst_pages.addWidget(self.worst_rows)
        top = QSplitter(Qt.Horizontal)
        top.addWidget(self.confusion)
        top.addWidget(self.per_class)
        split = QSplitter(Qt.Vertical)
        split.addWidget(top)
        gallery_box = QWidget()
        box = QVBoxLayout(gallery_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("Most confidently wrong (true → predicted, confidence)"))
        box.addWidget(self.worst_pages)
        split.addWidget(gallery_box)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.pages = QStackedWidget()
        self.pages.addWidget(split)  # page 0: classification, as before tasks
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.title)
        layout.addWidget(self.pages, 1)

    def task_view(self, task: str) -> QWidget:
        """The view for runs of `task` (the metrics table for custom and unknown tasks), made on first use."""
        key = task if task in TASK_VIEWS else "metrics"
        if key not in self.task_views:
            view = TASK_VIEWS.get(key, MetricsEvaluationView)()
            if hasattr(view, "sample_requested"):
                view.sample_requested.connect(self._on_task_sample_requested)
            self.pages.addWidget(view)
            self.task_views[key] = view
        return self.task_views[key]

    def clear(self, message: str) -> None:
        self.evaluation = None
        self.title.setText(message)
        self.pages.setCurrentIndex(0)
        for view in self.task_views.values():
            view.clear()
        self.confusion_image.clear()
        for label in self.cell_labels:
            self.confusion.removeItem(label)
        self.cell_labels.clear()
        self.per_class.clear()
        self.gallery.clear()
        self.worst_rows.setRowCount(0)
        self.worst_pages.setCurrentWidget(self.gallery)
        update_empty_state(self.confusion)  # ImageItem.clear() emits nothing the plot could hear

    def show_evaluation(self, evaluation: dict, dataset: dict, run_id: str = "") -> None:
        self.clear("")
        self.evaluation, self.dataset = evaluation, dataset
        task = evaluation.get("task") or "classification"
        if task != "classification":
            self._show_task(task, evaluation, run_id)
            return
        classes = evaluation["classes"]
        matrix = np.asarray(evaluation["confusion_matrix"], dtype=float)
        checkpoint = checkpoint_text(evaluation)
        self.title.setText(
            f"<b>{run_id}</b> · test accuracy <b>{evaluation['test_accuracy']:.2%}</b> on "
            f"{int(matrix.sum()):,} samples" + (f" · {checkpoint}" if checkpoint else "")
        )
        # Row-normalised colours (recall per class) with the raw counts written in the cells.
        rows = matrix.sum(axis=1, keepdims=True)
        normalised = np.divide(matrix, rows, out=np.zeros_like(matrix), where=rows > 0)
        self.confusion_image.setImage(normalised.T, levels=(0, 1))
        self.confusion_image.setColorMap(pg.colormap.get("viridis"))
        ticks = [(i + 0.5, str(name)) for i, name in enumerate(classes)]
        step = max(1, len(classes) // 20)
        for axis in ("left", "bottom"):
            self.confusion.getAxis(axis).setTicks([ticks[::step]])
        if len(classes) <= 20:
            for i in range(len(classes)):
                for j in range(len(classes)):
                    if matrix[i, j]:
                        colour = "#000000" if normalised[i, j] > 0.6 else "#ffffff"
                        label = pg.TextItem(f"{int(matrix[i, j])}", color=colour, anchor=(0.5, 0.5))
                        label.setPos(j + 0.5, i + 0.5)
                        self.confusion.addItem(label)
                        self.cell_labels.append(label)
        accuracy = np.asarray(evaluation["per_class_accuracy"], dtype=float)
        self.per_class.addItem(
            pg.BarGraphItem(
                x=np.arange(len(classes)), height=accuracy, width=0.7, brush=SERIES_COLOURS[0], pen=None
            )
        )
        self.per_class.getAxis("bottom").setTicks([[(i, str(c)) for i, c in enumerate(classes)][::step]])
        self._fill_gallery(evaluation.get("worst", []), classes)

    def _show_task(self, task: str, evaluation: dict, run_id: str) -> None:
        view = self.task_view(task)
        self.pages.setCurrentWidget(view)
        try:
            view.show_evaluation(evaluation)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            # A damaged or foreign evaluation.json: say so in one line rather than leave a half-drawn view.
            view.clear()
            self.title.setText(
                f"<b>{run_id}</b> · the run's evaluation.json could not be read as a {task} "
                f"evaluation ({type(exc).__name__}: {exc})"
            )
            return
        self.title.setText(header_html(evaluation, run_id))

    def _on_task_sample_requested(self, split: str, index: int, note: str) -> None:
        if self.dataset is not None:
            self.sample_requested.emit(self.dataset, split, index, note)

    def _fill_gallery(self, worst: list[dict], classes: list[str]) -> None:
        for job_id in self._gallery_jobs:
            self.queries.forget(job_id)
        self._gallery_jobs.clear()
        if has_rows(worst):  # the inputs are in evaluation.json: no thumbnails to ask the worker for
            self.worst_pages.setCurrentWidget(self.worst_rows)
            self.worst_rows.show_worst(worst, classes)
            return
        self.worst_pages.setCurrentWidget(self.gallery)
        for row, item_info in enumerate(worst):
            true, predicted = classes[item_info["label"]], classes[item_info["predicted"]]
            item = QListWidgetItem(f"{true} → {predicted}\n{item_info['confidence']:.0%}")
            item.setData(Qt.UserRole, item_info)
            item.setToolTip(
                f"{item_info['split']} #{item_info['index']}: true {true}, predicted {predicted} "
                f"with confidence {item_info['confidence']:.3f}"
            )
            self.gallery.addItem(item)
            spec = {
                "dataset": self.dataset,
                "split": item_info["split"],
                "index": item_info["index"],
                "augment_seed": 0,
            }
            job = self.queries.query(
                "data.sample", spec, lambda result, row=row: self._on_gallery_image(row, result)
            )
            if job:
                self._gallery_jobs.append(job)

    def _on_gallery_image(self, row: int, result: dict) -> None:
        item = self.gallery.item(row)
        if item is None:
            return
        if "image" in result:
            item.setIcon(QIcon(scaled_pixmap(to_qimage(result["image"]), 64)))
        elif result.get("sample"):  # a run from before evaluation.json kept non-image inputs: their text
            item.setToolTip(f"{item.toolTip()}\n{input_text(result['sample'])}")

    def _on_gallery_activated(self, item: QListWidgetItem) -> None:
        info = item.data(Qt.UserRole)
        if info and self.dataset is not None:
            classes = Evaluation.from_dict(self.evaluation).classes

            def name(label: int) -> str:
                return str(classes[label]) if 0 <= label < len(classes) else str(label)

            note = (
                f"predicted {name(int(info['predicted']))} with {info['confidence']:.0%} confidence "
                f"(true class {name(int(info['label']))})"
            )
            self.sample_requested.emit(self.dataset, info["split"], int(info["index"]), note)
