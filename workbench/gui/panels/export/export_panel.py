"""The Export & Benchmark tab: export a trained (or quantized) model with the wizard and read its parity verdict,
with the first diverging layer one click from the graph; measure latency, throughput and memory across backends
and batch sizes, the table and plots filling in live as each row is measured; overlay earlier benchmarks; save
the numbers as CSV or JSON. Live runs stream over the protocol; finished ones are read from their run folder."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices, QFont
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.client import JobRecord
from workbench.errors import WorkbenchError
from workbench.gui.panels.export.bench_plots import (
    HISTORY_EMPTY,
    DistributionView,
    LatencyPlot,
    ParityPlot,
    ThroughputPlot,
    short_run_label,
)
from workbench.gui.panels.export.bench_wizard import BenchWizard
from workbench.gui.panels.export.export_wizard import ExportWizard
from workbench.gui.panels.export.results import (
    BenchResults,
    ExportResults,
    format_bytes,
    format_diff,
    format_ms,
    measured,
)
from workbench.gui.panels.export.results_table import BenchResultsTable
from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.results import bit_widths
from workbench.gui.panels.run_tab import RunTab
from workbench.gui.run_identity import RunIdentities
from workbench.gui.widgets import run_table
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.job_progress import JobProgress
from workbench.protocol import Message, named_array
from workbench.specs import BenchSpec, ExportSpec
from workbench.task_ids import BENCH_TASK, EXPORT_TASK, QUANT_TASK, TRAIN_TASK

TASKS = (EXPORT_TASK, BENCH_TASK)
RUN_COLUMNS = ("Run", "Status", "What", "Result")
KIND_NAMES = {EXPORT_TASK: "Export", BENCH_TASK: "Benchmark"}
PLOT_TABS = ("Latency vs batch", "Distribution", "Throughput", "History")
PASSED, FAILED, NEUTRAL, RUNNING = "#2e9d4a", "#d0342c", "#8a8f98", "#2f6fd6"
# The benchmark backend that measures each export format's file.
FORMAT_BACKENDS = {"torchscript": "torchscript", "exported_program": "exported_program", "onnx": "onnxruntime",
                   "onnx_qdq": "onnxruntime", "tensorrt": "tensorrt"}
Submit = Callable[[str, dict], "JobRecord | None"]


def _scheme(spec: dict) -> str:
    return bit_widths({"weights": {"bits": 8}, "activations": {"bits": 8}, **spec})


def _join_batches(values) -> str:
    return ", ".join(str(v) for v in values or [])


class ExportPanel(RunTab):
    TASKS = TASKS
    EARLY_PREFIX = "bench/"  # a benchmark's arrays that came before the job was ours
    STOPPING_TEXT = "Stopping at the next step…"
    report_requested = Signal(str)  # the training run whose HTML report to open
    graph_requested = Signal(str, str)  # a training (or quantize) run id, the module to select on its graph

    def __init__(self, workspace, submit: Submit, parent=None):
        # runs: export and bench runs; live: job id -> the ExportResults or BenchResults filling in
        super().__init__(workspace, parent)
        self.submit = submit
        self.default_device = ""  # the toolbar's device: the wizards' default
        self.current: ExportResults | BenchResults | None = None
        self.overlays: dict[str, BenchResults] = {}  # run id -> an earlier benchmark ticked in History
        self._build()
        self.refresh()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        self.export_button = QPushButton("New export…")
        self.export_button.setToolTip("Export a trained or quantized model to TorchScript, torch.export, ONNX or "
                                      "TensorRT and check its outputs against PyTorch")
        self.bench_button = QPushButton("New benchmark…")
        self.bench_button.setToolTip("Measure latency percentiles, throughput and peak memory across backends and "
                                     "batch sizes")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Cancel the selected export or benchmark")
        self.save_button = QPushButton("Save results…")
        self.save_button.setToolTip("Save the selected benchmark's rows as CSV or JSON")
        self.open_button = QPushButton("Open folder")
        self.report_button = QPushButton("Report…")
        self.report_button.setToolTip("Open the HTML report of the training run this export or benchmark came from")
        # The report written last time, opened again without rewriting it (Report… opened it once, in a browser
        # a person may have closed, or that did not come to the front).
        self.open_report_button = QPushButton("Open report")
        self.open_report_button.setToolTip("Open the HTML report already written for the selected run's training "
                                           "run in the web browser (Report… writes it afresh)")
        self.delete_button = QPushButton("Delete…")
        buttons = (self.export_button, self.bench_button, self.stop_button, self.save_button, self.open_button,
                   self.report_button, self.open_report_button, self.delete_button)

        self.table = run_table.make_run_table(RUN_COLUMNS)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        for column in range(len(RUN_COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        header.setSectionResizeMode(len(RUN_COLUMNS) - 1, QHeaderView.Stretch)  # the result, elided

        self.progress_box = JobProgress("Stop this job at its next step (Ctrl+.)")
        self.progress, self.cancel_button = self.progress_box.bar, self.progress_box.cancel_button

        self.nothing = QLabel("Pick an export or a benchmark in the list.")
        self.nothing.setAlignment(Qt.AlignCenter)
        self.nothing.setWordWrap(True)
        self.export_page = self._build_export_page()
        self.bench_page = self._build_bench_page()
        self.detail = QStackedWidget()
        for page in (self.nothing, self.export_page, self.bench_page):
            self.detail.addWidget(page)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.progress_box)
        right_layout.addWidget(self.detail, 1)

        self.empty_export_button = QPushButton("Export a trained model…")
        self.empty_bench_button = QPushButton("Benchmark a model…")
        for button in (self.empty_export_button, self.empty_bench_button):
            button.setMinimumHeight(40)
        self.empty_state = EmptyState("No exports or benchmarks yet",
                                      [self.empty_export_button, self.empty_bench_button], width=640, row=True)
        self.empty_text = self.empty_state.text
        self.build_frame(buttons, self.table, right, self.empty_state, (520, 980))

        self.export_button.clicked.connect(lambda: self.new_export())
        self.empty_export_button.clicked.connect(lambda: self.new_export())
        self.bench_button.clicked.connect(lambda: self.new_benchmark())
        self.empty_bench_button.clicked.connect(lambda: self.new_benchmark())
        self.connect_stop(self.stop_button, self.cancel_button)
        self.save_button.clicked.connect(self._on_save_clicked)
        self.open_button.clicked.connect(self.open_selected_folder)
        self.report_button.clicked.connect(self._on_report_clicked)
        self.open_report_button.clicked.connect(self._on_open_report_clicked)
        self.delete_button.clicked.connect(self.delete_selected)
        self.table.itemSelectionChanged.connect(self._on_run_selected)
        self.progress_box.hide()

    def _build_export_page(self) -> QWidget:
        page = QWidget()
        self.export_title = QLabel()
        self.export_title.setTextFormat(Qt.RichText)
        self.export_title.setWordWrap(True)
        self.verdict = QLabel()
        font = QFont(self.verdict.font())
        font.setPointSize(max(18, int(font.pointSize() * 2)))
        font.setBold(True)
        self.verdict.setFont(font)
        self.verdict_detail = QLabel()
        self.verdict_detail.setTextFormat(Qt.RichText)
        self.verdict_detail.setWordWrap(True)
        self.verdict_detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.diverging_label = QLabel()
        self.diverging_label.setTextFormat(Qt.RichText)
        self.diverging_button = QPushButton()
        self.diverging_button.setToolTip("Open the model's graph in the Graph tab with this layer selected")
        diverging_row = QHBoxLayout()
        diverging_row.setContentsMargins(0, 0, 0, 0)
        diverging_row.addWidget(self.diverging_label)
        diverging_row.addWidget(self.diverging_button)
        diverging_row.addStretch(1)
        self.diverging_box = QWidget()
        self.diverging_box.setLayout(diverging_row)
        self.parity_plot = ParityPlot()
        self.parity_plot.setFixedHeight(190)
        self.artifact_form = QFormLayout()
        self.artifact_labels: dict[str, QLabel] = {}
        for name in ("File", "Format", "Size", "Exporter", "Accuracy"):
            label = QLabel()
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            label.setWordWrap(True)
            self.artifact_labels[name] = label
            self.artifact_form.addRow(f"{name}:", label)
        self.bench_export_button = QPushButton("Benchmark this export…")
        self.bench_export_button.setToolTip("Measure the exported file beside the PyTorch model")
        actions = QHBoxLayout()
        actions.addWidget(self.bench_export_button)
        actions.addStretch(1)
        self.artifact_box = QWidget()
        artifact_layout = QVBoxLayout(self.artifact_box)
        artifact_layout.setContentsMargins(0, 0, 0, 0)
        artifact_layout.addLayout(self.artifact_form)
        artifact_layout.addSpacing(8)
        artifact_layout.addLayout(actions)
        layout = QVBoxLayout(page)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.export_title)
        layout.addSpacing(8)
        layout.addWidget(self.verdict)
        layout.addWidget(self.verdict_detail)
        layout.addWidget(self.diverging_box)
        layout.addWidget(self.parity_plot)
        layout.addSpacing(12)
        layout.addWidget(self.artifact_box)
        layout.addStretch(1)
        self.diverging_button.clicked.connect(self._on_diverging_clicked)
        self.bench_export_button.clicked.connect(self._on_bench_export_clicked)
        return page

    def _build_bench_page(self) -> QWidget:
        page = QWidget()
        self.bench_summary = QLabel()
        self.bench_summary.setTextFormat(Qt.RichText)
        self.bench_summary.setWordWrap(True)
        self.results_table = BenchResultsTable()
        self.latency_plot = LatencyPlot()
        self.distribution = DistributionView()
        self.throughput_plot = ThroughputPlot()
        self.history_list = QListWidget()
        self.history_list.setToolTip("Tick earlier benchmarks to overlay their p50 latency as dashed lines")
        history_label = QLabel("Earlier benchmarks to overlay")
        history_label.setWordWrap(True)
        history_left = QWidget()
        history_left_layout = QVBoxLayout(history_left)
        history_left_layout.setContentsMargins(0, 0, 0, 0)
        history_left_layout.addWidget(history_label)
        history_left_layout.addWidget(self.history_list, 1)
        self.history_plot = LatencyPlot(HISTORY_EMPTY)
        history = QSplitter(Qt.Horizontal)
        history.addWidget(history_left)
        history.addWidget(self.history_plot)
        history.setSizes([230, 700])
        history.setStretchFactor(1, 1)
        self.plots = QTabWidget()
        for widget, title in zip((self.latency_plot, self.distribution, self.throughput_plot, history), PLOT_TABS):
            self.plots.addTab(widget, title)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self.results_table)
        splitter.addWidget(self.plots)
        splitter.setSizes([270, 500])
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bench_summary)
        layout.addWidget(splitter, 1)
        self.results_table.row_selected.connect(self._on_bench_row_selected)
        self.history_list.itemChanged.connect(self._on_history_changed)
        return page

    # -- the runs list ---------------------------------------------------------------------------
    def set_workspace(self, workspace) -> None:
        super().set_workspace(workspace)
        self.show_results(None)

    def forget(self, run_id: str | None) -> None:
        if run_id is None:  # another workspace
            self.current = None
            self.overlays.clear()
            return
        self.overlays.pop(run_id, None)
        if self.current is not None and self.current.run_id == run_id:
            self.show_results(None)

    def set_default_device(self, device: str) -> None:
        self.default_device = device or ""

    def source_runs(self) -> list[dict]:
        """Finished training and quantize runs the wizards can start from, newest first: {id, task, model,
        scheme}."""
        runs = []
        identities = RunIdentities(self.store)
        for entry in self.store.list_runs():
            if entry.get("task") not in (TRAIN_TASK, QUANT_TASK) or entry.get("status") != "done":
                continue
            identity = identities.of(entry)  # the combos' label (model · dataset · key metric · date) and tooltip
            entry["label"], entry["tooltip"] = identity.label, identity.tooltip
            try:
                with self.store.open_run(entry["id"]) as run:
                    spec = run.read_spec()
            except WorkbenchError:
                continue
            if entry["task"] == TRAIN_TASK:
                entry["model"] = (spec.get("model") or {}).get("name", "")
            else:
                entry["scheme"] = _scheme(spec)
                entry["model"] = f"of {(spec.get('source') or {}).get('run', '?')}"
            runs.append(entry)
        return runs

    def refresh(self) -> None:
        selected = self.selected_run_id()
        entries, listed = self.list_runs()
        run_table.set_rows(self.table, [[run_table.id_item(entry), run_table.status_item(entry),
                                         *self._what_and_result_items(entry)] for entry in entries])
        self._fill_history()
        has_sources = any(e.get("task") in (TRAIN_TASK, QUANT_TASK) and e.get("status") == "done" for e in listed)
        self.empty_state.set_text(
            "Export a trained model to TorchScript, torch.export, ONNX (int8 QDQ from a quantize run) or TensorRT: "
            "its outputs are checked against PyTorch and, when they differ, the first diverging layer is named. "
            "Then benchmark it: latency percentiles, throughput and memory per backend and batch size."
            if has_sources else
            "Exports and benchmarks start from a trained model: train one in the Training tab first (Ctrl+T), then "
            "come back here. An exported file (.onnx, .pt2, .pt) can be benchmarked right away.")
        self.empty_export_button.setEnabled(has_sources)
        self.pages.setCurrentIndex(0 if not entries and not self.live else 1)
        self.keep_selection(selected, entries, pick_first=self.current is None)
        self._update_buttons()

    @staticmethod
    def _what_and_result_items(entry: dict) -> tuple[QTableWidgetItem, QTableWidgetItem]:
        what = QTableWidgetItem(entry.get("what", ""))
        what.setToolTip(entry.get("what_tooltip", ""))
        result = QTableWidgetItem(entry.get("result", ""))
        result.setToolTip(entry.get("result", ""))
        if entry.get("result_colour"):
            result.setForeground(QColor(entry["result_colour"]))
        return what, result

    def run_summary(self, entry: dict) -> dict:
        read = run_table.read_spec_and_report(self.store, entry["id"])
        if read is None:
            return {}
        spec, report = read
        source = (spec.get("source") or {}).get("run", "") or (spec.get("source") or {}).get("file", "")
        summary = {"spec": spec, "source_run": (spec.get("source") or {}).get("run", ""),
                   "what_tooltip": f"{KIND_NAMES[entry['task']]} of {source or 'a model'}"}
        if entry["task"] == EXPORT_TASK:
            summary["what"] = f"export · {spec.get('format', '')}"
            parity = report.get("parity") if isinstance(report.get("parity"), dict) else None
            if parity is not None and parity.get("passed") is not None and not parity.get("skipped"):
                passed = bool(parity.get("passed"))
                summary["result"] = (f"{'✓ parity' if passed else '✗ parity'} "
                                     f"{format_diff(parity.get('max_abs_diff'))}")
                summary["result_colour"] = PASSED if passed else FAILED
            elif report.get("artifact"):
                summary["result"] = f"{format_bytes(report.get('size_bytes'))}, not verified"
        else:
            backends = spec.get("backends") or []
            summary["what"] = f"bench · {len(backends)} × {len(spec.get('batch_sizes') or [])}"
            summary["what_tooltip"] += (f"\nbackends {', '.join(backends)}\nbatch sizes "
                                        f"{_join_batches(spec.get('batch_sizes'))}")
            rows = [r for r in report.get("results") or [] if isinstance(r, dict) and measured(r)
                    and isinstance((r.get("latency_ms") or {}).get("p50"), (int, float))]
            if rows:
                batch = min(int(r.get("batch_size", 0)) for r in rows)
                best = min((r for r in rows if int(r.get("batch_size", 0)) == batch),
                           key=lambda r: r["latency_ms"]["p50"])
                summary["result"] = f"{best['backend']} {format_ms(best['latency_ms']['p50'])} ms @{batch}"
        if report.get("error") and entry.get("status") in ("failed", "cancelled"):
            summary["result"] = (report["error"] or {}).get("message", "") if isinstance(report["error"], dict) else ""
            summary["result_colour"] = FAILED if entry.get("status") == "failed" else NEUTRAL
        return summary

    def _on_run_selected(self) -> None:
        run_id = self.selected_run_id()
        self._update_buttons()
        if run_id is None:
            return
        job_id = self.job_of_run.get(run_id)
        if job_id is not None and job_id in self.live:
            self.show_results(self.live[job_id])
            return
        self.open_run(run_id)

    def open_run(self, run_id: str) -> bool:
        """Show an export or benchmark run (from the Runs tab too); False with a message when it is not one of
        this workspace or cannot be read."""
        entry = self.runs.get(run_id)
        if entry is None:
            self.refresh()
            entry = self.runs.get(run_id)
        if entry is None:
            self.status_message.emit(f"{run_id} is not an export or benchmark run of this workspace")
            return False
        if self.selected_run_id() != run_id:
            return self.select_run(run_id) and self.current is not None and self.current.run_id == run_id
        job_id = self.job_of_run.get(run_id)
        if job_id is not None and job_id in self.live:
            self.show_results(self.live[job_id])
            return True
        try:
            if entry["task"] == EXPORT_TASK:
                results = ExportResults.from_run(entry["run_dir"])
            else:
                results = BenchResults.from_run(entry["run_dir"])
        except WorkbenchError as exc:
            self.show_results(None, str(exc))
            self.status_message.emit(str(exc))
            return False
        if not results.report and entry["status"] not in ("running", "queued"):
            results.error = results.error or entry.get("message") or f"the run is {entry['status']}"
        self.show_results(results)
        return True

    # -- showing a run ---------------------------------------------------------------------------
    def show_results(self, results: ExportResults | BenchResults | None, message: str = "") -> None:
        self.current = results
        if isinstance(results, ExportResults):
            self.detail.setCurrentWidget(self.export_page)
            self._show_export(results)
        elif isinstance(results, BenchResults):
            self.detail.setCurrentWidget(self.bench_page)
            self._show_bench(results, redraw_all=True)
        else:
            self.nothing.setText(message or "Pick an export or a benchmark in the list.")
            self.nothing.setStyleSheet(f"color: {FAILED}" if message else "")
            self.detail.setCurrentWidget(self.nothing)
        self._fill_history()
        record = self.records.get(self._job_of(results) or "")
        if record is not None:
            self.progress_box.show_record(record)
        else:
            self.progress_box.hide()
        self._update_buttons()

    def _job_of(self, results) -> str | None:
        return next((job_id for job_id, r in self.live.items() if r is results), None) if results else None

    def _live(self, results) -> bool:
        return self._job_of(results) is not None

    def _show_export(self, results: ExportResults) -> None:
        spec, report = results.spec, results.report
        source = results.source_run or (spec.get("model") or {}).get("name", "a model")
        self.export_title.setText(f"<b>{results.run_id or 'Starting…'}</b> · {results.format} export of "
                                  f"{source} on {spec.get('device', 'cpu')}")
        parity = results.parity
        self.diverging_box.hide()
        checked = parity is not None and parity.get("passed") is not None and not parity.get("skipped")
        self.parity_plot.set_parity(parity if checked else None, PASSED, FAILED)
        self.parity_plot.setVisible(checked and not self.parity_plot.is_empty)
        if self._live(results):
            self._set_verdict("Exporting…", RUNNING)
            self.verdict_detail.setText("The verdict appears when the export has been checked against PyTorch.")
        elif results.error:
            self._set_verdict("Export failed" if "cancel" not in results.error.lower() else "Export stopped",
                              FAILED)
            self.verdict_detail.setText(_escape(results.error))
        elif parity is None or parity.get("skipped") or parity.get("passed") is None:
            self._set_verdict("Exported, not verified", NEUTRAL)
            reason = (parity or {}).get("reason", "")
            self.verdict_detail.setText("The parity check was off (“verify” in the wizard)." if not reason or
                                        reason == "verify=false" else _escape(reason))
        else:
            passed = bool(parity.get("passed"))
            self._set_verdict("Parity passed ✓" if passed else "Parity failed ✗", PASSED if passed else FAILED)
            self.verdict_detail.setText(
                f"max abs diff <b>{_diff_text(parity, 'max_abs_diff')}</b> · max rel diff "
                f"<b>{_diff_text(parity, 'max_rel_diff')}</b> · tolerance {format_diff(parity.get('tolerance'))}"
                f"<br>checked on {_count_text(parity.get('samples'))} samples at batch sizes "
                f"{_count_text(parity.get('batches'))}" + _steps_text(parity))
            self.verdict_detail.setToolTip(str(parity.get("explanation") or ""))
            layer = parity.get("first_divergent_layer")
            if layer:
                self.diverging_label.setText(f"First layer whose output diverges: <b>{_escape(layer)}</b>")
                self.diverging_button.setText(f"Show {layer} on the graph")
                self.diverging_button.setEnabled(bool(self.training_run_of(results.run_id) or results.source_run))
                self.diverging_button.show()
                self.diverging_box.show()
            elif not passed and parity.get("first_divergent_layer_reason"):
                self.diverging_label.setText(f"No diverging layer named: "
                                             f"{_escape(parity['first_divergent_layer_reason'])}")
                self.diverging_button.hide()
                self.diverging_box.show()
        labels = self.artifact_labels
        labels["File"].setText(str(report.get("artifact") or "—"))
        labels["Format"].setText(results.format)
        labels["Size"].setText(format_bytes(report.get("size_bytes")))
        exporter = str(report.get("exporter") or "—")
        if report.get("fallback_reason"):
            exporter += f" (fallback: {report['fallback_reason']})"
        labels["Exporter"].setText(exporter)
        # A tracing exporter froze forward()'s Python branches to the example's: said where the exporter is named.
        labels["Exporter"].setToolTip(str(report.get("frozen_control_flow") or ""))
        if report.get("frozen_control_flow") and report.get("exporter") == "torchscript":
            labels["Exporter"].setText(f"{exporter}. Control flow on tensor values was frozen by tracing (see the "
                                       "tooltip)")
        labels["Accuracy"].setText(_accuracy_text(results.format, report, checked and bool(parity.get("passed"))))
        self.bench_export_button.setEnabled(bool(report.get("artifact")) and not self._live(results))
        self.artifact_box.setVisible(bool(report.get("artifact")))

    def _set_verdict(self, text: str, colour: str) -> None:
        self.verdict.setText(text)
        self.verdict.setStyleSheet(f"color: {colour}")
        self.verdict.setProperty("verdict_colour", colour)

    def _show_bench(self, results: BenchResults, *, redraw_all: bool = False) -> None:
        spec = results.spec
        live = self._live(results)
        parts = [f"<b>{results.run_id or 'Starting…'}</b>", _escape(results.source_text() or "a model"),
                 f"{', '.join(results.backends)} × batch {_join_batches(results.batch_sizes)}",
                 f"{spec.get('dtype', 'float32')} on {spec.get('device', 'cpu')}",
                 f"{spec.get('iters', '?')} iterations after {spec.get('warmup', '?')} warm-up"]
        if results.error:
            parts.append(f"<span style='color:{FAILED}'>{_escape(results.error)}</span>")
        self.bench_summary.setText(" · ".join(parts))
        previous = self.results_table.selected_key()
        self.results_table.set_rows(results.rows(pending=live))
        self.latency_plot.set_results(results)
        self.throughput_plot.set_results(results)
        self._draw_history()
        if previous is None or redraw_all:
            if not (previous and self.results_table.select_key(previous)):
                first = next(iter(results.done_rows()), None)
                if first is not None:
                    self.results_table.select_key(f"{first['backend']}/{first['batch_size']}")
            self._on_bench_row_selected(self.results_table.selected_row())
        elif self.distribution.row is None:  # the selected row had not been measured: it may be now
            self._on_bench_row_selected(self.results_table.selected_row())

    def _on_bench_row_selected(self, row: dict | None) -> None:
        results = self.current if isinstance(self.current, BenchResults) else None
        if results is None or row is None:
            self.distribution.set_row(None, None)
            return
        self.distribution.set_row(row, results.samples_of(row))

    # -- history ---------------------------------------------------------------------------------
    def _fill_history(self) -> None:
        current = self.current.run_id if self.current is not None else ""
        checked = set(self.overlays)
        self.history_list.blockSignals(True)
        self.history_list.clear()
        for run_id, entry in self.runs.items():
            if entry["task"] != BENCH_TASK or entry["status"] != "done" or run_id == current:
                continue
            item = QListWidgetItem(f"{short_run_label(run_id)}  {entry.get('what', '')}")
            item.setData(Qt.UserRole, run_id)
            item.setToolTip(f"{run_id}\n{entry.get('result', '')}")
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if run_id in checked else Qt.Unchecked)
            self.history_list.addItem(item)
        self.history_list.blockSignals(False)
        for run_id in list(self.overlays):
            if run_id not in self.runs or run_id == current:
                self.overlays.pop(run_id)

    def overlay_runs(self, run_ids: list[str]) -> None:
        """Tick these earlier benchmarks in History (and untick the others)."""
        for index in range(self.history_list.count()):
            item = self.history_list.item(index)
            item.setCheckState(Qt.Checked if item.data(Qt.UserRole) in run_ids else Qt.Unchecked)

    def _on_history_changed(self, item: QListWidgetItem) -> None:
        run_id = item.data(Qt.UserRole)
        if item.checkState() == Qt.Checked:
            try:
                self.overlays[run_id] = BenchResults.from_run(self.runs[run_id]["run_dir"])
            except (WorkbenchError, KeyError) as exc:
                self.status_message.emit(f"Cannot overlay {run_id}: {exc}")
                item.setCheckState(Qt.Unchecked)
                return
        else:
            self.overlays.pop(run_id, None)
        self._draw_history()

    def _draw_history(self) -> None:
        current = self.current if isinstance(self.current, BenchResults) else None
        earlier = [r for run_id, r in self.overlays.items() if current is None or run_id != current.run_id]
        if not earlier:
            self.history_plot.clear(HISTORY_EMPTY)
            return
        self.history_plot.set_results(current, earlier, band=False)

    # -- starting jobs ---------------------------------------------------------------------------
    def export_wizard(self, source_run: str = "", start: dict | None = None) -> ExportWizard:
        """The export wizard on a training or quantize run (or, for an export run, on its spec: export again), or
        filled from `start`, a whole spec (File ▸ Open spec)."""
        entry = self.runs.get(source_run)
        if start is not None:
            start = copy.deepcopy(start)
        elif entry and entry["task"] == EXPORT_TASK and entry.get("spec"):
            start = copy.deepcopy(entry["spec"])
        return ExportWizard(self.source_runs(), source_run="" if start else source_run, start=start,
                            device=self.default_device, parent=self)

    def benchmark_wizard(self, source_run: str = "", start: dict | None = None) -> BenchWizard:
        """The benchmark wizard on a run: a training or quantize run is measured eagerly; an export run's file is
        measured beside its PyTorch model; a benchmark run's spec opens again; `start`, a whole spec, fills it."""
        entry = self.runs.get(source_run)
        if start is not None:
            start = copy.deepcopy(start)
        elif entry and entry["task"] == BENCH_TASK and entry.get("spec"):
            start = copy.deepcopy(entry["spec"])
        elif entry and entry["task"] == EXPORT_TASK:
            start = self._bench_start_for_export(entry)
        elif source_run:
            start = {"source": {"run": source_run, "file": ""}}
            if self._task_of(source_run) == QUANT_TASK:
                start["backends"] = ["eager", "onnxruntime_int8"]
        return BenchWizard(self.source_runs(), start=start, device=self.default_device, parent=self)

    def _bench_start_for_export(self, entry: dict) -> dict:
        spec = entry.get("spec") or {}
        try:
            report = ExportResults.from_run(entry["run_dir"]).report
        except WorkbenchError:
            report = {}
        fmt = spec.get("format", "onnx")
        start: dict = {"backends": ["eager", FORMAT_BACKENDS.get(fmt, "onnxruntime")],
                       "device": spec.get("device", "cpu")}
        source_run = (spec.get("source") or {}).get("run", "")
        artifact = str(report.get("artifact") or "")
        if source_run:
            start["source"] = {"run": source_run, "file": ""}
            start["artifact"] = artifact
        else:
            start["source"] = {"run": "", "file": artifact}
            start["backends"] = [FORMAT_BACKENDS.get(fmt, "onnxruntime")]
        return start

    def new_export(self, source_run: str = "", start: dict | None = None) -> JobRecord | None:
        """Open the export wizard (modal), on a run or filled from a whole spec; on Export, start the job."""
        wizard = self.export_wizard(source_run, start)
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_export(wizard.spec)

    def new_benchmark(self, source_run: str = "", start: dict | None = None) -> JobRecord | None:
        """Open the benchmark wizard (modal), on a run or filled from a whole spec; on Run, start the job."""
        wizard = self.benchmark_wizard(source_run, start)
        if not wizard.exec() or wizard.spec is None:
            return None
        return self.start_benchmark(wizard.spec)

    def start_export(self, spec: ExportSpec | dict) -> JobRecord | None:
        return self._start(EXPORT_TASK, spec.to_dict() if isinstance(spec, ExportSpec) else dict(spec))

    def start_benchmark(self, spec: BenchSpec | dict) -> JobRecord | None:
        return self._start(BENCH_TASK, spec.to_dict() if isinstance(spec, BenchSpec) else dict(spec))

    def _start(self, task: str, data: dict) -> JobRecord | None:
        record = self.submit(task, data)
        if record is None:
            return None
        what = "Exporting" if task == EXPORT_TASK else "Benchmarking"
        source = (data.get("source") or {}).get("run") or (data.get("source") or {}).get("file") or "a model"
        # Said before the record is taken: a record that has already ended says so after it, last.
        self.status_message.emit(f"{what} {source}…")
        self.on_job_changed(record)
        return record

    # -- live jobs -------------------------------------------------------------------------------
    def job_started(self, record: JobRecord, run_id: str | None) -> ExportResults | BenchResults:
        """An export or benchmark is shown as soon as it is submitted; its run folder is named a moment later."""
        cls = ExportResults if record.task == EXPORT_TASK else BenchResults
        results = cls(spec=copy.deepcopy(record.spec))
        self.start_tracking(record.job_id, None, results)
        self.pages.setCurrentIndex(1)
        self.table.clearSelection()
        self.show_results(results)
        return results

    def run_named(self, record: JobRecord, results, run_id: str) -> None:
        results.run_id, results.run_dir = run_id, record.run_dir
        showing = self.current is results
        self.refresh()
        if showing:
            self.select_run(run_id)
            self.show_results(results)

    def showing(self, kept) -> bool:
        return kept is self.current

    def ended_message(self, record: JobRecord, run_id: str | None) -> str:
        # Every ending replaces the "Exporting …" message the start left in the status bar.
        ending = {"done": "finished", "cancelled": "stopped"}.get(record.state, "failed: see the verdict")
        return f"{KIND_NAMES[record.task]} {run_id or ''} {ending}".replace("  ", " ")

    def job_finished(self, record: JobRecord, results, run_id: str | None, showing: bool) -> None:
        if not showing:
            return
        if run_id and run_id in self.runs:
            if self.selected_run_id() != run_id:
                self.select_run(run_id)  # selecting reads it back from its folder
            else:
                self.open_run(run_id)
            shown = self.current
            if shown is not None and shown is not results and shown.run_id == run_id:
                if record.state != "done" and not shown.error:
                    shown.error = record.error_message or record.state
                    self.show_results(shown)
                return
        results.error = results.error or record.error_message or record.state
        self.show_results(results)

    def on_message(self, msg: Message) -> None:
        if msg.msg_type != "array":
            return
        results = self.live_of(msg)
        if results is None:
            return
        if isinstance(results, BenchResults) and self.take_array(results, msg) and self.current is results:
            self._show_bench(results)

    def take_array(self, results, msg: Message) -> bool:
        if not isinstance(results, BenchResults):
            return False
        parts = named_array(msg.content, msg.buffers)
        return parts is not None and results.add_array(*parts) is not None

    # -- runs behind runs ------------------------------------------------------------------------
    def _task_of(self, run_id: str) -> str:
        if run_id in self.runs:
            return self.runs[run_id]["task"]
        try:
            with self.store.open_run(run_id) as run:
                return run.task or ""
        except WorkbenchError:
            return ""

    def training_run_of(self, run_id: str) -> str:
        """The training run behind an export, benchmark or quantize run (following source.run), or ""."""
        seen = set()
        while run_id and run_id not in seen:
            seen.add(run_id)
            try:
                with self.store.open_run(run_id) as run:
                    task, spec = run.task, run.read_spec()
            except WorkbenchError:
                return ""
            if task == TRAIN_TASK:
                return run_id
            run_id = (spec.get("source") or {}).get("run", "")
        return ""

    # -- buttons ---------------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        run_id = self.selected_run_id()
        entry = self.runs.get(run_id or "")
        live = bool(run_id and run_id in self.job_of_run) or (self.current is not None and self._live(self.current))
        self.stop_button.setEnabled(live)
        bench = self.current if isinstance(self.current, BenchResults) else None
        self.save_button.setEnabled(bench is not None and bool(bench.rows()))
        self.open_button.setEnabled(bool(entry))
        self.report_button.setEnabled(bool(entry) and bool(self.training_run_of(run_id)))
        report = self.report_path(run_id or "") if entry else None
        self.open_report_button.setEnabled(report is not None)
        self.open_report_button.setToolTip(str(report) if report is not None else
                                           "No report yet for this run's training run: Report… writes and opens it")
        self.delete_button.setEnabled(bool(entry) and not live)

    def job_to_stop(self) -> str | None:
        """The job of the export or benchmark shown (it may not be listed yet), else the selected run's."""
        return self._job_of(self.current) or super().job_to_stop()

    def save_results(self, path: str | Path) -> bool:
        """Write the shown benchmark's rows to `path`: CSV for a .csv file, JSON otherwise."""
        bench = self.current if isinstance(self.current, BenchResults) else None
        if bench is None or not bench.rows():
            self.status_message.emit("Pick a benchmark with results to save")
            return False
        try:
            written = bench.save(path)
        except WorkbenchError as exc:
            self.status_message.emit(str(exc))
            return False
        self.status_message.emit(f"Saved {len(bench.rows())} rows of {bench.run_id} to {written}")
        return True

    def _on_save_clicked(self) -> None:
        bench = self.current if isinstance(self.current, BenchResults) else None
        if bench is None:
            return
        default = str(Path.home() / f"{bench.run_id or 'benchmark'}.csv")
        path, chosen = QFileDialog.getSaveFileName(self, "Save benchmark results", default,
                                                   "CSV (*.csv);;JSON (*.json)")
        if not path:
            return
        if not Path(path).suffix:
            path += ".json" if "json" in chosen.lower() else ".csv"
        self.save_results(path)

    def _on_report_clicked(self) -> None:
        training = self.training_run_of(self.selected_run_id() or "")
        if training:
            self.report_requested.emit(training)
        else:
            self.status_message.emit("This run does not come from a training run of this workspace")
        self._update_buttons()  # the report now exists: Open report

    def report_path(self, run_id: str) -> Path | None:
        """The HTML report written for `run_id`'s training run (its artifacts/report.html), if there is one."""
        from workbench.report import REPORT_NAME  # no torch: the report module renders stored runs only

        training = self.training_run_of(run_id)
        if not training:
            return None
        try:
            path = self.store.resolve(training) / "artifacts" / REPORT_NAME
        except WorkbenchError:
            return None
        return path if path.is_file() else None

    def _on_open_report_clicked(self) -> None:
        path = self.report_path(self.selected_run_id() or "")
        if path is None:
            self.status_message.emit("No report yet for this run: Report… writes one")
            return
        if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
            self.status_message.emit(f"Could not open a web browser; the report is at {path}")

    def _on_diverging_clicked(self) -> None:
        results = self.current if isinstance(self.current, ExportResults) else None
        layer = ((results.parity or {}).get("first_divergent_layer") if results else None) or ""
        if not results or not layer:
            return
        source = self.training_run_of(results.run_id) or results.source_run
        self.graph_requested.emit(source, layer)

    def _on_bench_export_clicked(self) -> None:
        if isinstance(self.current, ExportResults) and self.current.run_id:
            self.new_benchmark(self.current.run_id)


