"""The Quantization tab's Doctor view against a fake worker that speaks the real protocol: the findings worst
first, each cause's evidence plot with its data, Try fix and Apply all starting the right quantize runs, the
before and after of a run that applied a fix, the wizard's Doctor checkboxes and the empty state."""

from __future__ import annotations

import numpy as np
import pytest
from fake_doctor import OUTLIER_RANGES
from PySide6.QtCore import Qt
from test_quant_panel import _quantize, _trained_run

from workbench.gui.panels.quant.doctor_view import COLUMNS, DoctorView
from workbench.gui.panels.quant.wizard import QuantWizard
from workbench.runs import RunStore


@pytest.fixture
def trained(fake_window):
    return _trained_run(fake_window.workspace)


def _doctor_run(window, qtbot, trained, **fields):
    run_id = _quantize(window, qtbot, trained, doctor={"enabled": True, **fields})
    panel = window.quant_panel
    panel.plots.setCurrentWidget(panel.doctor)
    return run_id, panel, panel.doctor


def _row(table, row: int) -> list[str]:
    return [table.item(row, column).text() for column in range(table.columnCount())]


def _newest_job(window, before: int):
    jobs = window.manager.jobs.all()
    assert len(jobs) > before
    return max(jobs, key=lambda r: r.submitted)


def test_findings_are_listed_worst_first_with_their_gains(fake_window, qtbot, trained):
    _, panel, view = _doctor_run(fake_window, qtbot, trained)
    assert panel.plots.tabText(panel.plots.indexOf(view)) == "Doctor"
    assert view.pages.currentIndex() == 1
    assert [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())] == list(
        COLUMNS
    )
    assert view.table.rowCount() == 3
    assert _row(view.table, 0) == [
        "7.5",
        "features.0",
        "weight",
        "outlier channels",
        "cle",
        "+6.2 dB",
        "+0.40 pt",
    ]
    assert [_row(view.table, r)[1] for r in range(3)] == ["features.0", "features.2", "classifier"]
    assert _row(view.table, 2)[3:6] == ["mixed-range concat", "concat requant", "+1.2 dB"]
    assert "22.0 dB" in view.header.text() and "98.30%" in view.header.text()
    assert view.apply_button.isEnabled() and view.try_button.isEnabled()
    assert not view.applied_table.isVisibleTo(view)


def test_each_cause_draws_its_evidence(fake_window, qtbot, trained):
    _, _, view = _doctor_run(fake_window, qtbot, trained)
    plot = view.evidence.plot
    view.table.setCurrentCell(0, 0)  # outlier channels: a bar per channel, the widest red
    assert view.evidence.currentWidget() is plot and plot.kind == "channels"
    assert np.allclose(plot.values, OUTLIER_RANGES) and plot.highlighted == [3]
    assert "12.0×" in plot.title and view.tried.rowCount() == 2
    assert plot.plot.getAxis("bottom").labelText == "output channel"
    view.table.setCurrentCell(1, 0)  # clipping: the histogram with its two clip lines
    assert plot.kind == "histogram" and len(plot.values) == 32 and plot.clip_lines == [0.0, 3.5]
    assert "clipping 72%" in plot.title and "clipping range" in plot.legend_texts
    view.table.setCurrentCell(2, 0)  # the concat: a bar per input over [lo, hi], the narrow one red
    assert plot.kind == "inputs" and np.allclose(plot.values, [10.0, 0.5]) and plot.highlighted == [1]
    assert "95%" in plot.title
    ticks = plot.plot.getAxis("left")._tickLevels
    assert [name for _, name in ticks[0]] == ["features.2", "skip"]


def test_other_causes_show_their_numbers_and_bias_its_bars(qtbot):
    view = DoctorView()
    qtbot.addWidget(view)
    view.set_doctor(
        {
            "findings": [
                {
                    "id": "a:weight:relu6_blocks_cle",
                    "layer": "a",
                    "tensor": "weight",
                    "cause": "relu6_blocks_cle",
                    "evidence": {"pairs": [["a", "b"]]},
                    "fix": "relu6_to_relu",
                    "severity": 2.0,
                },
                {
                    "id": "b:activation:bias_shift",
                    "layer": "b",
                    "tensor": "activation",
                    "cause": "bias_shift",
                    "evidence": {"mean_error": [0.01, -0.3, 0.02], "worst_channel": 1, "worst": -0.3},
                    "fix": "bias_correction",
                    "severity": 1.0,
                },
            ]
        },
        done=True,
    )
    assert view.evidence.currentWidget() is view.evidence.table
    assert _row(view.evidence.table, 0) == ["pairs", "a – b"]
    assert view.select_finding("b")
    assert view.evidence.plot.kind == "bias" and view.evidence.plot.highlighted == [1]
    assert not view.select_finding("nowhere")


