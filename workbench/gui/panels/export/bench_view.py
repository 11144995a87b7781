"""The benchmark view of the Export & Benchmark tab: a benchmark's rows (latency percentiles, throughput,
memory) filling in live, its latency, distribution and throughput plots, earlier benchmarks overlaid in
History, its numbers saved as CSV or JSON, and a benchmark run's line in the runs list."""

from __future__ import annotations

from html import escape
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import WorkbenchError
from workbench.gui.panels.export.bench_plots import (
    HISTORY_EMPTY,
    DistributionView,
    LatencyPlot,
    ThroughputPlot,
    short_run_label,
)
from workbench.gui.panels.export.palette import FAILED
from workbench.gui.panels.export.results import BenchResults, format_ms
from workbench.gui.panels.export.results_table import BenchResultsTable
from workbench.results import BenchResult
from workbench.task_ids import BENCH_TASK

PLOT_TABS = ("Latency vs batch", "Distribution", "Throughput", "History")
RUN_DIR_ROLE = Qt.UserRole + 1  # a History item's run folder, read when it is ticked


def join_batches(values) -> str:
    return ", ".join(str(v) for v in values or [])


def bench_summary(spec: dict, report: dict) -> dict:
    """A benchmark run's What column and its tooltip's lines, and its Result: the fastest backend at the
    smallest batch size measured."""
    backends = spec.get("backends") or []
    batches = spec.get("batch_sizes")
    summary = {
        "what": f"bench · {len(backends)} × {len(batches or [])}",
        "what_details": f"\nbackends {', '.join(backends)}\nbatch sizes {join_batches(batches)}",
    }
    rows = [row.raw for row in BenchResult.from_dict(report).rows if row.measured and row.p50 is not None]
    if rows:
        batch = min(int(r.get("batch_size", 0)) for r in rows)
        best = min(
            (r for r in rows if int(r.get("batch_size", 0)) == batch), key=lambda r: r["latency_ms"]["p50"]
        )
        summary["result"] = f"{best['backend']} {format_ms(best['latency_ms']['p50'])} ms @{batch}"
    return summary


class BenchView(QWidget):
    """One benchmark shown (`show_results`) and earlier ones overlaid on it (`overlays`: run id -> them)."""

    status_message = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.results: BenchResults | None = None  # the benchmark shown; None while the tab shows an export
        self.overlays: dict[str, BenchResults] = {}  # run id -> an earlier benchmark ticked in History
        self.bench_summary = QLabel()
        self.bench_summary.setTextFormat(Qt.RichText)
        self.bench_summary.setWordWrap(True)
        self.results_table = BenchResultsTable()
        self.latency_plot = LatencyPlot()
        self.distribution = DistributionView()
        self.throughput_plot = ThroughputPlot()
        self.plots = QTabWidget()
        for widget, title in zip(
            (self.latency_plot, self.distribution, self.throughput_plot, self._build_history()), PLOT_TABS
        ):
            self.plots.addTab(widget, title)
        splitter = QSplitter(Qt.Vertical)
        splitter.addWidget(self.results_table)
        splitter.addWidget(self.plots)
        splitter.setSizes([270, 500])
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bench_summary)
        layout.addWidget(splitter, 1)
        self.results_table.row_selected.connect(self._on_row_selected)
        self.history_list.itemChanged.connect(self._on_history_changed)

    def _build_history(self) -> QSplitter:
        """History: the earlier benchmarks to tick beside the plot of their p50 latency."""
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
        return history

    # -- showing a benchmark -----------------------------------------------------------------------
    def show_results(self, results: BenchResults, live: bool, *, redraw_all: bool = False) -> None:
        """Show a benchmark, again as its rows arrive (the selected row stays; `redraw_all`: new here)."""
        self.results = results
        spec = results.spec
        source = escape(results.source_text() or "a model", quote=False)
        parts = [
            f"<b>{results.run_id or 'Starting…'}</b>",
            source,
            f"{', '.join(results.backends)} × batch {join_batches(results.batch_sizes)}",
            f"{spec.get('dtype', 'float32')} on {spec.get('device', 'cpu')}",
            f"{spec.get('iters', '?')} iterations after {spec.get('warmup', '?')} warm-up",
        ]
        if results.error:
            parts.append(f"<span style='color:{FAILED}'>{escape(results.error, quote=False)}</span>")
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
            self._on_row_selected(self.results_table.selected_row())
        elif self.distribution.row is None:  # the selected row had not been measured: it may be now
            self._on_row_selected(self.results_table.selected_row())

    def _on_row_selected(self, row: dict | None) -> None:
        if self.results is None or row is None:
            self.distribution.set_row(None, None)
            return
        self.distribution.set_row(row, self.results.samples_of(row))

    # -- history ---------------------------------------------------------------------------------
    def fill_history(self, runs: dict[str, dict], current: str) -> None:
        """List the finished benchmarks of `runs` but `current` (the run shown), keeping the ones ticked."""
        checked = set(self.overlays)
        self.history_list.blockSignals(True)
        self.history_list.clear()
        for run_id, entry in runs.items():
            if entry["task"] != BENCH_TASK or entry["status"] != "done" or run_id == current:
                continue
            item = QListWidgetItem(f"{short_run_label(run_id)}  {entry.get('what', '')}")
            item.setData(Qt.UserRole, run_id)
            item.setData(RUN_DIR_ROLE, entry["run_dir"])
            item.setToolTip(f"{run_id}\n{entry.get('result', '')}")
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if run_id in checked else Qt.Unchecked)
            self.history_list.addItem(item)
        self.history_list.blockSignals(False)
        for run_id in list(self.overlays):
            if run_id not in runs or run_id == current:
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
                self.overlays[run_id] = BenchResults.from_run(item.data(RUN_DIR_ROLE))
            except WorkbenchError as exc:
                self.status_message.emit(f"Cannot overlay {run_id}: {exc}")
                item.setCheckState(Qt.Unchecked)
                return
        else:
            self.overlays.pop(run_id, None)
        self._draw_history()

    def _draw_history(self) -> None:
        current = self.results
        earlier = [r for run_id, r in self.overlays.items() if current is None or run_id != current.run_id]
        if not earlier:
            self.history_plot.clear(HISTORY_EMPTY)
            return
        self.history_plot.set_results(current, earlier, band=False)

    # -- saving ----------------------------------------------------------------------------------
    def save_results(self, path: str | Path) -> bool:
        """Write the shown benchmark's rows to `path`: CSV for a .csv file, JSON otherwise."""
        bench = self.results
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

    def ask_and_save(self) -> None:
        """Save results…: ask where (CSV or JSON), then save."""
        bench = self.results
        if bench is None:
            return
        default = str(Path.home() / f"{bench.run_id or 'benchmark'}.csv")
        path, chosen = QFileDialog.getSaveFileName(
            self, "Save benchmark results", default, "CSV (*.csv);;JSON (*.json)"
        )
        if not path:
            return
        if not Path(path).suffix:
            path += ".json" if "json" in chosen.lower() else ".csv"
        self.save_results(path)
