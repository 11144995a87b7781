"""The Export & Benchmark tab against a fake worker that speaks the real protocol (tests/fake_export.py): the
wizards and their validation, an export's parity verdict and its diverging layer, a benchmark filling its
table and plots live, best and worst cells, the latency distribution, unavailable backends, cancel, saving CSV
and JSON, earlier runs overlaid, and finished runs opened again."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from fake_export import TENSORRT_REASON
from fake_worker import FakeWorker
from PySide6.QtCore import QObject, Qt

from workbench.client import WorkerManager
from workbench.gui.panels.export.bench_wizard import BenchWizard
from workbench.gui.panels.export.export_panel import ExportPanel
from workbench.gui.panels.export.export_wizard import ExportWizard
from workbench.gui.panels.export.results import BenchResults
from workbench.gui.panels.export.results_table import BEST, COLUMNS, FIRST_NUMERIC, WORST, best_and_worst
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.runs import RunStore
from workbench.specs import BenchSpec, ExportSpec

P50 = COLUMNS.index("p50 (ms)")
THROUGHPUT = COLUMNS.index("Throughput (/s)")


def _trained_run(workspace, model: str = "cnn") -> str:
    with RunStore(workspace).create_run(
        "train",
        {"epochs": 1, "model": {"name": model}, "dataset": {"name": "digits"}},
        task="train.classifier",
    ) as run:
        run.write_report({"status": "done", "epochs_completed": 1})
        run.set_status("done")
        return run.id


def _quant_run(workspace, source: str) -> str:
    with RunStore(workspace).create_run(
        "quant",
        {"source": {"run": source}, "weights": {"bits": 8}, "activations": {"bits": 8}},
        task="quant.analyze",
    ) as run:
        run.write_report({"status": "done", "layers": []})
        run.set_status("done")
        return run.id


class Harness(QObject):
    def __init__(self, tmp_path):
        super().__init__()
        self.worker = FakeWorker(tmp_path)
        self.manager = WorkerManager(connection_file=self.worker.connection_file, heartbeat_interval=0.2)
        self.bridge = QtWorkerBridge(self.manager, self)
        self.workspace = tmp_path / "workspace"
        self.manager.start(wait=True)
        self.panel = ExportPanel(
            self.workspace, lambda task, spec: self.manager.submit(task, spec, self.workspace)
        )
        self.bridge.job_changed.connect(self.panel.on_job_changed)
        self.bridge.message_received.connect(self.panel.on_message)
        self.panel.cancel_requested.connect(self.manager.cancel)
        self.messages: list[str] = []
        self.panel.status_message.connect(self.messages.append)

    def close(self):
        self.manager.shutdown()
        self.worker.stop()


@pytest.fixture
def harness(qtbot, tmp_path):
    h = Harness(tmp_path)
    qtbot.addWidget(h.panel)
    h.panel.resize(1400, 850)
    h.panel.show()
    yield h
    h.close()


@pytest.fixture
def trained(harness):
    return _trained_run(harness.workspace)


def _finish(qtbot, harness, record) -> str:
    """Wait until the job ended and the panel shows its run read back; returns the run id."""
    panel = harness.panel

    def shown() -> bool:
        now = harness.manager.jobs.get(record.job_id)
        return (
            not now.active
            and not panel.live
            and panel.current is not None
            and panel.current.run_id == Path(now.run_dir or "").name
        )

    qtbot.waitUntil(shown, timeout=60_000)  # a job's start alone took seconds on two busy cores
    return panel.current.run_id


def _bench(qtbot, harness, source: str, **fields) -> str:
    data = {
        "source": {"run": source},
        "backends": ["eager", "onnxruntime", "tensorrt"],
        "batch_sizes": [1, 8],
        "iters": 60,
        **fields,
    }
    return _finish(qtbot, harness, harness.panel.start_benchmark(BenchSpec.from_dict(data)))


def _export(qtbot, harness, source: str, **fields) -> str:
    data = {"source": {"run": source}, **fields}
    return _finish(qtbot, harness, harness.panel.start_export(ExportSpec.from_dict(data)))


# -- the empty tab and the wizards ---------------------------------------------------------------------------
def test_the_empty_tab_says_what_to_do_first(harness):
    panel = harness.panel
    assert panel.pages.currentWidget() is panel.empty_state
    assert "train one in the Training tab first" in panel.empty_text.text()
    assert not panel.empty_export_button.isEnabled() and panel.empty_bench_button.isEnabled()
    _trained_run(harness.workspace)
    panel.refresh()
    assert panel.empty_export_button.isEnabled() and "first diverging layer" in panel.empty_text.text()


def test_export_wizard_matches_format_to_source_and_validates_each_field(harness, qtbot, trained):
    quant = _quant_run(harness.workspace, trained)
    runs = harness.panel.source_runs()
    assert {r["id"]: r["task"] for r in runs} == {trained: "train.classifier", quant: "quant.analyze"}
    wizard = ExportWizard(runs, source_run=trained, device="cuda:0")
    qtbot.addWidget(wizard)
    spec = wizard.spec
    assert (spec.source.run, spec.format, spec.device, spec.verify) == (trained, "onnx", "cuda:0", True)
    # Options that do not apply to the format are greyed out, with the reason.
    assert not wizard.form.widgets["script"].isEnabled() and not wizard.form.widgets["precision"].isEnabled()
    wizard.form.set_value("format", "torchscript")
    assert wizard.form.widgets["script"].isEnabled() and not wizard.form.widgets["opset"].isEnabled()
    # onnx_qdq needs a quantize run: named under the format field, and Export is blocked.
    wizard.form.set_value("format", "onnx_qdq")
    assert wizard.spec is None and "quantize run" in wizard.form.errors["format"]
    assert not wizard.options_page.isComplete()
    # Picking the quantize run switches the format to onnx_qdq, which is then valid.
    wizard.source_page.run.setCurrentIndex(wizard.source_page.run.findData(quant))
    assert wizard.spec is not None and wizard.spec.format == "onnx_qdq" and wizard.spec.source.run == quant
    # A bad value is named under its own field.
    wizard.form.widgets["opset"].setValue(7)
    wizard.form.widgets["device"].setText("gpu")
    assert wizard.spec is None and "device" in wizard.form.errors and wizard.error.startswith("Fix this")
    wizard.form.widgets["device"].setText("cpu")
    assert wizard.spec.device == "cpu" and wizard.spec.opset == 7


def test_export_wizard_without_runs_cannot_export(qtbot):
    wizard = ExportWizard([])
    qtbot.addWidget(wizard)
    assert wizard.spec is None and not wizard.source_page.isComplete()
    assert wizard.source_page.empty.isVisibleTo(wizard.source_page)


def test_bench_wizard_backends_batches_and_a_file_source(harness, qtbot, trained, tmp_path):
    runs = harness.panel.source_runs()
    wizard = BenchWizard(runs, start={"source": {"run": trained}}, device="cpu")
    qtbot.addWidget(wizard)
    spec = wizard.spec
    assert spec.source.run == trained and spec.backends == ["eager"] and spec.batch_sizes == [1, 8, 32]
    page = wizard.backends_page
    page.backends["onnxruntime"].setChecked(True)
    page.form.widgets["batch_sizes"].setText("1,4,0")
    assert wizard.spec is None and "batch_sizes" in page.form.errors and not page.isComplete()
    page.form.widgets["batch_sizes"].setText("1,4,64")
    page.form.widgets["iters"].setValue(500)
    assert wizard.spec.backends == ["eager", "onnxruntime"] and wizard.spec.batch_sizes == [1, 4, 64]
    assert wizard.spec.iters == 500
    page.set_chosen([])
    assert wizard.spec is None and "at least one backend" in page.backend_error.text()
    page.set_chosen(["onnxruntime"])
    # An exported file instead of a run.
    model = tmp_path / "model.onnx"
    model.write_bytes(b"onnx")
    wizard.source_page.from_file.setChecked(True)
    assert wizard.spec is None  # no file named yet
    wizard.source_page.file.setText(str(model))
    wizard.source_page.file_form.widgets["model.input_shape"].setText("1,12,12")
    spec = wizard.spec
    assert (spec.source.run, spec.source.file, spec.artifact, spec.model.input_shape) == (
        "",
        str(model),
        "",
        [1, 12, 12],
    )


# -- exports -------------------------------------------------------------------------------------------------
def test_a_passing_export_is_green_with_its_numbers(harness, qtbot, trained):
    panel = harness.panel
    run_id = _export(qtbot, harness, trained, format="onnx")
    assert panel.detail.currentWidget() is panel.export_page and panel.selected_run_id() == run_id
    assert (
        panel.verdict.text().startswith("Parity passed")
        and panel.verdict.property("verdict_colour") == "#2e9d4a"
    )
    assert "2.4e-06" in panel.verdict_detail.text() and "tolerance 0.0001" in panel.verdict_detail.text()
    assert not panel.diverging_box.isVisibleTo(panel)
    assert panel.artifact_labels["File"].text().endswith("artifacts/model.onnx")
    assert panel.artifact_labels["Accuracy"].text().startswith("the PyTorch model's")  # not a bare dash
    assert panel.parity_plot.values == {"max_abs_diff": 2.4e-06, "max_rel_diff": 8.1e-06}
    assert panel.parity_plot.tolerance == 1e-4
    assert panel.runs[run_id]["result"].startswith("✓ parity")


def test_a_qdq_export_shows_its_steps_as_deployed_and_as_written(harness, qtbot, trained):
    panel = harness.panel
    _export(qtbot, harness, trained, format="onnx_qdq")
    detail = panel.verdict_detail.text()
    assert panel.verdict.text().startswith("Parity passed")
    assert "as deployed: 2 of 5 steps, 3 rounding flips" in detail and "as written: 2 of 5 steps" in detail
    assert "codes off" not in detail
    assert "rounding flips moved the output" in panel.verdict_detail.toolTip()


def test_a_failing_export_is_red_and_names_the_layer_for_the_graph(harness, qtbot):
    panel = harness.panel
    broken = _trained_run(harness.workspace, "file:/models/broken_net.py:Net")
    _export(qtbot, harness, broken, format="onnx")
    assert (
        panel.verdict.text().startswith("Parity failed")
        and panel.verdict.property("verdict_colour") == "#d0342c"
    )
    assert panel.diverging_box.isVisibleTo(panel) and "features.2" in panel.diverging_label.text()
    exporter = panel.artifact_labels["Exporter"]
    assert exporter.text().startswith("torchscript (fallback: data-dependent control flow in forward)")
    assert "Control flow on tensor values was frozen by tracing" in exporter.text()
    assert exporter.toolTip().startswith("forward() has data-dependent control flow")
    with qtbot.waitSignal(panel.graph_requested) as signal:
        panel.diverging_button.click()
    assert signal.args == [broken, "features.2"]


def test_an_export_without_the_check_says_it_was_not_verified(harness, qtbot, trained):
    panel = harness.panel
    run_id = _export(qtbot, harness, trained, format="torchscript", verify=False)
    assert (
        panel.verdict.text() == "Exported, not verified"
        and panel.verdict.property("verdict_colour") == "#8a8f98"
    )
    assert not panel.parity_plot.isVisibleTo(panel) and not panel.diverging_box.isVisibleTo(panel)
    assert (
        panel.artifact_labels["File"].text().endswith("model.pt")
        and "not verified" in panel.runs[run_id]["result"]
    )
    assert panel.artifact_labels["Accuracy"].text().startswith("not measured: only onnx_qdq")


def test_a_failed_export_says_why(harness, qtbot, trained):
    panel = harness.panel
    messages = []
    panel.status_message.connect(messages.append)
    run_id = _export(qtbot, harness, trained, format="tensorrt")
    assert messages[0].startswith("Exporting") and "failed" in messages[-1]  # not "Exporting…" to the end
    assert panel.runs[run_id]["status"] == "failed"
    assert (
        panel.verdict.text() == "Export failed"
        and "TensorRT is not available here" in panel.verdict_detail.text()
    )
    assert not panel.progress_box.isVisible() and not panel.artifact_box.isVisibleTo(panel)
    assert "TensorRT is not available here" in panel.runs[run_id]["result"]


# -- benchmarks ----------------------------------------------------------------------------------------------
def test_a_benchmark_fills_the_table_live_then_draws_a_curve_per_backend(harness, qtbot, trained):
    panel = harness.panel
    # dataset.seed is the fake benchmark's pause per row in ms: long enough that the window sees it mid-run
    # even when a job's start is slow (seconds on a busy disk) and its rows are not.
    spec = BenchSpec.from_dict(
        {
            "source": {"run": trained},
            "backends": ["eager", "onnxruntime", "tensorrt"],
            "batch_sizes": [1, 8],
            "iters": 60,
            "dataset": {"seed": 1500},
        }
    )
    record = panel.start_benchmark(spec)
    qtbot.waitUntil(lambda: panel.current is not None and len(panel.current.live_rows) >= 2, timeout=10_000)
    # Mid-run: measured rows filled in, the rest waiting, the progress bar up.
    statuses = [panel.results_table.item(r, 3).text() for r in range(panel.results_table.rowCount())]
    assert panel.results_table.rowCount() == 6 and "done" in statuses and "waiting…" in statuses
    assert panel.progress_box.isVisible() and panel.stop_button.isEnabled()
    assert set(panel.latency_plot.curves) <= {"eager", "onnxruntime"} and panel.latency_plot.curves
    run_id = _finish(qtbot, harness, record)
    results = panel.current
    assert (
        isinstance(results, BenchResults) and results.run_id == run_id and not panel.progress_box.isVisible()
    )
    assert set(results.samples) == {"eager/1", "eager/8", "onnxruntime/1", "onnxruntime/8"}
    assert set(panel.latency_plot.curves) == {"eager", "onnxruntime"} == set(panel.throughput_plot.bars)
    assert set(panel.latency_plot.bands) == {"eager", "onnxruntime"}
    x, y = panel.latency_plot.curves["eager"].getOriginalDataset()
    report = {f"{r['backend']}/{r['batch_size']}": r for r in results.report["results"]}
    assert list(x) == [1.0, 8.0] and y[1] == pytest.approx(report["eager/8"]["latency_ms"]["p50"])
    # The table shows the report's numbers.
    table = panel.results_table
    row = next(
        r
        for r in range(table.rowCount())
        if table.item(r, 0).text() == "onnxruntime" and table.item(r, 1).text() == "8"
    )
    assert float(table.item(row, P50).text()) == pytest.approx(
        report["onnxruntime/8"]["latency_ms"]["p50"], rel=5e-3
    )
    # TensorRT could not run: its rows are greyed, the reason in the tooltip, no numbers.
    unavailable = [r for r in range(table.rowCount()) if table.item(r, 0).text() == "tensorrt"]
    assert len(unavailable) == 2
    for r in unavailable:
        assert table.item(r, 3).text() == "unavailable" and table.item(r, P50).text() == "—"
        assert TENSORRT_REASON in table.item(r, 0).toolTip() and table.item(r, 0).font().italic()
        assert table.item(r, 0).foreground().color().name() == "#8a8f98"


def test_best_cells_are_green_and_worst_red_per_batch_size(harness, qtbot, trained):
    panel = harness.panel
    _bench(qtbot, harness, trained)
    table = panel.results_table
    cells = {(table.item(r, 0).text(), table.item(r, 1).text()): r for r in range(table.rowCount())}
    for batch in ("1", "8"):
        # the fake's onnxruntime is faster
        fast, slow = cells[("onnxruntime", batch)], cells[("eager", batch)]
        assert table.mark(fast, P50) == "best" and table.mark(slow, P50) == "worst"
        assert table.mark(fast, THROUGHPUT) == "best" and table.mark(slow, THROUGHPUT) == "worst"
        assert table.item(fast, P50).background().color() == BEST
        assert table.item(slow, THROUGHPUT).background().color() == WORST
        assert table.mark(cells[("tensorrt", batch)], P50) == ""  # not measured: never best or worst
    # One backend: compared across batch sizes; equal values mark nothing.
    rows = [
        {
            "backend": "eager",
            "batch_size": b,
            "status": "done",
            "latency_ms": {"p50": p},
            "throughput_per_s": 5.0,
            "peak_memory_bytes": 7,
        }
        for b, p in ((1, 0.5), (8, 2.0), (64, 9.0))
    ]
    marks = best_and_worst(rows)
    assert marks[(0, FIRST_NUMERIC)] == "best" and marks[(2, FIRST_NUMERIC)] == "worst"
    assert (1, FIRST_NUMERIC) not in marks and not any(c == THROUGHPUT for _, c in marks)


def test_a_rows_distribution_is_a_histogram_and_a_monotone_cdf_with_percentiles(harness, qtbot, trained):
    panel = harness.panel
    _bench(qtbot, harness, trained, iters=120)
    table = panel.results_table
    row = next(
        r
        for r in range(table.rowCount())
        if table.item(r, 0).text() == "eager" and table.item(r, 1).text() == "8"
    )
    table.selectRow(row)
    samples = panel.current.samples["eager/8"]
    cdf, histogram = panel.distribution.cdf, panel.distribution.histogram
    assert panel.distribution.row["batch_size"] == 8 and "eager, batch 8" in cdf.title
    assert len(cdf.cdf_x) == 120 and np.all(np.diff(cdf.cdf_x) >= 0) and np.all(np.diff(cdf.cdf_y) > 0)
    assert cdf.cdf_y[-1] == pytest.approx(1.0)
    for name, level in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        value, share = cdf.markers[name]
        assert share == level and value == pytest.approx(np.percentile(samples, level * 100))
        assert histogram.markers[name] == pytest.approx(value)
    assert int(histogram.counts.sum()) == 120
    # An unavailable row says why instead of plotting.
    table.selectRow(next(r for r in range(table.rowCount()) if table.item(r, 0).text() == "tensorrt"))
    assert cdf.is_empty and TENSORRT_REASON in cdf.message


def test_cancel_stops_a_benchmark_and_says_so(harness, qtbot, trained):
    panel = harness.panel
    # dataset.seed: the fake benchmark's pause per row in ms (3 s: the cancel lands before the last row even
    # when the window sees the first one late)
    spec = BenchSpec.from_dict(
        {
            "source": {"run": trained},
            "backends": ["eager"],
            "batch_sizes": [1, 2, 4, 8, 16],
            "iters": 20,
            "dataset": {"seed": 3000},
        }
    )
    record = panel.start_benchmark(spec)
    qtbot.waitUntil(lambda: panel.current is not None and len(panel.current.live_rows) >= 1, timeout=10_000)
    with qtbot.waitSignal(panel.cancel_requested) as signal:
        panel.cancel_button.click()
    assert signal.args == [record.job_id]
    run_id = _finish(qtbot, harness, record)
    assert harness.manager.jobs.get(record.job_id).state == "cancelled"
    assert panel.runs[run_id]["status"] == "cancelled" and "cancel" in panel.bench_summary.text()
    # The rows measured before the cancel are kept (artifacts/results.json) and shown.
    measured = panel.results_table.rowCount()
    assert 1 <= measured < 5 and all(panel.results_table.item(r, 3).text() == "done" for r in range(measured))
    assert not panel.stop_button.isEnabled() and panel.delete_button.isEnabled()


def test_save_results_writes_the_numbers_as_csv_and_json(harness, qtbot, trained, tmp_path):
    panel = harness.panel
    _bench(qtbot, harness, trained)
    report = panel.current.report["results"]
    assert panel.save_button.isEnabled()
    assert panel.save_results(tmp_path / "bench.csv")
    with open(tmp_path / "bench.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["backend"], int(r["batch_size"])) for r in rows] == [
        (r["backend"], r["batch_size"]) for r in report
    ]
    eager = next(r for r in rows if r["backend"] == "eager" and r["batch_size"] == "1")
    expected = next(r for r in report if r["backend"] == "eager" and r["batch_size"] == 1)
    assert float(eager["p50_ms"]) == expected["latency_ms"]["p50"]
    assert float(eager["throughput_per_s"]) == expected["throughput_per_s"]
    assert int(eager["peak_memory_bytes"]) == expected["peak_memory_bytes"]
    tensorrt = next(r for r in rows if r["backend"] == "tensorrt")
    assert (
        tensorrt["status"] == "unavailable"
        and tensorrt["p50_ms"] == ""
        and TENSORRT_REASON in tensorrt["reason"]
    )
    assert panel.save_results(tmp_path / "bench.json")
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["run_id"] == panel.current.run_id and data["results"] == report
    assert "Saved 6 rows" in harness.messages[-1]


def test_history_overlays_earlier_benchmarks_as_dashed_lines(harness, qtbot, trained):
    panel = harness.panel
    first = _bench(qtbot, harness, trained, backends=["eager"], dtype="float16")
    second = _bench(qtbot, harness, trained, backends=["eager", "onnxruntime"])
    assert panel.current.run_id == second
    listed = [panel.history_list.item(i).data(Qt.UserRole) for i in range(panel.history_list.count())]
    assert listed == [first]  # the run shown is not its own history
    assert panel.history_plot.is_empty
    panel.overlay_runs([first])
    plot = panel.history_plot
    assert [(run, backend) for run, backend, _ in plot.overlay_curves] == [(first, "eager")]
    assert plot.overlay_curves[0][2].opts["pen"].style() == Qt.DashLine
    assert set(plot.curves) == {"eager", "onnxruntime"} and not plot.bands


def test_finished_runs_open_again_in_a_new_panel_and_report_asks_for_the_training_run(
    harness, qtbot, trained
):
    bench = _bench(qtbot, harness, trained)
    export = _export(qtbot, harness, trained)
    panel = ExportPanel(harness.workspace, lambda task, spec: None)
    qtbot.addWidget(panel)
    messages = []
    panel.status_message.connect(messages.append)
    assert panel.open_run(bench) and isinstance(panel.current, BenchResults)
    assert panel.detail.currentWidget() is panel.bench_page and panel.results_table.rowCount() == 6
    assert set(panel.current.samples) == {"eager/1", "eager/8", "onnxruntime/1", "onnxruntime/8"}
    assert panel.distribution.row is not None and len(panel.distribution.cdf.cdf_x) == 60
    with qtbot.waitSignal(panel.report_requested) as signal:
        panel.report_button.click()
    assert signal.args == [trained]
    assert panel.open_run(export) and panel.detail.currentWidget() is panel.export_page
    assert not panel.open_run(trained) and "not an export or benchmark run" in messages[-1]
    # "Benchmark this export…" opens the wizard on the export's file beside its PyTorch model.
    wizard = panel.benchmark_wizard(export)
    qtbot.addWidget(wizard)
    assert wizard.spec.source.run == trained and wizard.spec.artifact.endswith("model.onnx")
    assert wizard.spec.backends == ["eager", "onnxruntime"]


# -- the results model on its own ----------------------------------------------------------------------------
def test_rows_computed_from_bare_samples_and_read_back_in_the_engines_format(tmp_path):
    results = BenchResults(spec={"backends": ["eager", "tensorrt"], "batch_sizes": [4], "dtype": "float16"})
    samples = np.array([1.0, 2.0, 3.0, 4.0, 10.0])
    assert results.add_array("bench/eager/4:samples", samples, {}) == "eager/4"
    assert results.add_array("quant/ladder", samples, {}) is None
    row = results.rows(pending=True)[0]
    assert row["latency_ms"]["p50"] == 3.0 and row["latency_ms"]["min"] == 1.0 and row["dtype"] == "float16"
    assert row["throughput_per_s"] == pytest.approx(4 * 1000 / 3.0)  # at the median
    assert results.rows(pending=True)[1]["status"] == "pending"
    # A run as the worker's engine leaves it when cancelled: rows in samples.npz's __rows__ (status "ok").
    run = tmp_path / "20250301-142233-bench-abc123"
    (run / "artifacts").mkdir(parents=True)
    (run / "report.json").write_text(
        json.dumps({"status": "cancelled", "error": {"message": "cancelled by the user"}})
    )
    (run / "spec.toml").write_text('backends = ["eager"]\nbatch_sizes = [1]\n')
    rows = [
        {"backend": "eager", "batch_size": 1, "status": "ok", "latency_ms": {"p50": 2.0, "p90": 3.0}},
        {
            "backend": "tensorrt",
            "batch_size": 1,
            "status": "unavailable",
            "reason": "no CUDA",
            "latency_ms": None,
        },
    ]
    np.savez(
        run / "artifacts" / "samples.npz",
        **{"eager/1": np.array([2.0, 3.0])},
        __rows__=np.asarray(json.dumps(rows)),
    )
    read = BenchResults.from_run(run)
    assert read.error == "cancelled by the user" and list(read.samples) == ["eager/1"]
    assert [r["backend"] for r in read.rows()] == ["eager", "tensorrt"] and len(read.done_rows()) == 1
    marks = best_and_worst(read.rows())
    assert not marks  # one measured row: nothing to compare


def test_a_peak_memory_of_zero_is_not_measured_rather_than_the_best():
    rows = [
        {
            "backend": b,
            "batch_size": 1,
            "status": "done",
            "latency_ms": {"p50": p50},
            "peak_memory_bytes": mem,
        }
        for b, p50, mem in (("eager", 2.0, 4096), ("onnxruntime", 1.0, 8192), ("onnxruntime_int8", 0.5, 0))
    ]
    memory = COLUMNS.index("Peak memory")
    marks = best_and_worst(rows)
    assert marks[(0, memory)] == "best" and marks[(1, memory)] == "worst" and (2, memory) not in marks


def test_a_peak_memory_not_measured_says_so_in_the_cell_and_why_on_hover(qtbot):
    from workbench.gui.panels.export.results_table import BenchResultsTable

    rows = [
        {
            "backend": b,
            "batch_size": 8,
            "status": "ok",
            "device": device,
            "latency_ms": {"p50": p50},
            "peak_memory_bytes": mem,
        }
        for b, device, p50, mem in (
            ("eager", "cpu", 2.0, 20480),
            ("onnxruntime_int8", "cpu", 0.5, 0),
            ("onnxruntime", "cuda:0", 0.4, 0),
            ("torchscript", "cpu", 1.0, None),
        )
    ]
    rows.append({"backend": "tensorrt", "batch_size": 8, "status": "unavailable", "reason": "no CUDA"})
    table = BenchResultsTable()
    qtbot.addWidget(table)
    table.set_rows(rows)
    memory = COLUMNS.index("Peak memory")
    texts = [table.item(r, memory).text() for r in range(len(rows))]
    assert texts == ["20.0 KiB", "not measured", "not measured", "not measured", "—"]
    # The reason is on hover: the CPU probe saw no growth, torch's CUDA counter misses another allocator, no
    # probe.
    assert "resident memory did not grow" in table.item(1, memory).toolTip().replace("\n", " ")
    assert "its own allocator" in table.item(2, memory).toolTip().replace("\n", " ")
    assert "no probe" in table.item(3, memory).toolTip().replace("\n", " ")
    assert table.item(1, memory).font().italic() and not table.item(0, memory).font().italic()
    assert table.item(1, P50).text() == "0.5"  # the row's other numbers are measured and shown as ever
    assert table.mark(1, memory) == "" and table.mark(0, memory) == ""  # nothing to compare 20 KiB against
