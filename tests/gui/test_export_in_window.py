"""The Export & Benchmark tab in the window (fake worker): its tab and menu, runs opened from the Runs tab,
the diverging layer shown on the graph, and the model's HTML report written from the tab."""

from __future__ import annotations

from pathlib import Path

from workbench.runs import RunStore
from workbench.specs import ExportSpec


def _trained_run(workspace) -> str:
    with RunStore(workspace).create_run(
        "train",
        {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}},
        task="train.classifier",
    ) as run:
        run.write_report({"status": "done", "epochs_completed": 1, "final": {"test_accuracy": 0.97}})
        run.set_status("done")
        return run.id


def _export(window, qtbot, source: str) -> str:
    panel = window.export_panel
    record = panel.start_export(ExportSpec.from_dict({"source": {"run": source}}))
    qtbot.waitUntil(
        lambda: not window.manager.jobs.get(record.job_id).active and not panel.live, timeout=15_000
    )
    return Path(window.manager.jobs.get(record.job_id).run_dir).name


def test_the_tab_and_its_menu_are_there(fake_window):
    titles = [fake_window.tabs.tabText(i) for i in range(fake_window.tabs.count())]
    assert titles == ["Data", "Training", "Graph", "Quantization", "Export && Benchmark", "Runs"]
    menus = [action.text().replace("&", "") for action in fake_window.menuBar().actions()]
    assert "Export" in menus
    rows = dict((what, keys) for keys, what in fake_window.shortcut_rows())
    assert rows["Export ▸ New export…"] == "Ctrl+E" and rows["Export ▸ New benchmark…"] == "Ctrl+B"


def test_an_export_run_opens_from_the_runs_tab_and_the_report_is_written(fake_window, qtbot):
    train_id = _trained_run(fake_window.workspace)
    fake_window.show_tab(fake_window.export_panel)
    export_id = _export(fake_window, qtbot, train_id)
    fake_window.show_tab(fake_window.runs_panel)
    run_dir = str(fake_window.workspace / "runs" / export_id)
    fake_window._on_runs_open_requested(run_dir, "export.model")
    assert fake_window.current_panel() is fake_window.export_panel
    assert fake_window.export_panel.current.run_id == export_id
    fake_window.export_panel.report_requested.emit(train_id)
    report = fake_window.workspace / "runs" / train_id / "artifacts" / "report.html"
    assert report.is_file()
    text = report.read_text()
    assert train_id in text and "parity passed" in text


def test_the_diverging_layer_is_looked_up_on_the_graph(fake_window, qtbot):
    train_id = _trained_run(fake_window.workspace)
    fake_window.export_panel.graph_requested.emit(train_id, "features.2")
    assert fake_window.current_panel() is fake_window.graph_panel
    assert fake_window.graph_panel.search.text() == "features.2"