def _diff_text(parity: dict, key: str) -> str:
    """A difference; a key present as null is one the check found not finite (inf or NaN)."""
    value = parity.get(key)
    return "not finite" if value is None and key in parity else format_diff(value)


def _steps_text(parity: dict) -> str:
    """For a QDQ export: each onnxruntime configuration's output difference in steps against its derived tolerance,
    and how many quantizer codes differed from the simulation's (the tooltip explains)."""
    steps = parity.get("steps")
    if not isinstance(steps, dict):
        return ""
    parts = []
    for mode, label in (("deployed", "as deployed"), ("as_written", "as written")):
        analysis = steps.get(mode)
        if not isinstance(analysis, dict) or analysis.get("max_steps") is None:
            continue
        q = analysis.get("quantizers") or {}
        flips = int(q.get("one_step_at_a_tie") or 0)
        other = int(q.get("one_step_elsewhere") or 0) + int(q.get("two_or_more") or 0)
        parts.append(f"{label}: {analysis['max_steps']:.0f} of {analysis.get('tolerance_steps')} steps, "
                     f"{flips:,} rounding flip{'s' if flips != 1 else ''}"
                     + (f", <b>{other:,} codes off</b>" if other else ""))
    return "<br>" + " · ".join(parts) if parts else ""


def _count_text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "?"
    return "?" if value is None else str(value)


