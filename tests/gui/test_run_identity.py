"""Runs read as "model · dataset · key metric · date" wherever one is picked (#21 part 6.2): Build from, the
quantize, export and bench wizards, the Runs tab's columns; the id in the tooltip; failed runs left out of
source lists; the Training tab's Run column sized to its ids."""

from __future__ import annotations

from datetime import datetime

from PySide6.QtCore import Qt

from workbench.gui.panels.export.bench_wizard import BenchWizard
from workbench.gui.panels.export.export_wizard import ExportWizard
from workbench.gui.panels.quant.wizard import QuantWizard
from workbench.gui.panels.runs_panel import COLUMNS
from workbench.gui.run_identity import format_date, identify
from workbench.runs import RunStore

MONITOR = {"name": "acc", "label": "accuracy", "higher_is_better": True, "best_val": 0.93, "test": 0.944}


def _train_run(workspace, status="done", model="torchvision:resnet18", dataset="fake", report=None) -> str:
    spec = {"epochs": 1, "model": {"name": model}, "dataset": {"name": dataset}}
    with RunStore(workspace).create_run("train", spec, task="train.classifier") as run:
        if report is not None:
            run.write_report(report)
        run.set_status(status, "model.name: net.py, line 3: SyntaxError" if status == "failed" else "")
        return run.id


def _quant_run(workspace, source: str) -> str:
    spec = {"source": {"run": source}, "weights": {"bits": 8}, "activations": {"bits": 8}}
    with RunStore(workspace).create_run("quant", spec, task="quant.analyze") as run:
        run.write_report({"status": "done", "quantized": {"accuracy": 0.939}})
        run.set_status("done")
        return run.id


def test_labels_name_model_dataset_key_metric_and_date():
    entry = {
        "id": "20261122-185213-train-3022eb",
        "task": "train.classifier",
        "status": "done",
        "created": "2026-11-22T18:52:13+00:00",
    }
    spec = {"model": {"name": "torchvision:resnet18"}, "dataset": {"name": "fake"}}
    identity = identify(entry, spec, {"monitor": MONITOR})
    assert identity.label == f"resnet18 · fake · acc 94.4 % · {format_date(entry['created'])}"
    assert entry["id"] in identity.tooltip and "test accuracy: acc 94.4 %" in identity.tooltip
    assert format_date(f"{datetime.now().year}-11-22T18:52:13") == "22 Nov 18:52"
    assert format_date("2001-11-22T18:52:13") == "22 Nov 2001"
    regression = identify(
        entry,
        {"model": {"name": "file:/x/net.py:Net"}, "dataset": {"name": "diabetes"}},
        {"monitor": {"name": "mae", "label": "MAE", "test": 41.234}},
    )
    assert regression.label.startswith("Net · diabetes · mae 41.23 · ")
    running = identify({**entry, "status": "running"}, spec, None, last={"val/acc": (40, 0.9)})
    assert running.metric == "acc 90.0 %" and "last validation accuracy" in running.tooltip
    quant = identify(
        {**entry, "task": "quant.analyze"},
        {"weights": {"bits": 8}, "activations": {"bits": 8}},
        {"quantized": {"accuracy": 0.939}},
        source=identity,
    )
    assert quant.label.startswith("resnet18 · fake · W8A8 acc 93.9 % · ")


def test_source_lists_show_labels_and_leave_failed_runs_out(fake_window, qtbot, settings):
    workspace = fake_window.workspace
    good = _train_run(workspace, report={"status": "done", "monitor": MONITOR})
    failed = _train_run(workspace, status="failed", model="file:/tmp/net.py:Net")
    quant = _quant_run(workspace, good)
    label = f"resnet18 · fake · acc 94.4 % · {format_date(RunStore(workspace).list_runs()[-1]['created'])}"

    graph = fake_window.graph_panel
    graph.refresh()
    combo = graph.source_combo
    # "Build from": the failed run is left out
    assert [combo.itemData(i) for i in range(combo.count())] == [good]
    assert combo.itemText(0) == label and good in combo.itemData(0, Qt.ToolTipRole)

    runs = fake_window.quant_panel.training_runs()
    wizard = QuantWizard(runs, settings=settings, parent=fake_window)
    qtbot.addWidget(wizard)
    combo = wizard.source_page.run
    assert [combo.itemText(i) for i in range(combo.count())] == [label]
    assert good in combo.itemData(0, Qt.ToolTipRole)

    runs = fake_window.export_panel.source_runs()
    assert failed not in {r["id"] for r in runs}
    for wizard in (ExportWizard(runs, source_run=good), BenchWizard(runs, start={"source": {"run": good}})):
        qtbot.addWidget(wizard)
        combo = wizard.source_page.run
        texts = {combo.itemData(i): combo.itemText(i) for i in range(combo.count())}
        assert texts[good] == label
        assert texts[quant].startswith("resnet18 · fake · W8A8 acc 93.9 % · ") and texts[quant].endswith(
            "quantize run"
        )
        assert quant in combo.itemData(combo.findData(quant), Qt.ToolTipRole)


def test_runs_tab_has_model_dataset_and_key_metric_columns(fake_window, qtbot):
    good = _train_run(fake_window.workspace, report={"status": "done", "monitor": MONITOR})
    panel = fake_window.runs_panel
    panel.refresh()
    keys = [key for key, _title in COLUMNS]
    row = next(r for r, run in enumerate(panel.model.runs) if run["id"] == good)
    cells = {
        key: panel.model.data(panel.model.index(row, keys.index(key)))
        for key in ("model", "dataset", "metric")
    }
    assert cells == {"model": "resnet18", "dataset": "fake", "metric": "acc 94.4 %"}
    assert good in panel.model.data(panel.model.index(row, keys.index("metric")), Qt.ToolTipRole)
    assert panel.model.headerData(keys.index("metric"), Qt.Horizontal) == "Key metric"
    panel.filter_edit.setText("resnet18")  # the filter reads the new columns too
    assert panel.proxy.rowCount() == 1


def test_the_training_tabs_run_column_fits_its_ids(fake_window, qtbot):
    workspace = fake_window.workspace
    ids = [
        _train_run(workspace, model="file:/home/someone/projects/very/long/path/models/net.py:Net")
        for _ in range(3)
    ]
    panel = fake_window.training_panel
    panel.refresh()
    fake_window.show_tab(panel)
    qtbot.wait(50)
    table = panel.table
    needed = max(table.fontMetrics().horizontalAdvance(run_id) for run_id in ids)
    assert table.columnWidth(1) >= needed and not table.wordWrap()
    model = table.item(0, 3)
    assert model.text() == "Net · fake" and "file:/home/someone" in model.toolTip()
