"""The dataset browser panel: a virtual thumbnail grid with split and class filters and zoom, a sample view,
class distribution charts, and the dataset picker. All data comes from the worker's data.* queries.
A user's own Dataset (file:) shows as thumbnails with masks overlaid, or as a table of tensor summaries when
its inputs are not images, with a histogram of its targets.

A newly chosen dataset that fails to load is taken back: the last one that loaded stays, and the panel says
so.
"""

from __future__ import annotations

import functools
import random

from PySide6.QtCore import QPoint, QSize, Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListView,
    QPushButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QSplitter,
    QStackedWidget,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.panels.data.class_chart import ClassChart
from workbench.gui.panels.data.dataset_dialog import DatasetDialog
from workbench.gui.panels.data.input_plots import InputChart
from workbench.gui.panels.data.sample_view import SampleView
from workbench.gui.panels.data.sparkline import HEIGHT as SPARK_HEIGHT
from workbench.gui.panels.data.sparkline import WIDTH as SPARK_WIDTH
from workbench.gui.panels.data.target_chart import TargetChart
from workbench.gui.panels.data.thumbnails import INDEX_ROLE, ThumbnailItemModel
from workbench.gui.panels.data.user_table import SampleTableItemModel
from workbench.gui.queries import QueryRunner
from workbench.gui.state import DatasetState
from workbench.specs import DataSpec

SPLITS = ("train", "val", "test")