def test_try_fix_quantizes_again_with_that_fix_and_shows_before_and_after(fake_window, qtbot, trained):
    run_id, panel, view = _doctor_run(fake_window, qtbot, trained)
    view.table.setCurrentCell(2, 0)
    before = len(fake_window.manager.jobs.all())
    qtbot.mouseClick(view.try_button, Qt.LeftButton)
    started = _newest_job(fake_window, before)
    assert started.task == "quant.analyze"
    assert started.spec["doctor"]["fixes"] == ["classifier:concat_requant"]
    assert started.spec["doctor"]["enabled"] and started.spec["doctor"]["apply"]
    assert started.spec["source"]["run"] == trained
    qtbot.waitUntil(
        lambda: (
            panel.results is not None
            and panel.results.run_id != run_id
            and bool(panel.results.report.get("doctor"))
        ),
        timeout=15_000,
    )
    qtbot.waitUntil(lambda: view.applied_table.rowCount() == 1, timeout=5_000)
    assert view.applied_table.isVisibleTo(view)
    assert _row(view.applied_table, 0)[:2] == ["classifier", "concat_requant"]
    assert _row(view.applied_table, 0)[3] == "21.5 dB → 27.7 dB"
    assert "28.2 dB" in view.header.text() and "98.80%" in view.header.text()
    assert view.select_finding("classifier")
    assert "21.5 dB → <b>27.7 dB</b>" in view.result.text() and "98.30% → <b>98.80%</b>" in view.result.text()


def test_apply_all_asks_for_every_verified_fix(fake_window, qtbot, trained):
    _, _, view = _doctor_run(fake_window, qtbot, trained)
    before = len(fake_window.manager.jobs.all())
    qtbot.mouseClick(view.apply_button, Qt.LeftButton)
    started = _newest_job(fake_window, before)
    assert started.spec["doctor"]["apply"] and started.spec["doctor"]["enabled"]
    assert started.spec["doctor"]["fixes"] == []


def test_a_run_without_a_doctor_says_how_to_turn_it_on(fake_window, qtbot, trained):
    _quantize(fake_window, qtbot, trained)
    view = fake_window.quant_panel.doctor
    assert view.pages.currentWidget() is view.empty
    assert (
        "doctor.enabled=true" in view.empty.text()
        and "Doctor: diagnose after the ladder" in view.empty.text()
    )
    assert not view.apply_button.isEnabled()


def test_the_wizard_writes_the_doctor_fields(fake_window, qtbot, trained):
    wizard = QuantWizard(fake_window.quant_panel.training_runs(), parent=fake_window)
    qtbot.addWidget(wizard)
    form = wizard.pipeline_page.form
    enabled, apply = form.widgets["doctor.enabled"], form.widgets["doctor.apply"]
    assert enabled.text() == "Doctor: diagnose after the ladder" and apply.text() == "Apply verified fixes"
    assert not apply.isEnabled() and enabled.toolTip()
    enabled.setChecked(True)
    assert apply.isEnabled()
    apply.setChecked(True)
    spec = wizard.rebuild()
    assert spec.doctor.enabled and spec.doctor.apply


def test_the_graph_colours_the_findings_and_a_click_opens_one(fake_window, qtbot, trained):
    run_id, panel, view = _doctor_run(fake_window, qtbot, trained)
    assert panel.graph_button.isEnabled()
    qtbot.mouseClick(panel.graph_button, Qt.LeftButton)  # from the Doctor view: coloured by the findings
    graph = fake_window.graph_panel
    qtbot.waitUntil(
        lambda: graph.graph is not None and graph.graph.get("quant_run") == run_id, timeout=15_000
    )
    assert graph.overlay_combo.currentData() == "quant_doctor"
    assert graph.overlay_combo.currentText() == "Doctor findings (severity)"
    overlay = graph.graph["overlay_index"]["overlays"]["quant_doctor"]
    assert overlay["values"] == {"features.0": 7.5, "features.2": 3.1, "classifier": 1.4}
    assert overlay["doctor"] and overlay["quant_run"] == run_id and not overlay["higher_is_better"]
    view.table.setCurrentCell(0, 0)
    with qtbot.waitSignal(graph.doctor_finding_requested, timeout=2_000) as request:
        assert graph.select_module("features.2")  # a node picked (in the graph or its module table)
    assert request.args == [run_id, "features.2"]
    assert fake_window.current_panel() is panel and panel.plots.currentWidget() is view
    assert view.current_finding()["id"] == "features.2:activation:clipping"
    assert "Doctor findings (severity): 3.1" in graph.selection_value.text()


