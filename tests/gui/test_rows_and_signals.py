"""Tabular rows and 1-D signals in the window: the Data tab's table shows a signal as a small line beside its
target and a row's target before its features; a regression run's worst residuals list their input's values;
Try it draws a signal as lines and a row as bars with its values listed, and a regression sample's true value
beside the prediction, with no probability chart or top k. Inputs are described by the worker's own Describer;
the fake worker speaks the real protocol."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_worker import FakeWorker
from PySide6.QtGui import QPixmap

from workbench.client import WorkerManager
from workbench.gui.panels.data.input_plots import sample_lines
from workbench.gui.panels.data.user_table import SIGNAL_COLUMNS, SampleTableItemModel, columns_for
from workbench.gui.panels.training.evaluation_regression import RegressionEvaluationView
from workbench.gui.panels.try_it import TryItDialog
from workbench.gui.queries import QueryRunner
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.runs import RunStore
from workbench.worker.data.sequence_views import Describer


def _row(x: torch.Tensor) -> dict:
    return Describer(None).describe(x)


def _page_row(index: int, x: torch.Tensor, target: str) -> dict:
    return {
        "index": index,
        "sample": _row(x),
        "target": {"text": target},
        "inputs": [
            {
                "shape": list(x.shape),
                "dtype": "float32",
                "min": float(x.min()),
                "max": float(x.max()),
                "mean": float(x.mean()),
            }
        ],
    }


def test_the_data_table_draws_each_signal_beside_its_target(qtbot):
    wave = torch.sin(torch.linspace(0, 12.6, 128))[None]
    rows = [_page_row(0, wave, "sine"), _page_row(1, -wave, "square")]
    assert columns_for("signal", rows) == SIGNAL_COLUMNS and SIGNAL_COLUMNS[1:3] == ("signal", "target")
    model = SampleTableItemModel(queries=None)
    model._on_page(model._generation, {"rows": rows, "total": 2, "offset": 0, "input_kind": "signal"})
    assert model.columns == SIGNAL_COLUMNS
    picture = model.data(model.index(0, 1), 1)  # Qt.DecorationRole
    assert isinstance(picture, QPixmap) and not picture.isNull() and picture.width() > 100
    assert "128 steps" in model.data(model.index(0, 1), 3)  # Qt.ToolTipRole
    assert model.data(model.index(1, 2)) == "square"


def test_the_worst_signals_of_an_evaluation_are_drawn_in_their_input_cells(qtbot):
    from workbench.gui.panels.training.evaluation_rows import WorstRows

    table = WorstRows()
    qtbot.addWidget(table)
    wave = _row(torch.sin(torch.linspace(0, 12.6, 128))[None])
    table.show_worst(
        [{"split": "test", "index": 3, "label": 0, "predicted": 1, "confidence": 0.6, "sample": wave}],
        ["sine", "square"],
    )
    item = table.item(0, 4)
    assert not item.icon().isNull() and item.text().startswith("signal of 128 steps")
    assert table.iconSize().width() > 100


def test_a_tabular_table_puts_the_target_before_the_features():
    rows = [_page_row(0, torch.arange(12, dtype=torch.float32), "0.5")]
    assert columns_for("tabular", rows)[:3] == ("#", "target", "f0")


def test_a_row_of_features_is_listed_by_name():
    lines = sample_lines(_row(torch.tensor([1.5, -2.0, 0.25])))
    assert lines[0] == "a row of 3 features" and lines[1] == "f0 = 1.5 · f1 = -2 · f2 = 0.25"


def test_worst_residuals_of_rows_list_their_features(qtbot):
    view = RegressionEvaluationView()
    qtbot.addWidget(view)
    sample = _row(torch.tensor([0.875877, 1.064283, -0.809347]))
    view.show_evaluation(
        {
            "task": "regression",
            "split": "test",
            "scatter": [[1.3, -0.47]],
            "scatter_index": [42],
            "worst": [
                {
                    "split": "test",
                    "index": 42,
                    "target": 1.308,
                    "predicted": -0.467,
                    "residual": -1.775,
                    "sample": sample,
                }
            ],
            "outputs": 1,
        }
    )
    table = view.worst
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers == ["split", "index", "true", "predicted", "residual", "input"]
    assert table.item(0, 5).text().startswith("f0=0.876, f1=1.06, f2=-0.809")
    # An evaluation of images has no inputs to list: the column goes again.
    view.show_evaluation(
        {
            "task": "regression",
            "split": "test",
            "scatter": [],
            "outputs": 1,
            "worst": [{"split": "test", "index": 1, "target": 1.0, "predicted": 0.0, "residual": -1.0}],
        }
    )
    assert view.worst.columnCount() == 5


def _predict(spec, ctx):
    """predict.model on a user Dataset's sample: a signal (classification) or a row (regression)."""
    with RunStore(ctx.workspace).open_run(spec.source.run) as run:
        task = run.read_spec()["task"]
    info = {
        "kind": "sample",
        "split": spec.sample.split,
        "index": spec.sample.index,
        "note": "the input as the dataset's own code made it",
    }
    result = {
        "run": spec.source.run,
        "run_kind": "train",
        "model": "m",
        "dataset": "file:/p/data.py:D",
        "task": task,
        "top_k": spec.top_k,
        "device": "cpu",
        "input": info,
        "notes": [],
    }
    if task == "regression":
        info["sample"] = _row(torch.tensor([0.5, -1.25, 2.0]))
        result.update(
            truth={"value": 0.4134}, predictions=[{"index": 0, "label": "output 0", "value": 0.0657}]
        )
    else:
        info["sample"] = _row(torch.sin(torch.linspace(0, 12.6, 128))[None])
        result.update(
            truth={"value": 0, "class": 0, "label": "sine"},
            predictions=[
                {"class": 0, "label": "sine", "probability": 0.9, "logit": 2.0},
                {"class": 1, "label": "square", "probability": 0.1, "logit": 0.0},
            ],
        )
    return result