class DatasetPanel(QWidget):
    status_message = Signal(str)

    def __init__(self, state: DatasetState, queries: QueryRunner, parent=None):
        super().__init__(parent)
        self.state = state
        self.queries = queries
        self.info: dict | None = None
        self._info_job: str | None = None
        self._sample_job: str | None = None
        self._augment_seed = 0
        self._sample_note = ""  # shown with the next sample (a model's prediction, from the evaluation)
        self._pending_select: tuple[str, int] | None = None  # a sample to highlight once the grid has its row
        self._selecting = False
        self._loaded_spec = None
        self._good_spec: DataSpec | None = None  # the last spec whose data.info succeeded
        # (summary, details) the next reload shows: why it put one back
        self._notice: tuple[str, str] | None = None
        self._kept_after: str | None = None  # the dataset that failed, while the previous one loads again
        self._summary_prefix = ""
        self.model = ThumbnailItemModel(queries, self)
        self.table_model = SampleTableItemModel(queries, self)
        self._build()
        self.model.visible_rows = self._visible_rows
        self.model.load_failed.connect(self._on_model_load_failed)
        self.model.total_changed.connect(self._on_model_total_changed)
        self.model.page_loaded.connect(self._on_model_page_loaded)
        self.table_model.load_failed.connect(self._on_model_load_failed)
        self.table_model.total_changed.connect(self._on_table_total_changed)
        self.table_model.modelReset.connect(self._fit_table_columns)
        state.changed.connect(self.reload)
        state.calibration_changed.connect(self._sync_calibration)

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        top = self._build_top()
        self._build_error()
        self._build_views()
        self._build_side_tabs()
        self._build_layout(top)
        self._connect()

    def _build_top(self) -> QHBoxLayout:
        """The summary line and the row on top: Choose dataset, split, class, zoom and the calibration
        subset."""
        self.summary = QLabel("No dataset loaded yet.")
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.choose_button = QPushButton("Choose dataset…")
        self.choose_button.setToolTip(
            "Pick the dataset, its folder, splits, normalisation and augmentation (Ctrl+D)"
        )
        # Ctrl+D is the Data menu's action, window-wide (a button shortcut here would make it ambiguous).
        self.choose_button.clicked.connect(self.choose_dataset)
        self.split_combo = QComboBox()
        for split in SPLITS:
            self.split_combo.addItem(split, split)
        self.split_combo.setToolTip("Which split the grid shows")
        self.class_combo = QComboBox()
        self.class_combo.addItem("all classes", -1)
        self.class_combo.setMinimumContentsLength(14)
        self.class_combo.setToolTip("Show only one class")
        self.zoom = QSlider(Qt.Horizontal)
        self.zoom.setRange(24, 192)
        self.zoom.setValue(64)
        self.zoom.setFixedWidth(140)
        self.zoom.setToolTip("Thumbnail size (Ctrl++ / Ctrl+-)")
        self.calibration_count = QSpinBox()
        self.calibration_count.setRange(1, 1_000_000)
        self.calibration_count.setValue(self.state.calibration_count)
        self.calibration_count.setToolTip("How many training samples quantization calibrates on")
        self.calibration_seed = QSpinBox()
        self.calibration_seed.setRange(0, 2**31 - 1)
        self.calibration_seed.setToolTip("Seed that picks the calibration samples")
        top = QHBoxLayout()
        top.addWidget(self.choose_button)
        top.addWidget(QLabel("Split"))
        top.addWidget(self.split_combo)
        top.addWidget(QLabel("Class"))
        top.addWidget(self.class_combo)
        top.addSpacing(12)
        top.addWidget(QLabel("Zoom"))
        top.addWidget(self.zoom)
        top.addStretch(1)
        top.addWidget(QLabel("Calibration subset"))
        top.addWidget(self.calibration_count)
        top.addWidget(QLabel("seed"))
        top.addWidget(self.calibration_seed)
        return top

    def _build_error(self) -> None:
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.error.setStyleSheet(
            "QLabel { background: #fbe3e1; color: #5c1410; border: 1px solid #d0342c;"
            " border-radius: 4px; padding: 6px; }"
        )
        self.error.hide()

    def _build_views(self) -> None:
        """The thumbnail grid and, for a user's Dataset whose inputs are not images, the table; stacked."""
        self.grid = QListView()
        self.grid.setViewMode(QListView.IconMode)
        self.grid.setResizeMode(QListView.Adjust)
        self.grid.setMovement(QListView.Static)
        self.grid.setUniformItemSizes(True)  # lets Qt lay out 60,000 items without asking each for its size
        self.grid.setLayoutMode(QListView.Batched)
        self.grid.setBatchSize(500)
        self.grid.setSpacing(4)
        self.grid.setSelectionMode(QListView.SingleSelection)
        self.grid.setModel(self.model)
        self._apply_zoom(self.zoom.value())
        self.grid.selectionModel().currentChanged.connect(self._on_grid_current_changed)
        self.table = QTableView()  # a user's Dataset whose inputs are not images: one row per sample
        self.table.setModel(self.table_model)
        self.table.setSelectionBehavior(QTableView.SelectRows)
        self.table.setSelectionMode(QTableView.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().currentRowChanged.connect(self._on_grid_current_changed)
        self.views = QStackedWidget()
        self.views.addWidget(self.grid)
        self.views.addWidget(self.table)

    def _build_side_tabs(self) -> None:
        """The sample shown, the class and target charts, the inputs' histograms."""
        self.sample_view = SampleView()
        self.class_chart = ClassChart()
        self.target_chart = TargetChart()
        self.input_chart = InputChart()  # a user's inputs that are not images: lengths, columns, values
        self.side_tabs = QTabWidget()
        # In a scroll area: a title or note that wraps onto more lines scrolls the sample view, where its
        # minimum height used to pass up to the window, which grew by itself.
        self.sample_scroll = QScrollArea()
        self.sample_scroll.setWidget(self.sample_view)
        self.sample_scroll.setWidgetResizable(True)
        self.sample_scroll.setFrameShape(QScrollArea.NoFrame)
        self.sample_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        # about the room it had (the docks below would take it otherwise)
        self.sample_scroll.setMinimumHeight(460)
        self.side_tabs.addTab(self.sample_scroll, "Sample")
        self.side_tabs.addTab(self.class_chart, "Classes")
        self.side_tabs.addTab(self.target_chart, "Targets")
        self.side_tabs.addTab(self.input_chart, "Inputs")
        self.side_tabs.setTabToolTip(
            3,
            "Histograms of the inputs: token sequence lengths, each feature column's "
            "values, a signal's values",
        )
        self.side_tabs.setTabVisible(2, False)  # the built-in sets' class chart says it all
        self.side_tabs.setTabVisible(3, False)  # shown once data.info says the inputs are not images

    def _build_layout(self, top: QHBoxLayout) -> None:
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(self.views)
        splitter.addWidget(self.side_tabs)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(top)
        layout.addWidget(self.summary)
        layout.addWidget(self.error)
        layout.addWidget(splitter, 1)

    def _connect(self) -> None:
        self.split_combo.currentIndexChanged.connect(self._reconfigure_grid)
        self.class_combo.currentIndexChanged.connect(self._reconfigure_grid)
        self.zoom.valueChanged.connect(self._apply_zoom)
        self.calibration_count.valueChanged.connect(self._on_calibration_edited)
        self.calibration_seed.valueChanged.connect(self._on_calibration_edited)
        self.sample_view.reroll_requested.connect(self._on_sample_reroll)
        QShortcut(QKeySequence.ZoomIn, self, lambda: self.zoom.setValue(self.zoom.value() + 16))
        QShortcut(QKeySequence.ZoomOut, self, lambda: self.zoom.setValue(self.zoom.value() - 16))

    # -- loading ---------------------------------------------------------------------------------
    def ensure_loaded(self) -> None:
        """Load the current dataset unless it is already shown (called when the worker becomes ready)."""
        if self._loaded_spec != self.state.spec:
            self.reload()

    def reload(self) -> None:
        spec = self.state.spec
        self._loaded_spec = spec
        self.info = None
        self.error.hide()
        notice, self._notice = self._notice, None
        self._summary_prefix = f"{notice[0]}<br>" if notice else ""
        if notice:
            self._show_error(notice[1], warning=True)
        self.summary.setText(f"{self._summary_prefix}Loading <b>{spec.name}</b>…")
        self.class_chart.clear("Computing class counts and statistics…")
        user = self.is_user_dataset()
        self.side_tabs.setTabVisible(1, not user)
        self.side_tabs.setTabVisible(2, user)
        self.side_tabs.setTabVisible(3, False)
        self.input_chart.clear()
        self.class_combo.setEnabled(not user)  # a user's samples are not filtered by class
        self.target_chart.clear("Reading the targets of the first training samples…" if user else "")
        self.views.setCurrentWidget(self.grid)
        self.sample_view.clear()
        self.class_combo.blockSignals(True)
        self.class_combo.clear()
        self.class_combo.addItem("all classes", -1)
        self.class_combo.blockSignals(False)
        if self._info_job:
            self.queries.forget(self._info_job)
        self._info_job = self.queries.query(
            "data.info",
            {"dataset": spec.to_dict()},
            functools.partial(self._on_info, spec=spec),
            functools.partial(self._on_info_error, spec=spec),
        )
        self._reconfigure_grid()

    def _reconfigure_grid(self, *args) -> None:
        if self.is_user_dataset():
            # Thumbnails or a table: which, data.info says (the first sample's input), so wait for it.
            table = self.info is not None and self.info.get("view") == "table"
            images = self.info is not None and not table
            self.model.configure(self.state.spec.to_dict() if images else None, self.current_split(), -1)
            self.table_model.configure(self.state.spec.to_dict() if table else None, self.current_split())
            self.views.setCurrentWidget(self.table if table else self.grid)
            self.sample_view.clear()
            return
        self.table_model.configure(None)
        label = self.class_combo.currentData()
        self.model.configure(
            self.state.spec.to_dict(), self.current_split(), -1 if label is None else int(label)
        )
        self.sample_view.clear()

    def is_user_dataset(self) -> bool:
        return self.state.spec.name.startswith("file:")

    def current_split(self) -> str:
        return self.split_combo.currentData() or "train"

    def _on_info(self, info: dict, spec: DataSpec | None = None) -> None:
        self._info_job = None
        self._good_spec = spec or self.state.spec
        self.info = info
        if (spec or self.state.spec).name.startswith("file:"):
            self._on_user_info(info)
            return
        self.model.set_classes(info["classes"])
        current = self.class_combo.currentData()
        self.class_combo.blockSignals(True)
        self.class_combo.clear()
        self.class_combo.addItem("all classes", -1)
        for i, name in enumerate(info["classes"]):
            self.class_combo.addItem(f"{i}: {name}" if str(i) != str(name) else str(name), i)
        self.class_combo.setCurrentIndex(max(0, self.class_combo.findData(current)))
        self.class_combo.blockSignals(False)
        self.class_chart.show_info(info)
        n = info["num_samples"]
        shape = "×".join(str(s) for s in info["sample_shape"])
        where = f" · {info['root']}" if info.get("root") else ""
        self.summary.setText(
            f"{self._summary_prefix}<b>{info['dataset']}</b> · {len(info['classes'])} classes · "
            f"{shape} · train {n['train']:,} · val {n['val']:,} · test {n['test']:,}{where}"
        )
        skipped = info.get("skipped_files") or []
        if skipped:
            listed = "\n".join(f"{s['path']}: {s['reason']}" for s in skipped[:10])
            more = f"\n… and {len(skipped) - 10} more" if len(skipped) > 10 else ""
            self._show_error(
                f"{len(skipped)} file(s) could not be read and are skipped:\n{listed}{more}", warning=True
            )
        self.status_message.emit(self._loaded_message(info["dataset"]))

    def _loaded_message(self, name: str) -> str:
        # Right after a failed choice, "Dataset digits loaded" read as if the choice had worked.
        failed, self._kept_after = self._kept_after, None
        if failed:
            return f"Dataset {failed} could not be loaded; the previous dataset, {name}, is still shown"
        return f"Dataset {name} loaded"

    def _on_user_info(self, info: dict) -> None:
        """A user's Dataset: its shape, target and task in the summary, thumbnails or a table, the targets'
        chart."""
        self.model.set_classes(info["classes"])
        n = info["num_samples"]
        shape = "×".join(str(s) for s in info["sample_shape"])
        tasks = info.get("tasks") or {}
        auto = tasks.get("auto")
        task = f"task=auto: <b>{auto}</b>" if auto else "task=auto cannot tell the task"
        kind = {"tokens": " token ids", "signal": " signal", "tabular": " features"}.get(
            info.get("input_kind"), ""
        )
        self.summary.setText(
            f"{self._summary_prefix}<b>{info['dataset']}</b> · your Dataset · input {shape} "
            f"{info.get('input_dtype', '')}{kind} · target {info.get('target', '')} · {task} · "
            f"train {n['train']:,} · val {n['val']:,} · test {n['test']:,}"
        )
        self.summary.setToolTip(tasks.get("why", ""))
        self.target_chart.show_histogram(
            info.get("target_histogram"), "" if info.get("target_histogram") else tasks.get("why", "")
        )
        inputs = info.get("input_histogram")
        self.side_tabs.setTabVisible(3, bool(inputs))
        if inputs:
            self.input_chart.show_histogram(inputs)
        self._reconfigure_grid()
        self.status_message.emit(self._loaded_message(info["dataset"]))

    def _fit_table_columns(self) -> None:
        """Room for what people read: a token sequence's text and ids on one line each, numbers narrow."""
        token = self.table_model.kind == "tokens"
        # a wrapped sequence shows two cut lines of a row; the tooltip has it all
        self.table.setWordWrap(not token)
        widths = {"#": 48, "text": 340, "ids": 220, "length": 60, "min id": 60, "max id": 60}
        signal = self.table_model.kind == "signal"
        if signal:  # the signal's line and its rows tall enough to read it
            self.table.setIconSize(QSize(SPARK_WIDTH, SPARK_HEIGHT))
        for column, name in enumerate(self.table_model.columns):
            if signal and name == "signal":
                self.table.setColumnWidth(column, SPARK_WIDTH + 12)
            elif token and name in widths:
                self.table.setColumnWidth(column, widths[name])
            elif name == "#":
                self.table.setColumnWidth(column, 48)

    def _on_table_total_changed(self, total: int) -> None:
        self.table.setToolTip(f"{total:,} samples in {self.current_split()}")
        if total and not self.table.currentIndex().isValid() and self.table_model.rowCount():
            self.table.setCurrentIndex(self.table_model.index(0, 0))

    def _on_info_error(self, error: dict, spec: DataSpec | None = None) -> None:
        self._info_job = None
        failed = spec or self.state.spec
        message = error.get("message", "the dataset could not be loaded")
        previous = self._good_spec
        # A new choice that fails is taken back rather than left half-applied (an empty grid, stale charts, a
        # broken spec for the next run). Not when the worker was merely unavailable: the spec is not at fault.
        if (
            previous is not None
            and failed != previous
            and self.state.spec == failed
            and error.get("type") != "WorkerUnavailable"
        ):
            kept = (
                f"<b>{previous.name}</b> is still the dataset"
                if previous.name != failed.name
                else f"the previous <b>{previous.name}</b> settings stay"
            )
            self._notice = (
                f"<b>{failed.name}</b> could not be loaded, so {kept} (the reason is below).",
                f"{failed.name} could not be loaded: {message}",
            )
            self._kept_after = failed.name  # the reload of the previous one says so, not "loaded" alone
            self.status_message.emit(
                f"Dataset {failed.name} could not be loaded; still showing {previous.name}"
            )
            self.state.refused.emit(failed.name, message)
            self.state.set_spec(previous)  # reloads, showing the notice
            return
        self._kept_after = None
        self.summary.setText(f"<b>{failed.name}</b> could not be loaded.")
        self.class_chart.clear("")
        self.target_chart.clear("")
        self.class_chart.plot.getAxis("bottom").setTicks(None)  # the old dataset's class names must go too
        self._show_error(message)

    def _show_error(self, text: str, warning: bool = False) -> None:
        colours = ("#fff4e0", "#5c3b00", "#c77700") if warning else ("#fbe3e1", "#5c1410", "#d0342c")
        self.error.setStyleSheet(
            f"QLabel {{ background: {colours[0]}; color: {colours[1]}; border: 1px solid "
            f"{colours[2]}; border-radius: 4px; padding: 6px; }}"
        )
        self.error.setText(text)
        self.error.show()

    def _on_model_load_failed(self, message: str) -> None:
        if self.info is not None or self._info_job is not None:
            self._show_error(message)

    def _on_model_page_loaded(self, page: int) -> None:
        if self._pending_select is not None:
            # a sample asked for by name (the evaluation's mistakes) wins over the first
            self._select_pending()
            return
        # Something worth looking at straight away: the first sample, until the user picks another.
        if page == 0 and not self.grid.currentIndex().isValid() and self.model.total:
            self.grid.setCurrentIndex(self.model.index(0))

    def _on_model_total_changed(self, total: int) -> None:
        self.grid.setToolTip(f"{total:,} images in {self.current_split()}")
        self._select_pending()

    # -- grid ------------------------------------------------------------------------------------
    def _visible_rows(self) -> tuple[int, int]:
        """First and last row on screen, found by probing the viewport (gaps between cells hit no item)."""
        viewport = self.grid.viewport()
        cell = self.grid.gridSize()
        rows = []
        for y in range(2, viewport.height(), max(4, cell.height() // 2)):
            for x in range(2, viewport.width(), max(4, cell.width() // 2)):
                row = self.grid.indexAt(QPoint(x, y)).row()
                if row >= 0:
                    rows.append(row)
        if not rows:
            return 0, 0
        per_row = max(1, viewport.width() // max(1, cell.width()))
        return min(rows), max(rows) + per_row  # and the partly visible row below

    def _apply_zoom(self, size: int) -> None:
        self.grid.setIconSize(QSize(size, size))
        label_height = self.grid.fontMetrics().height()
        self.grid.setGridSize(QSize(max(size, 3 * label_height) + 12, size + 2 * label_height + 4))
        self.model.set_icon_size(size)

    def _on_grid_current_changed(self, current, previous) -> None:
        if not current.isValid() or self._selecting:
            return  # _selecting: show_sample moved the highlight to a sample it has already requested
        self._sample_note = ""
        index = current.data(INDEX_ROLE)
        if index is None:
            return
        self._augment_seed = random.randrange(2**31)
        self.request_sample(self.current_split(), int(index))

    def request_sample(self, split: str, index: int) -> None:
        if self._sample_job:
            self.queries.forget(self._sample_job)  # only the latest click matters
        self.sample_view.show_loading(f"Loading {split} #{index}…")
        spec = {
            "dataset": self.state.spec.to_dict(),
            "split": split,
            "index": index,
            "augment_seed": self._augment_seed,
        }
        self._sample_job = self.queries.query(
            "data.sample",
            spec,
            self._on_sample,
            lambda e: self.sample_view.clear(f"Could not load it: {e['message']}"),
        )

    def _on_sample(self, result: dict) -> None:
        self._sample_job = None
        self.sample_view.show_sample(result, self.state.spec.augment, self._sample_note)
        self.side_tabs.setCurrentWidget(self.sample_scroll)

    def _on_sample_reroll(self, seed: int) -> None:
        result = self.sample_view.result
        if result is not None:
            self._augment_seed = seed
            self.request_sample(result["split"], int(result["index"]))

    def show_sample(self, split: str, index: int, note: str = "") -> None:
        """Open one sample (e.g. from the training evaluation's gallery of mistakes, with `note` saying what
        the model predicted) and highlight its thumbnail in the grid once the grid has that many rows."""
        if self.class_combo.currentData() not in (-1, None):
            self.class_combo.setCurrentIndex(0)  # with a class filter, grid rows are not split indices
        self.split_combo.setCurrentIndex(max(0, self.split_combo.findData(split)))
        self._sample_note = note
        self._pending_select = (split, int(index))
        self._select_pending()
        self.request_sample(split, index)

    def _select_pending(self, *args) -> None:
        if self._pending_select is None:
            return
        split, index = self._pending_select
        if split != self.current_split() or index >= self.model.rowCount():
            return  # the grid is still loading this split: total_changed calls again
        self._pending_select = None
        model_index = self.model.index(index)
        self._selecting = True
        try:
            self.grid.setCurrentIndex(model_index)
        finally:
            self._selecting = False
        self.grid.scrollTo(model_index, QListView.PositionAtCenter)

    # -- dataset and calibration -----------------------------------------------------------------
    def choose_dataset(self) -> None:
        data_dir = str(self.queries.workspace / "data") if self.queries.workspace else ""
        dialog = DatasetDialog(self.state.spec, data_dir, self)
        if dialog.exec():
            self.state.set_spec(dialog.spec())

    def _on_calibration_edited(self, *args) -> None:
        self.state.set_calibration(self.calibration_count.value(), self.calibration_seed.value())

    def _sync_calibration(self) -> None:
        self.calibration_count.setValue(self.state.calibration_count)
        self.calibration_seed.setValue(self.state.calibration_seed)
