"""The Quantization tab: start a quantization with the wizard, watch its accuracy ladder fill in rung by rung,
then find the layer that hurts in the per-layer table and see why on its range histogram, error plot,
per-channel ranges and the sensitivity sweep; compare two runs' ladders, show SQNR on the graph, apply a
mixed-precision proposal in one click. Live runs stream over the protocol; finished ones are read from their
run folder."""

from __future__ import annotations

import copy

from PySide6.QtCore import QByteArray, QItemSelectionModel, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStyle,
    QTableView,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.client import JobRecord
from workbench.errors import WorkbenchError
from workbench.gui.panels.quant.backend_runs import newest_qdq_export
from workbench.gui.panels.quant.channel_ranges_plot import ChannelRangesPlot
from workbench.gui.panels.quant.doctor_view import DoctorView, doctor_spec, fix_of
from workbench.gui.panels.quant.error_plot import ErrorPlot
from workbench.gui.panels.quant.ladder_chart import LadderChart
from workbench.gui.panels.quant.layer_table import KEY_ROLE, LayerSortProxy, LayerTableModel
from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.mixed_precision_plot import MixedPrecisionPlot
from workbench.gui.panels.quant.range_histogram import RangeHistogram
from workbench.gui.panels.quant.results import QuantResults, bit_widths
from workbench.gui.panels.quant.sensitivity_chart import SensitivityChart
from workbench.gui.panels.run_tab import RunTab
from workbench.gui.run_identity import RunIdentities
from workbench.gui.widgets import run_table
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.job_progress import JobProgress
from workbench.protocol import Message, named_array
from workbench.results import QuantResult, dig
from workbench.task_ids import EXPORT_TASK, QUANT_TASK, TRAIN_TASKS

COVERAGE_WARN = 0.95  # as the worker's quant/coverage.WARN_BELOW: under it the share shows red

RUN_COLUMNS = ("Run", "Status", "Scheme", "FP32", "Quantized")
NO_COMPARISON = ""
TABLE_ROWS = 8  # layers the layer table shows above the plots at first; a person drags the splitter for more
PLOT_TABS = ("Histogram", "Error q(x) − x", "Channel ranges", "Sensitivity", "Mixed precision")
DOCTOR_TAB = "Doctor"


def _percent(value, metric: dict | None = None) -> str:
    """A table cell: accuracy as 93.12%, another task's monitor (the run's metric block) as a plain number."""
    if not isinstance(value, (int, float)):
        return "—"
    return f"{value:.2%}" if metric is None else Measure.of(metric).text(value)


def _value(value: float, measure: Measure) -> str:
    """A summary's number: 93.12% for accuracy, "val MAE ↓ 0.1234" for another task's monitor."""
    return f"{value:.2%}" if measure.accuracy else f"{measure.axis} {measure.text(value)}"


def scheme_of(spec: dict) -> str:
    if not spec.get("weights") and not spec.get("activations"):
        return ""
    steps = [
        name
        for name, on in (
            ("CLE", spec.get("cle")),
            ("AdaRound", dig(spec, "adaround", "enabled")),
            ("BC", spec.get("bias_correction", "none") != "none"),
            ("QAT", dig(spec, "qat", "epochs")),
        )
        if on
    ]
    return (bit_widths(spec) or "W?A?") + (f" +{'+'.join(steps)}" if steps else "")


def _apply_tooltip(done: bool, results, proposal: dict) -> str:
    """What Apply mixed precision does, or why it is greyed out."""
    if not done:
        return "Available on a finished quantize run"
    if results is None or not (
        results.report.get("mixed_precision")
        or (results.spec.get("mixed_precision") or {}).get("target_drop")
    ):
        return (
            "This run made no mixed-precision proposal: set “Mixed precision: allowed drop” on the wizard's "
            "pipeline page (the sensitivity sweep runs with it)"
        )
    if not proposal.get("layers"):
        return "The proposal keeps no layer wider: the quantized model already stays within the allowed drop"
    return "Quantize again with the proposal's per-layer bit widths (one click)"