def test_a_click_on_a_concat_node_opens_its_finding(fake_window, qtbot, trained):
    """A finding about no module (a concat the doctor names by its trace) is painted on its op's node, and
    the overlay's index maps that node to the finding (node_findings, written by the worker's
    write_quant_overlays): Model Explorer's click on the node opens it."""
    run_id, panel, view = _doctor_run(fake_window, qtbot, trained)
    qtbot.mouseClick(panel.graph_button, Qt.LeftButton)
    graph = fake_window.graph_panel
    qtbot.waitUntil(
        lambda: graph.graph is not None and graph.graph.get("quant_run") == run_id, timeout=15_000
    )
    overlay = graph.graph["overlay_index"]["overlays"]["quant_doctor"]
    node = next(iter(graph.node_module))
    overlay["node_findings"] = {node: "classifier"}
    view.table.setCurrentCell(0, 0)
    with qtbot.waitSignal(graph.doctor_finding_requested, timeout=2_000) as request:
        graph.view.node_selected.emit(node)  # what Model Explorer's page sends on a click
    assert request.args == [run_id, "classifier"]
    assert view.current_finding()["id"] == "classifier:activation:mixed_range_concat"


def test_a_histogram_whose_merged_bins_repeat_the_last_edge_still_draws(qtbot):
    view = DoctorView()
    qtbot.addWidget(view)
    edges = list(np.linspace(-1.0, 1.0, 65)) + [1.0]  # 64 bins, the last edge twice
    view.set_doctor(
        {
            "findings": [
                {
                    "id": "c:weight:clipping",
                    "layer": "c",
                    "tensor": "weight",
                    "cause": "clipping",
                    "evidence": {
                        "clip_share": 0.6,
                        "round_share": 0.4,
                        "lo": -0.5,
                        "hi": 0.5,
                        "histogram": {"edges": edges, "counts": [1.0] * 64},
                    },
                    "fix": "mse_range",
                    "tried": [],
                    "gain": None,
                    "severity": 1.0,
                }
            ],
            "baseline": None,
            "applied": [],
            "skipped": "module-level quantization",
        }
    )
    plot = view.evidence.plot
    assert plot.kind == "histogram" and len(plot.values) == 64 and plot.clip_lines == [-0.5, 0.5]
    assert "module-level quantization" in view.header.text()
    assert _row(view.table, 0)[5:] == ["—", "—"] and "No fix measured a gain" in view.result.text()


def _qdq_export_run(workspace, quant_run: str, rows: list[dict], status: str = "done") -> str:
    """An ONNX QDQ export of `quant_run` on disk, as the export job writes it (format, quant_run, rows)."""
    with RunStore(workspace).create_run(
        "export", {"format": "onnx_qdq", "source": {"run": quant_run}}, task="export.model"
    ) as run:
        run.write_report({"format": "onnx_qdq", "quant_run": quant_run, "opset": 17, "by_module": rows})
        run.set_status(status)
        return run.id


BY_MODULE = [
    {
        "module": "features.3",
        "quantizers": ["features.3"],
        "codes": 4096,
        "codes_off": 300,
        "ties": 100,
        "worst_step": 3,
        "configuration": "deployed",
    },
    {
        "module": "classifier",
        "quantizers": ["classifier"],
        "codes": 640,
        "codes_off": 12,
        "ties": 12,
        "worst_step": 1,
        "configuration": "as written",
    },
]


def test_a_qdq_export_of_the_run_adds_its_backend_mismatches_and_table(fake_window, qtbot, trained):
    run_id, panel, view = _doctor_run(fake_window, qtbot, trained)
    assert view.table.rowCount() == 3
    assert "No ONNX QDQ export of this run yet" in view.backends_note.text()
    assert view.detail_tabs.tabText(1) == "Backends"
    # An export of another quant run, and a failed one of this run, are not this run's comparison.
    _qdq_export_run(fake_window.workspace, "some-other-run", BY_MODULE)
    _qdq_export_run(fake_window.workspace, run_id, BY_MODULE, status="failed")
    assert panel.open_run(run_id)
    assert view.table.rowCount() == 3
    export_id = _qdq_export_run(fake_window.workspace, run_id, BY_MODULE)
    assert panel.open_run(run_id)
    panel.plots.setCurrentWidget(view)
    # Only the module whose codes are off beyond rounding ties is a finding; it follows the dB-ranked ones.
    assert view.table.rowCount() == 4
    last = _row(view.table, 3)
    assert last[:4] == ["4.9 %", "features.3", "activation", "backend mismatch"]
    assert last[4] == "keep float"
    assert export_id in view.backends_note.text() and "<b>1</b>" in view.backends_note.text()
    table = view.backends_table.table
    view.detail_tabs.setCurrentIndex(1)
    assert view.backends_table.isVisibleTo(view) and table.rowCount() == 2
    modules = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(2)}
    assert modules == {"features.3": "300 of 4,096", "classifier": "12 of 640"}
    view.table.setCurrentCell(3, 0)
    assert "features.3" in view.summary.text() and "onnxruntime" in view.summary.text()
    evidence = view.evidence.table
    shown = {evidence.item(r, 0).text(): evidence.item(r, 1).text() for r in range(evidence.rowCount())}
    assert shown["codes off"] == "300" and shown["worst step"] == "3"
