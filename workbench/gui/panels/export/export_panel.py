"""The Export & Benchmark tab: export a trained (or quantized) model with the wizard and read its parity
verdict (the export view); measure latency, throughput and memory across backends and batch sizes, the
table and plots filling in live (the benchmark view). The runs of both kinds, the toolbar and the jobs are
the tab's own. Live runs stream over the protocol; finished ones are read from their run folder."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QColor, QDesktopServices
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QPushButton,
    QStackedWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from workbench.client import JobRecord
from workbench.errors import WorkbenchError
from workbench.gui.panels.export.bench_view import BenchView, bench_summary
from workbench.gui.panels.export.bench_wizard import BenchWizard
from workbench.gui.panels.export.export_view import ExportView, export_summary
from workbench.gui.panels.export.export_wizard import ExportWizard
from workbench.gui.panels.export.palette import FAILED, NEUTRAL
from workbench.gui.panels.export.results import BenchResults, ExportResults
from workbench.gui.panels.quant.results import bit_widths
from workbench.gui.panels.run_tab import RunTab
from workbench.gui.run_identity import RunIdentities
from workbench.gui.widgets import run_table
from workbench.gui.widgets.empty_state import EmptyState
from workbench.gui.widgets.job_progress import JobProgress
from workbench.protocol import Message, named_array
from workbench.results import dig
from workbench.specs import BenchSpec, ExportSpec
from workbench.task_ids import BENCH_TASK, EXPORT_TASK, QUANT_TASK, TRAIN_TASKS

TASKS = (EXPORT_TASK, BENCH_TASK)
RUN_COLUMNS = ("Run", "Status", "What", "Result")
KIND_NAMES = {EXPORT_TASK: "Export", BENCH_TASK: "Benchmark"}
# The benchmark backend that measures each export format's file.
FORMAT_BACKENDS = {
    "torchscript": "torchscript",
    "exported_program": "exported_program",
    "onnx": "onnxruntime",
    "onnx_qdq": "onnxruntime",
    "tensorrt": "tensorrt",
}
Submit = Callable[[str, dict], "JobRecord | None"]


def _scheme(spec: dict) -> str:
    return bit_widths({"weights": {"bits": 8}, "activations": {"bits": 8}, **spec})


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
        self._build()
        self.refresh()

    # -- construction ----------------------------------------------------------------------------
    def _build(self) -> None:
        buttons = self._build_buttons()
        self.table = run_table.make_run_table(RUN_COLUMNS)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        for column in range(len(RUN_COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeToContents)
        header.setSectionResizeMode(len(RUN_COLUMNS) - 1, QHeaderView.Stretch)  # the result, elided
        right = self._build_detail()
        self.empty_export_button = QPushButton("Export a trained model…")
        self.empty_bench_button = QPushButton("Benchmark a model…")
        for button in (self.empty_export_button, self.empty_bench_button):
            button.setMinimumHeight(40)
        empty_buttons = [self.empty_export_button, self.empty_bench_button]
        self.empty_state = EmptyState("No exports or benchmarks yet", empty_buttons, width=640, row=True)
        self.empty_text = self.empty_state.text
        self.build_frame(buttons, self.table, right, self.empty_state, (520, 980))
        self._connect()
        self.progress_box.hide()

    def _build_buttons(self) -> tuple[QPushButton, ...]:
        """The buttons above the runs, in the order they are laid out."""
        self.export_button = QPushButton("New export…")
        self.export_button.setToolTip(
            "Export a trained or quantized model to TorchScript, torch.export, ONNX or "
            "TensorRT and check its outputs against PyTorch"
        )
        self.bench_button = QPushButton("New benchmark…")
        self.bench_button.setToolTip(
            "Measure latency percentiles, throughput and peak memory across backends and batch sizes"
        )
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Cancel the selected export or benchmark")
        self.save_button = QPushButton("Save results…")
        self.save_button.setToolTip("Save the selected benchmark's rows as CSV or JSON")
        self.open_button = QPushButton("Open folder")
        self.report_button = QPushButton("Report…")
        self.report_button.setToolTip(
            "Open the HTML report of the training run this export or benchmark came from"
        )
        # The report written last time, opened again without rewriting it (Report… opened it once, in a
        # browser a person may have closed, or that did not come to the front).
        self.open_report_button = QPushButton("Open report")
        self.open_report_button.setToolTip(
            "Open the HTML report already written for the selected run's training "
            "run in the web browser (Report… writes it afresh)"
        )
        self.delete_button = QPushButton("Delete…")
        return (
            self.export_button,
            self.bench_button,
            self.stop_button,
            self.save_button,
            self.open_button,
            self.report_button,
            self.open_report_button,
            self.delete_button,
        )

    def _build_detail(self) -> QWidget:
        """The run shown under its job's progress: nothing picked, the export view or the benchmark view."""
        self.progress_box = JobProgress("Stop this job at its next step (Ctrl+.)")
        self.progress, self.cancel_button = self.progress_box.bar, self.progress_box.cancel_button
        self.nothing = QLabel("Pick an export or a benchmark in the list.")
        self.nothing.setAlignment(Qt.AlignCenter)
        self.nothing.setWordWrap(True)
        self.export_view = ExportView(self.training_run_of)
        self.bench_view = BenchView()
        self.overlays = self.bench_view.overlays  # run id -> an earlier benchmark ticked in History
        self.export_page, self.bench_page = self.export_view, self.bench_view
        self.detail = QStackedWidget()
        for page in (self.nothing, self.export_view, self.bench_view):
            self.detail.addWidget(page)
        # The views' widgets, reached through the tab as well (the window's tests read them there).
        view, bench = self.export_view, self.bench_view
        self.verdict, self.verdict_detail = view.verdict, view.verdict_detail
        self.parity_plot, self.diverging_box = view.parity_plot, view.diverging_box
        self.diverging_label, self.diverging_button = view.diverging_label, view.diverging_button
        self.artifact_box, self.artifact_labels = view.artifact_box, view.artifact_labels
        self.bench_summary, self.results_table = bench.bench_summary, bench.results_table
        self.plots, self.latency_plot, self.distribution = bench.plots, bench.latency_plot, bench.distribution
        self.throughput_plot, self.history_list = bench.throughput_plot, bench.history_list
        self.history_plot = bench.history_plot
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.progress_box)
        right_layout.addWidget(self.detail, 1)
        return right

    def _connect(self) -> None:
        self.export_button.clicked.connect(lambda: self.new_export())
        self.empty_export_button.clicked.connect(lambda: self.new_export())
        self.bench_button.clicked.connect(lambda: self.new_benchmark())
        self.empty_bench_button.clicked.connect(lambda: self.new_benchmark())
        self.connect_stop(self.stop_button, self.cancel_button)
        self.save_button.clicked.connect(self.bench_view.ask_and_save)
        self.open_button.clicked.connect(self.open_selected_folder)
        self.report_button.clicked.connect(self._on_report_clicked)
        self.open_report_button.clicked.connect(self._on_open_report_clicked)
        self.delete_button.clicked.connect(self.delete_selected)
        self.table.itemSelectionChanged.connect(self._on_run_selected)
        self.export_view.graph_requested.connect(self.graph_requested)
        self.export_view.bench_requested.connect(lambda run_id: self.new_benchmark(run_id))
        self.bench_view.status_message.connect(self.status_message)

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
            if entry.get("task") not in (*TRAIN_TASKS, QUANT_TASK) or entry.get("status") != "done":
                continue
            # the combos' label (model · dataset · key metric · date) and tooltip
            identity = identities.of(entry)
            entry["label"], entry["tooltip"] = identity.label, identity.tooltip
            try:
                with self.store.open_run(entry["id"]) as run:
                    spec = run.read_spec()
            except WorkbenchError:
                continue
            if entry["task"] in TRAIN_TASKS:
                entry["model"] = dig(spec, "model", "name", default="")
            else:
                entry["scheme"] = _scheme(spec)
                entry["model"] = f"of {dig(spec, 'source', 'run', default='?')}"
            runs.append(entry)
        return runs

    def refresh(self) -> None:
        selected = self.selected_run_id()
        entries, listed = self.list_runs()
        run_table.set_rows(
            self.table,
            [
                [run_table.id_item(entry), run_table.status_item(entry), *self._what_and_result_items(entry)]
                for entry in entries
            ],
        )
        self._fill_history()
        has_sources = any(
            e.get("task") in (*TRAIN_TASKS, QUANT_TASK) and e.get("status") == "done" for e in listed
        )
        self.empty_state.set_text(
            "Export a trained model to TorchScript, torch.export, ONNX (int8 QDQ from a quantize run) or "
            "TensorRT: its outputs are checked against PyTorch and, when they differ, the first diverging "
            "layer is named. Then benchmark it: latency percentiles, throughput and memory per backend and "
            "batch size."
            if has_sources
            else "Exports and benchmarks start from a trained model: train one in the Training tab first "
            "(Ctrl+T), then come back here. An exported file (.onnx, .pt2, .pt) can be benchmarked right "
            "away."
        )
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
        source = dig(spec, "source", "run", default="") or dig(spec, "source", "file", default="")
        summary = {
            "spec": spec,
            "source_run": dig(spec, "source", "run", default=""),
            "what_tooltip": f"{KIND_NAMES[entry['task']]} of {source or 'a model'}",
        }
        if entry["task"] == EXPORT_TASK:
            summary.update(export_summary(spec, report))
        else:
            summary.update(bench_summary(spec, report))
            summary["what_tooltip"] += summary.pop("what_details")
        if report.get("error") and entry.get("status") in ("failed", "cancelled"):
            summary["result"] = str(dig(report, "error", "message", default=""))
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
        self.bench_view.results = results if isinstance(results, BenchResults) else None
        if isinstance(results, ExportResults):
            self.detail.setCurrentWidget(self.export_view)
            self.export_view.show_results(results, self._live(results))
        elif isinstance(results, BenchResults):
            self.detail.setCurrentWidget(self.bench_view)
            self.bench_view.show_results(results, self._live(results), redraw_all=True)
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

    def _fill_history(self) -> None:
        self.bench_view.fill_history(self.runs, self.current.run_id if self.current is not None else "")

    def overlay_runs(self, run_ids: list[str]) -> None:
        """Tick these earlier benchmarks in History (and untick the others)."""
        self.bench_view.overlay_runs(run_ids)

    # -- starting jobs ---------------------------------------------------------------------------
    def export_wizard(self, source_run: str = "", start: dict | None = None) -> ExportWizard:
        """The export wizard on a training or quantize run (or, for an export run, on its spec: export again),
        or filled from `start`, a whole spec (File ▸ Open spec)."""
        entry = self.runs.get(source_run)
        if start is not None:
            start = copy.deepcopy(start)
        elif entry and entry["task"] == EXPORT_TASK and entry.get("spec"):
            start = copy.deepcopy(entry["spec"])
        return ExportWizard(
            self.source_runs(),
            source_run="" if start else source_run,
            start=start,
            device=self.default_device,
            parent=self,
        )

    def benchmark_wizard(self, source_run: str = "", start: dict | None = None) -> BenchWizard:
        """The benchmark wizard on a run: a training or quantize run is measured eagerly; an export run's file
        is measured beside its PyTorch model; a benchmark run's spec opens again; `start`, a whole spec, fills
        it."""
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
        start: dict = {
            "backends": ["eager", FORMAT_BACKENDS.get(fmt, "onnxruntime")],
            "device": spec.get("device", "cpu"),
        }
        source_run = dig(spec, "source", "run", default="")
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
        source = dig(data, "source", "run") or dig(data, "source", "file") or "a model"
        # Said before the record is taken: a record that has already ended says so after it, last.
        self.status_message.emit(f"{what} {source}…")
        self.on_job_changed(record)
        return record

    # -- live jobs -------------------------------------------------------------------------------
    def job_started(self, record: JobRecord, run_id: str | None) -> ExportResults | BenchResults:
        """An export or benchmark is shown as soon as it is submitted; its run folder comes a moment later."""
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
            self.bench_view.show_results(results, self._live(results))

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
            if task in TRAIN_TASKS:
                return run_id
            run_id = dig(spec, "source", "run", default="")
        return ""

    # -- buttons ---------------------------------------------------------------------------------
    def _update_buttons(self) -> None:
        run_id = self.selected_run_id()
        entry = self.runs.get(run_id or "")
        live = bool(run_id and run_id in self.job_of_run) or (
            self.current is not None and self._live(self.current)
        )
        self.stop_button.setEnabled(live)
        bench = self.current if isinstance(self.current, BenchResults) else None
        self.save_button.setEnabled(bench is not None and bool(bench.rows()))
        self.open_button.setEnabled(bool(entry))
        self.report_button.setEnabled(bool(entry) and bool(self.training_run_of(run_id)))
        report = self.report_path(run_id or "") if entry else None
        self.open_report_button.setEnabled(report is not None)
        self.open_report_button.setToolTip(
            str(report)
            if report is not None
            else "No report yet for this run's training run: Report… writes and opens it"
        )
        self.delete_button.setEnabled(bool(entry) and not live)

    def job_to_stop(self) -> str | None:
        """The job of the export or benchmark shown (it may not be listed yet), else the selected run's."""
        return self._job_of(self.current) or super().job_to_stop()

    def save_results(self, path: str | Path) -> bool:
        """Write the shown benchmark's rows to `path`: CSV for a .csv file, JSON otherwise."""
        return self.bench_view.save_results(path)

    def _on_report_clicked(self) -> None:
        training = self.training_run_of(self.selected_run_id() or "")
        if training:
            self.report_requested.emit(training)
        else:
            self.status_message.emit("This run does not come from a training run of this workspace")
        self._update_buttons()  # the report now exists: Open report

    def report_path(self, run_id: str) -> Path | None:
        """The HTML report written for `run_id`'s training run (its artifacts/report.html), if there is
        one."""
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