def _accuracy_text(fmt: str, report: dict, parity_passed: bool) -> str:
    """What the export's accuracy is: measured in onnxruntime for an int8 export, else what parity says of it (a
    float export computes what PyTorch does, so it is measured only where quantization could change it)."""
    accuracy = report.get("accuracy") if isinstance(report.get("accuracy"), dict) else None
    if accuracy and isinstance(accuracy.get("onnxruntime"), (int, float)) and isinstance(accuracy.get("metric"), dict):
        # Another task's monitor (val MAE, mIoU, mean AP) under the same keys: in its own units, as the Quantization
        # tab shows it, not as a percentage of accuracy.
        measure = Measure.of(accuracy["metric"], accuracy.get("split"))
        text = f"{measure.axis}: onnxruntime {measure.text(accuracy['onnxruntime'])}"
        if isinstance(accuracy.get("simulated"), (int, float)):
            change = accuracy["onnxruntime"] - accuracy["simulated"]
            text += f" · simulated (the quantize run) {measure.text(accuracy['simulated'])} ({change:+.2g})"
        if accuracy.get("samples") and accuracy.get("split"):
            text += f" on {accuracy['samples']:,} samples of the {accuracy['split']}"
        return text
    if accuracy and isinstance(accuracy.get("onnxruntime"), (int, float)):
        text = f"onnxruntime {accuracy['onnxruntime']:.2%}"
        if isinstance(accuracy.get("simulated"), (int, float)):
            drop = (accuracy["onnxruntime"] - accuracy["simulated"]) * 100
            text += f" · simulated (the quantize run) {accuracy['simulated']:.2%} ({drop:+.2f} pt)"
        return text
    if fmt == "onnx_qdq":
        return "not measured (the dataset could not be read: see the log)" if report.get("artifact") else "—"
    if parity_passed:
        return "the PyTorch model's: its outputs match within the tolerance (measured only for onnx_qdq)"
    return "not measured: only onnx_qdq exports are (a float export computes what PyTorch does)"


def _escape(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