@pytest.fixture
def runs(qtbot, tmp_path):
    worker = FakeWorker(tmp_path)
    worker.replace_task("predict.model", _predict)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    workspace = tmp_path / "workspace"
    queries = QueryRunner(QtWorkerBridge(manager), workspace)
    manager.start(wait=False)
    qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
    ids = {}
    for task in ("regression", "classification"):
        with RunStore(workspace).create_run(
            "train", {"task": task, "dataset": {"name": "file:/p/data.py:D"}}, task="train.classifier"
        ) as run:
            run.set_status("done")
            ids[task] = run.id
    yield queries, workspace, ids
    manager.detach()
    worker.stop()


def _tried(qtbot, queries, workspace, run_id):
    dialog = TryItDialog(queries, workspace, run_id)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.view.sample_button.click()
    qtbot.waitUntil(lambda: dialog.view.result is not None, timeout=10_000)
    return dialog, dialog.view


def _drawn(plot) -> list:
    return [
        item for item in plot.plotItem.items if item.__class__.__name__ in ("PlotDataItem", "BarGraphItem")
    ]


def test_try_it_draws_a_row_as_bars_with_its_true_value_beside_the_prediction(qtbot, runs):
    queries, workspace, ids = runs
    dialog, view = _tried(qtbot, queries, workspace, ids["regression"])
    assert view.sample_plot.isVisibleTo(view) and not view.image.isVisibleTo(view)
    assert [item.__class__.__name__ for item in _drawn(view.sample_plot)] == ["BarGraphItem"]
    assert "f1 = -1.25" in view.input_note.text() and view.sample_plot.toolTip()
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert headers == ["#", "Output", "Value", "True"] and view.table.item(0, 3).text() == "0.4134"
    assert "true value <b>0.4134</b>" in view.verdict.text()
    assert not view.chart.isVisibleTo(view) and not view.top_k_spin.isVisibleTo(view)


def test_try_it_draws_a_signal_as_a_line(qtbot, runs):
    queries, workspace, ids = runs
    dialog, view = _tried(qtbot, queries, workspace, ids["classification"])
    assert view.sample_plot.isVisibleTo(view) and not view.image.isVisibleTo(view)
    lines = _drawn(view.sample_plot)
    assert len(lines) == 1 and len(lines[0].yData) == 128
    assert np.isclose(lines[0].yData.max(), 1.0, atol=0.01)
    assert view.seen.text() == "128 steps" and view.chart.isVisibleTo(view)
    assert "true label <b>sine</b>" in view.verdict.text()