class QuantPanel(RunTab):
    TASKS = (QUANT_TASK,)
    EARLY_PREFIX = "quant/"  # ladder and layer arrays that came before the run folder
    # the training run and spec the wizard opens on ("", {}: its own choice)
    new_run_requested = Signal(str, dict)
    start_requested = Signal(dict)  # a QuantSpec's data to start as it is (Apply mixed precision)
    graph_requested = Signal(str, str)  # quant run id, its training run id: SQNR painted on the graph
    try_it_requested = Signal(str)  # quant run id: Try it, FP32 beside quantized on an image file or a sample

    def __init__(self, workspace, parent=None):
        # runs: the quantize runs; live: job id -> the QuantResults filling in
        super().__init__(workspace, parent)
        self.results: QuantResults | None = None  # the run shown
        self.compared: QuantResults | None = None  # the run whose ladder stands beside it
        self._build()
        self.refresh()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        buttons = self._build_buttons()
        left = self._build_runs_side()
        right, right_box = self._build_results_side()
        self.empty_button = QPushButton("Quantize a trained run…")
        self.empty_button.setMinimumHeight(40)
        self.empty_state = EmptyState("No quantization runs yet", [self.empty_button], width=620)
        self.empty_text = self.empty_state.text
        splitter = self.build_frame(buttons, left, right_box, self.empty_state, (430, 950))
        # Where a person drags them is kept between sessions (splitter_states / restore_splitters).
        self.splitters = {"main": splitter, "left": left, "right": right}
        self._connect()
        self.show_results(None)

    def _build_buttons(self) -> tuple[QPushButton, ...]:
        """The buttons above the runs, in the order they are laid out."""
        self.new_button = QPushButton("New quantization…")
        self.new_button.setToolTip("Open the quantization wizard on a trained run (Ctrl+Shift+Q)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Cancel the running quantization of the selected run")
        self.graph_button = QPushButton("Show on graph")
        self.graph_button.setToolTip(
            "Paint each layer's SQNR on the model's graph in the Graph tab; a click on a "
            "node there opens its histogram here"
        )
        self.try_it_button = QPushButton("Try it…")
        self.try_it_button.setToolTip(
            "Try the selected finished run on an image file (drop one) or a dataset sample: "
            "the FP32 and the quantized model's top classes side by side"
        )
        self.apply_button = QPushButton("Apply mixed precision")
        self.apply_button.setToolTip("Quantize again with the proposed layers kept at a higher bit width")
        self.again_button = QPushButton("Quantize again…")
        self.again_button.setToolTip("Open the wizard on the selected run's spec")
        self.open_button = QPushButton("Open folder")
        self.delete_button = QPushButton("Delete…")
        buttons = (
            self.new_button,
            self.stop_button,
            self.again_button,
            self.graph_button,
            self.try_it_button,
            self.apply_button,
            self.open_button,
            self.delete_button,
        )
        return buttons

    def _build_runs_side(self) -> QSplitter:
        """The runs table above the accuracy ladder, with the run to compare it with."""
        self.table = run_table.make_run_table(RUN_COLUMNS)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)
        for column in range(1, len(RUN_COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        self.compare_combo = QComboBox()
        self.compare_combo.setToolTip("Another quantize run whose accuracy ladder to show beside this one's")
        compare_row = QHBoxLayout()
        compare_row.addWidget(QLabel("Compare with"))
        compare_row.addWidget(self.compare_combo, 1)
        self.ladder = LadderChart()
        ladder_box = QWidget()
        ladder_layout = QVBoxLayout(ladder_box)
        ladder_layout.setContentsMargins(0, 0, 0, 0)
        ladder_layout.addLayout(compare_row)
        ladder_layout.addWidget(self.ladder, 1)
        left = QSplitter(Qt.Vertical)
        left.addWidget(self.table)
        left.addWidget(ladder_box)
        left.setSizes([260, 420])
        return left

    def _build_results_side(self) -> tuple[QSplitter, QWidget]:
        """The summary and progress above the layer table and its plots; returns the splitter and its box."""
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setWordWrap(True)
        self.progress_box = JobProgress("Stop this quantization at its next step (Ctrl+.)")
        self.progress, self.cancel_button = self.progress_box.bar, self.progress_box.cancel_button
        layer_box, layer_layout, filter_row = self._build_layer_table()
        self.histogram = RangeHistogram()
        self.error_plot = ErrorPlot()
        self.channel_plot = ChannelRangesPlot()
        self.sensitivity = SensitivityChart()
        self.mixed = MixedPrecisionPlot()
        self.plots = QTabWidget()
        for widget, title in zip(
            (self.histogram, self.error_plot, self.channel_plot, self.sensitivity, self.mixed), PLOT_TABS
        ):
            self.plots.addTab(widget, title)
        self.doctor = DoctorView()
        self.plots.addTab(self.doctor, DOCTOR_TAB)
        self.plots.setTabToolTip(
            self.plots.count() - 1,
            "The doctor's findings: why each layer loses precision, "
            "its evidence, the fixes tried and their measured gain",
        )
        right = QSplitter(Qt.Vertical)
        right.addWidget(layer_box)
        right.addWidget(self.plots)
        # TABLE_ROWS layers above the plots, whatever the font; the table keeps that height as the window
        # grows or shrinks (stretch 0) and the plots take the rest. A position the person dragged to
        # (restore_splitters) wins.
        right.setSizes([self._layer_box_height(layer_layout, filter_row), 470])
        right.setStretchFactor(0, 0)
        right.setStretchFactor(1, 1)
        right_box = QWidget()
        right_layout = QVBoxLayout(right_box)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.summary)
        right_layout.addWidget(self.progress_box)
        right_layout.addWidget(right, 1)
        return right, right_box

    def _build_layer_table(self) -> tuple[QWidget, QVBoxLayout, QHBoxLayout]:
        """The per-layer table with its filter row; returns its box, the box's layout and the filter row."""
        self.layer_model = LayerTableModel(self)
        self.layer_proxy = LayerSortProxy(self)
        self.layer_proxy.setSourceModel(self.layer_model)
        self.layer_view = QTableView()
        self.layer_view.setModel(self.layer_proxy)
        self.layer_view.setSortingEnabled(True)
        self.layer_view.sortByColumn(4, Qt.AscendingOrder)  # worst SQNR first
        self.layer_view.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.layer_view.setSelectionMode(QAbstractItemView.SingleSelection)
        self.layer_view.verticalHeader().hide()
        # Rows as tall as a line of text and a little air (the style's default is half as tall again): more
        # layers in view above the plots.
        self.layer_view.verticalHeader().setDefaultSectionSize(self.layer_view.fontMetrics().height() + 6)
        self.layer_view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.layer_view.horizontalHeader().setStretchLastSection(True)
        self.layer_view.setToolTip("Click a row to see its histogram and error; sort by any column")
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter layers…")
        self.filter_edit.setClearButtonEnabled(True)
        self.tensor_combo = QComboBox()
        for text, value in (
            ("Weights and activations", ""),
            ("Weights", "weight"),
            ("Activations", "activation"),
        ):
            self.tensor_combo.addItem(text, value)
        filter_row = QHBoxLayout()
        filter_row.addWidget(self.filter_edit, 1)
        filter_row.addWidget(self.tensor_combo)
        layer_box = QWidget()
        layer_layout = QVBoxLayout(layer_box)
        layer_layout.setContentsMargins(0, 0, 0, 0)
        layer_layout.addLayout(filter_row)
        layer_layout.addWidget(self.layer_view, 1)
        return layer_box, layer_layout, filter_row

    def _connect(self) -> None:
        self.new_button.clicked.connect(lambda: self.new_run_requested.emit("", {}))
        self.empty_button.clicked.connect(lambda: self.new_run_requested.emit("", {}))
        self.again_button.clicked.connect(self._on_again_clicked)
        self.connect_stop(self.stop_button, self.cancel_button)
        self.graph_button.clicked.connect(self._on_graph_clicked)
        self.try_it_button.clicked.connect(lambda: self.try_it_requested.emit(self.selected_run_id() or ""))
        self.apply_button.clicked.connect(self._on_apply_clicked)
        self.doctor.try_fix_requested.connect(self._on_try_fix)
        self.doctor.apply_all_requested.connect(lambda: self._start_doctor([], "every verified fix"))
        self.open_button.clicked.connect(self.open_selected_folder)
        self.delete_button.clicked.connect(self.delete_selected)
        self.table.itemSelectionChanged.connect(self._on_run_selected)
        self.compare_combo.currentIndexChanged.connect(self._on_compare_changed)
        self.layer_view.selectionModel().currentRowChanged.connect(self._on_layer_selected)
        self.filter_edit.textChanged.connect(self.layer_proxy.setFilterFixedString)
        self.tensor_combo.currentIndexChanged.connect(
            lambda: self.layer_proxy.set_tensor(self.tensor_combo.currentData())
        )

    # -- the runs list ---------------------------------------------------------------------------
    def forget(self, run_id: str | None) -> None:
        if run_id is None:  # another workspace
            self.results = self.compared = None
        elif self.results is not None and self.results.run_id == run_id:
            self.show_results(None)

    def training_runs(self) -> list[dict]:
        """Finished training runs the wizard can quantize, newest first, with their model's name, a readable
        label (model · dataset · key metric · date) and a tooltip naming the id."""
        runs = []
        identities = RunIdentities(self.store)
        for entry in self.store.list_runs():
            if entry.get("task") not in TRAIN_TASKS or entry.get("status") != "done":
                continue
            try:
                with self.store.open_run(entry["id"]) as run:
                    spec = run.read_spec()
                    entry["model"] = dig(spec, "model", "name", default="")
                    # What it learned (its spec's task, not the job's): the wizard enters a share's drop in
                    # points.
                    entry["learned"] = spec.get("task", "")
            except WorkbenchError:
                continue
            identity = identities.of(entry)
            entry["label"], entry["tooltip"] = identity.label, identity.tooltip
            runs.append(entry)
        return runs

    def refresh(self) -> None:
        selected = self.selected_run_id()
        entries, listed = self.list_runs()
        run_table.set_rows(
            self.table,
            [
                [
                    run_table.id_item(entry),
                    run_table.status_item(entry),
                    *(
                        QTableWidgetItem(text)
                        for text in (
                            entry.get("scheme", ""),
                            _percent(entry.get("fp32"), entry.get("metric")),
                            _percent(entry.get("quantized"), entry.get("metric")),
                        )
                    ),
                ]
                for entry in entries
            ],
        )
        self._fill_compare_combo()
        has_training = any(e.get("task") in TRAIN_TASKS for e in listed)
        self.empty_state.set_text(
            "Quantize a trained model with the white paper's post-training pipeline (Nagel et al., 2021): "
            "the accuracy ladder fills in step by step, then each layer's SQNR, range histogram and error "
            "show which layer hurts and why."
            if has_training
            else "Quantization starts from a trained model: train one in the Training tab first (Ctrl+T), "
            "then come back here."
        )
        self.empty_button.setEnabled(has_training)
        self.pages.setCurrentIndex(0 if not entries and not self.live else 1)
        self.keep_selection(selected, entries)
        self._update_buttons()

    def run_summary(self, entry: dict) -> dict:
        read = run_table.read_spec_and_report(self.store, entry["id"])
        if read is None:
            return {}
        spec, report = read
        result = QuantResult.from_dict(report)
        return {
            "spec": spec,
            "scheme": scheme_of(spec),
            "source_run": dig(spec, "source", "run", default=""),
            "fp32": result.fp32.accuracy,
            "quantized": result.quantized.accuracy,
            "metric": result.metric,
        }

    def _fill_compare_combo(self) -> None:
        current = self.compare_combo.currentData()
        self.compare_combo.blockSignals(True)
        self.compare_combo.clear()
        self.compare_combo.addItem("— none —", NO_COMPARISON)
        shown = self.results.run_id if self.results is not None else None
        for run_id, entry in self.runs.items():
            if entry["status"] == "done" and run_id != shown:  # a run beside itself compares nothing
                self.compare_combo.addItem(f"{entry.get('scheme', '')}  {run_id}".strip(), run_id)
        self.compare_combo.setCurrentIndex(max(0, self.compare_combo.findData(current)))
        self.compare_combo.blockSignals(False)

    def _on_run_selected(self) -> None:
        run_id = self.selected_run_id()
        self._update_buttons()
        if run_id is None:
            return
        job_id = self.job_of_run.get(run_id)
        if job_id is not None:
            self.show_results(self.live[job_id])
            return
        self.open_run(run_id)

    def open_run(self, run_id: str) -> bool:
        """Show a finished quantize run (from the Runs tab too); False with a message when it cannot be
        read."""
        entry = self.runs.get(run_id)
        if entry is None:
            self.refresh()
            entry = self.runs.get(run_id)
        if entry is None:
            self.status_message.emit(f"{run_id} is not a quantize run of this workspace")
            return False
        if self.selected_run_id() != run_id:
            self.select_run(run_id)  # selecting shows it
            return True
        try:
            results = QuantResults.from_run(entry["run_dir"])
        except WorkbenchError as exc:
            self.show_results(None, f"<span style='color:#c0392b'>{exc}</span>")
            return False
        self.show_results(results)
        return True

    # -- showing results -------------------------------------------------------------------------
    def show_results(self, results: QuantResults | None, message: str = "") -> None:
        self.results = results
        self._fill_compare_combo()
        self.layer_model.set_layers(results.layers if results else [])
        self._show_ladders()
        self._show_summary(message)
        report = results.report if results else {}
        sensitivity = report.get("sensitivity")
        if sensitivity:
            self.sensitivity.set_rows(
                sensitivity,
                results.fp32_accuracy,
                QuantResult.from_dict(report).quantized.accuracy,
                results.metric,
            )
        else:
            self.sensitivity.clear(
                "No sensitivity sweep in this run: tick “sensitivity” in the wizard's pipeline "
                "page to measure each layer alone and all but it."
            )
        if report.get("mixed_precision"):
            self.mixed.set_proposal(report["mixed_precision"], results.metric)
        else:
            self.mixed.clear(
                "No mixed-precision proposal: set a target accuracy drop in the wizard's pipeline "
                "page to get one."
            )
        if results and results.layers:
            self.select_layer(*self._worst_layer())
        else:
            waiting = (
                "The per-layer analysis arrives when the pipeline has run."
                if results
                else "Pick a quantize run, or start one with New quantization…"
            )
            for plot in (self.histogram, self.error_plot, self.channel_plot):
                plot.clear(waiting)
        self._update_buttons()
        self._show_doctor()

    def _worst_layer(self) -> tuple[str, str]:
        """The layer to show first: the lowest-SQNR weight quantizer (what a person would look at first)."""
        scored = [e for e in self.results.layers if isinstance(e.get("sqnr_db"), (int, float))]
        weights = [e for e in scored if e.get("tensor") == "weight"] or scored
        worst = min(weights, key=lambda e: e["sqnr_db"]) if weights else self.results.layers[0]
        return worst["name"], worst["tensor"]

    def _show_ladders(self) -> None:
        ladders = []
        if self.results is not None:
            ladders.append((self.results.label or "this run", self.results.ladder))
        if self.compared is not None and self.compared is not self.results:
            ladders.append((self.compared.label, self.compared.ladder))
        # Empty slots for the rungs still to come belong to a run in progress, shown alone.
        live = self.results is not None and self.results.run_id in self.job_of_run and len(ladders) == 1
        if any(steps for _, steps in ladders) or live and self.results.planned:
            # Bars of one measure: the run shown gives it (a compared run of another task would not share an
            # axis).
            metric = self.results.metric if self.results is not None else None
            notes = self.results.notes if self.results is not None else None
            self.ladder.set_ladders(ladders, self.results.planned if live else None, metric, notes)
        else:
            self.ladder.clear(
                "The accuracy ladder: one bar per pipeline step, filled in as each step finishes."
            )

    def _show_summary(self, message: str = "") -> None:
        results = self.results
        if results is None:
            self.summary.setText(message)
            return
        report = results.report
        fp32, quantized = results.fp32_accuracy, QuantResult.from_dict(report).quantized.accuracy
        measure = Measure.of(results.metric)
        parts = [f"<b>{results.label}</b>"]
        if fp32 is not None:
            parts.append(f"FP32 {_value(fp32, measure)}")
        if quantized is not None:
            if measure.accuracy:
                drop = (fp32 - quantized) * 100 if fp32 is not None else None
                parts.append(
                    f"quantized <b>{quantized:.2%}</b>"
                    + (f" ({drop:+.2f} pt drop)" if drop is not None else "")
                )
            else:
                parts.append(f"quantized <b>{_value(quantized, measure)}</b>")
        sqnr = QuantResult.from_dict(report).quantized.logit_sqnr_db
        if isinstance(sqnr, (int, float)):
            parts.append(f"logit SQNR {sqnr:.1f} dB")
        covered = report.get("coverage") or {}
        share, flops = covered.get("parameters"), covered.get("flops")
        if isinstance(share, (int, float)):
            kept = ", ".join(e.get("type", "?") for e in covered.get("float", [])[:3])
            of_flops = f" and {flops:.1%} of FLOPs" if isinstance(flops, (int, float)) else ""
            text = f"{share:.1%} of parameters{of_flops} quantized" + (f" (float: {kept})" if kept else "")
            low = share < COVERAGE_WARN or (isinstance(flops, (int, float)) and flops < COVERAGE_WARN)
            parts.append(f"<span style='color:#c0392b'>{text}</span>" if low else text)
        fallback = report.get("module_level")
        if isinstance(fallback, dict):  # torch.fx could not trace the model: layers quantized through hooks
            ops = ", ".join(f"{e.get('op')} ×{e.get('calls')}" for e in (fallback.get("float_ops") or [])[:5])
            parts.append(
                "<span style='color:#b9770e'>module-level quantization (torch.fx cannot trace the model): "
                f"float ops {ops or 'none seen'}</span>"
            )
        if results.ladder and not report:
            last = results.ladder[-1]
            parts.append(
                f"step {len(results.ladder)}/{len(results.planned) or '?'}: {last['step']} "
                f"{_value(last['accuracy'], measure)}"
            )
        if report.get("error"):
            parts.append(f"<span style='color:#c0392b'>{report['error']}</span>")
        if message:
            parts.append(message)
        self.summary.setText(" · ".join(parts))

    def select_layer(self, layer: str, tensor: str = "weight") -> bool:
        """Select a quantizer's row (the graph's node clicks come here) and show its plots."""
        row = self.layer_model.row_of(layer, tensor)
        if row < 0 and tensor == "weight":
            tensor, row = "activation", self.layer_model.row_of(layer, "activation")
        if row < 0:
            return False
        index = self.layer_proxy.mapFromSource(self.layer_model.index(row, 0))
        if not index.isValid():  # filtered out: show every row again so the selection can be seen
            self.filter_edit.clear()
            self.tensor_combo.setCurrentIndex(0)
            index = self.layer_proxy.mapFromSource(self.layer_model.index(row, 0))
        self.layer_view.selectionModel().setCurrentIndex(
            index, QItemSelectionModel.ClearAndSelect | QItemSelectionModel.Rows
        )
        self.layer_view.scrollTo(index)
        self._show_layer(layer, tensor)
        return True

    def _on_layer_selected(self, current, _previous) -> None:
        if current.isValid():
            self._show_layer(*current.data(KEY_ROLE))

    def _show_layer(self, layer: str, tensor: str) -> None:
        results = self.results
        if results is None:
            return
        entry = results.layer(layer, tensor)
        arrays = results.tensor(layer, tensor)
        if arrays is not None:
            self.histogram.set_tensor(arrays, entry)
        else:
            self.histogram.clear(f"No histogram of {layer} {tensor} in this run.")
        if entry is not None:
            self.error_plot.set_quantizer(entry)
        else:
            self.error_plot.clear("")
        weights = results.tensor(layer, "weight")
        if weights is not None and (weights.cle_ranges is not None or weights.channel_ranges is not None):
            self.channel_plot.set_ranges(weights)
        else:
            self.channel_plot.clear(
                f"{layer or 'The input'} has no per-channel weight ranges (per-tensor weights, "
                "or no weights at all)."
            )

    # -- compare ---------------------------------------------------------------------------------
    def _on_compare_changed(self) -> None:
        run_id = self.compare_combo.currentData()
        self.compared = None
        if run_id:
            try:
                self.compared = QuantResults.from_run(self.runs[run_id]["run_dir"])
            except (WorkbenchError, KeyError) as exc:
                self.status_message.emit(f"Cannot compare with {run_id}: {exc}")
        self._show_ladders()

    def compare_with(self, run_id: str) -> bool:
        index = self.compare_combo.findData(run_id)
        if index < 0:
            return False
        self.compare_combo.setCurrentIndex(index)
        return True

    # -- live runs -------------------------------------------------------------------------------
    def job_started(self, record: JobRecord, run_id: str | None) -> QuantResults | None:
        """A quantization is shown as it runs once its record names its run: its ladder fills in here."""
        if not run_id:
            return None
        results = QuantResults(run_id=run_id, run_dir=record.run_dir, spec=copy.deepcopy(record.spec))
        self.start_tracking(record.job_id, run_id, results)
        self.refresh()
        self.select_run(run_id)
        self.show_results(results)
        return results

    def showing(self, kept) -> bool:
        return kept is self.results

    def job_finished(self, record: JobRecord, results, run_id: str | None, showing: bool) -> None:
        if not showing:
            return
        if record.state == "done":
            self.open_run(run_id)
        else:
            results.report = {**results.report, "error": record.error_message or record.state}
            self.show_results(results)

    def on_message(self, msg: Message) -> None:
        if msg.msg_type != "array":
            return
        results = self.live_of(msg)
        if results is None:
            return
        if self.take_array(results, msg) and results is self.results:
            if msg.content.get("name") == "quant/ladder":
                self._show_ladders()
                self._show_summary()

    def take_array(self, results: QuantResults, msg: Message) -> bool:
        parts = named_array(msg.content, msg.buffers)
        return parts is not None and results.add_array(*parts)

    # -- layout that persists -------------------------------------------------------------------
    def _layer_box_height(self, box: QVBoxLayout, filter_row: QHBoxLayout) -> int:
        """The height that shows TABLE_ROWS rows of the layer table under its filter row: the header, the
        rows, the horizontal scroll bar (its many columns are wider than the tab) and the frame."""
        view = self.layer_view
        table = (
            view.horizontalHeader().sizeHint().height()
            + TABLE_ROWS * view.verticalHeader().defaultSectionSize()
            + view.style().pixelMetric(QStyle.PM_ScrollBarExtent, None, view)
            + 2 * view.frameWidth()
        )
        # 2: so the eighth row is whole
        return filter_row.sizeHint().height() + max(0, box.spacing()) + table + 2

    def splitter_states(self) -> dict:
        """{name: QSplitter.saveState()} of the tab's three splitters, for the window's settings."""
        return {name: splitter.saveState() for name, splitter in self.splitters.items()}

    def restore_splitters(self, states) -> None:
        """Put back what splitter_states gave (anything unreadable is ignored: the defaults stay)."""
        if not isinstance(states, dict):
            return
        for name, splitter in self.splitters.items():
            state = states.get(name)
            if isinstance(state, QByteArray):
                splitter.restoreState(state)

    # -- buttons ---------------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        run_id = self.selected_run_id()
        entry = self.runs.get(run_id or "")
        live = run_id in self.job_of_run
        done = bool(entry) and entry["status"] == "done" and not live
        self.stop_button.setEnabled(live)
        self.progress_box.setVisible(live)
        self.again_button.setEnabled(bool(entry and entry.get("spec")))
        self.graph_button.setEnabled(done and bool(entry.get("source_run")))
        self.try_it_button.setEnabled(done)
        proposal = (self.results.report.get("mixed_precision") if self.results else None) or {}
        self.apply_button.setEnabled(done and bool(proposal.get("layers")))
        self.apply_button.setToolTip(_apply_tooltip(done, self.results, proposal))
        self.open_button.setEnabled(bool(entry))
        self.delete_button.setEnabled(bool(entry) and not live)

    def _on_again_clicked(self) -> None:
        entry = self.runs.get(self.selected_run_id() or "")
        if entry and entry.get("spec"):
            self.new_run_requested.emit(
                dig(entry["spec"], "source", "run", default=""), copy.deepcopy(entry["spec"])
            )

    def _on_graph_clicked(self) -> None:
        entry = self.runs.get(self.selected_run_id() or "")
        if entry and entry.get("source_run"):
            self.graph_requested.emit(entry["id"], entry["source_run"])

    def proposal_spec(self) -> dict | None:
        """The selected run's spec with its mixed-precision proposal applied (and no new proposal asked)."""
        entry = self.runs.get(self.selected_run_id() or "")
        proposal = (self.results.report.get("mixed_precision") if self.results else None) or {}
        if not entry or not entry.get("spec") or not proposal.get("layers"):
            return None
        spec = copy.deepcopy(entry["spec"])
        spec["mixed_precision"] = {
            "target_drop": 0.0,
            "layers": [dict(layer) for layer in proposal["layers"]],
        }
        return spec

    def _on_apply_clicked(self) -> None:
        spec = self.proposal_spec()
        if spec is not None:
            self.start_requested.emit(spec)

    # -- the doctor --------------------------------------------------------------------------------
    def _show_doctor(self) -> None:
        entry = self.runs.get(self.selected_run_id() or "")
        done = (
            bool(entry)
            and entry["status"] == "done"
            and entry["id"] not in self.job_of_run
            and self.results is not None
            and self.results.run_id == entry["id"]
        )
        report = self.results.report if self.results else {}
        backends = newest_qdq_export(self.store, entry["id"]) if entry else None
        self.doctor.set_doctor(
            report.get("doctor"), self.results.metric if self.results else None, done, backends
        )

    def on_job_changed(self, record: JobRecord) -> None:
        super().on_job_changed(record)
        # A QDQ export of the run in view that just finished brings its backend comparison to the doctor.
        if record.task == EXPORT_TASK and not record.active and self.results is not None:
            self._show_doctor()

    def doctor_shown(self) -> bool:
        """The Doctor view is the plot in front and has findings ("Show on graph" colours by them then)."""
        return self.plots.currentWidget() is self.doctor and bool(self.doctor.findings)

    def select_finding(self, layer: str) -> bool:
        """Show the Doctor tab on `layer`'s worst finding (a click on the graph's Doctor overlay)."""
        if not self.doctor.select_finding(layer):
            return False
        self.plots.setCurrentWidget(self.doctor)
        return True

    def doctor_spec(self, fixes: list[str]) -> dict | None:
        """The shown run's spec to quantize again with the doctor applying `fixes` (empty: every verified
        one)."""
        entry = self.runs.get(self.selected_run_id() or "")
        if not entry or not entry.get("spec"):
            return None
        return doctor_spec(entry["spec"], fixes)

    def _on_try_fix(self, finding: dict) -> None:
        self._start_doctor([fix_of(finding)], fix_of(finding))

    def _start_doctor(self, fixes: list[str], what: str) -> None:
        spec = self.doctor_spec(fixes)
        if spec is None:
            self.status_message.emit("Pick a finished quantize run first")
            return
        self.status_message.emit(f"Quantizing again with the doctor applying {what}…")
        self.start_requested.emit(spec)
