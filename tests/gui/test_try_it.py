"""Try it (#21 part 5): a PNG dropped on the view of a quantize run shows the FP32 and the W8A8 predictions
side by side, rows where they differ highlighted; a training run shows its one column; a dataset sample, the
Data tab's sample, errors and tooltips. The fake worker speaks the real protocol; the last test drops a real
PNG from the window's Quantization tab with the real worker subprocess."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import one_json, wb
from fake_worker import FakeWorker
from PIL import Image
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QComboBox, QProgressBar, QPushButton, QSpinBox, QTableWidget

from workbench.client import WorkerManager
from workbench.gui.panels.try_it import MISMATCH, TryItDialog, TryItView
from workbench.gui.queries import QueryRunner
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.runs import RunStore


def _runs(workspace) -> tuple[str, str]:
    store = RunStore(workspace)
    with store.create_run(
        "train",
        {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}},
        task="train.classifier",
    ) as run:
        run.set_status("done")
        train_id = run.id
    with store.create_run(
        "quant",
        {"source": {"run": train_id}, "weights": {"bits": 8}, "activations": {"bits": 8}},
        task="quant.analyze",
    ) as run:
        run.set_status("done")
        return train_id, run.id


@pytest.fixture
def harness(qtbot, tmp_path):
    worker = FakeWorker(tmp_path)
    seen: list[dict] = []
    canned = worker.kernel._task_overrides["predict.model"].fn
    worker.replace_task(
        "predict.model", lambda spec, ctx: (seen.append(spec.to_dict()), canned(spec, ctx))[1]
    )
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    workspace = tmp_path / "workspace"
    queries = QueryRunner(QtWorkerBridge(manager), workspace)
    manager.start(wait=False)
    qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
    train_id, quant_id = _runs(workspace)
    yield queries, workspace, train_id, quant_id, seen
    manager.detach()
    worker.stop()


def png(path, mode: str = "RGBA") -> str:
    image = np.zeros((8, 8, 4), dtype=np.uint8)
    image[2:6, 3:5] = 255
    Image.fromarray(image, "RGBA").convert(mode).save(path)
    return str(path)


def drop(widget, path: str) -> None:
    """A real drag and drop of a file URL, as a file manager sends it: enter, then drop."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    enter = QDragEnterEvent(widget.rect().center(), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(widget, enter)
    assert enter.isAccepted()
    event = QDropEvent(QPointF(widget.rect().center()), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(widget, event)


OPEN: list[TryItDialog] = []


@pytest.fixture(autouse=True)
def _forget_dialogs():
    yield
    OPEN.clear()


def view_of(qtbot, harness, run_id, data_sample=None) -> TryItView:
    queries, workspace, *_ = harness
    dialog = TryItDialog(queries, workspace, run_id, data_sample)
    qtbot.addWidget(dialog)
    dialog.show()
    OPEN.append(dialog)  # the view lives in the dialog: keep it alive for the test
    return dialog.view


def cells(view: TryItView) -> list[list[str]]:
    table = view.table
    return [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(table.rowCount())]


def headers(view: TryItView) -> list[str]:
    return [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]


def test_a_dropped_png_shows_fp32_and_w8a8_side_by_side(qtbot, harness, tmp_path):
    _, _, _, quant_id, seen = harness
    view = view_of(qtbot, harness, quant_id)
    assert "W8A8" in view.heading.text() and "FP32" in view.heading.text()
    path = png(tmp_path / "digit.png")
    drop(view, path)
    assert view.busy.isVisibleTo(view)  # busy while the worker answers
    qtbot.waitUntil(lambda: view.result is not None, timeout=10_000)
    assert not view.busy.isVisibleTo(view)
    assert seen[-1]["input"] == path and seen[-1]["source"]["run"] == quant_id and seen[-1]["preview"] is True
    assert headers(view) == ["#", "FP32 class", "FP32 probability", "W8A8 class", "W8A8 probability"]
    rows = cells(view)
    assert len(rows) == 5
    assert rows[0] == ["1", "3", "70.0%", "3", "70.0%"]
    assert [row[1] for row in rows] == ["3", "8", "5", "9", "2"] and [row[3] for row in rows] == [
        "3",
        "5",
        "8",
        "9",
        "2",
    ]
    # Ranks 2 and 3 name different classes: highlighted, with a tooltip that says so.
    assert view.mismatched_rows(view.series(view.result)) == [1, 2]
    for r in range(5):
        item = view.table.item(r, 3)
        assert (item.background().color() == MISMATCH) is (r in (1, 2))
    assert "differ" in view.table.item(1, 1).toolTip()
    assert "FP32 says <b>3</b>" in view.verdict.text() and "W8A8 says <b>3</b>" in view.verdict.text()
    assert "they agree" in view.verdict.text()
    # Bars: one series per model over the same classes; what the model saw and how the input was read.
    bars = [item for item in view.chart.plotItem.items if item.__class__.__name__ == "BarGraphItem"]
    assert [bar.opts["name"] for bar in bars] == ["FP32", "W8A8"]
    assert not view.image.pixmap().isNull() and not view.seen.pixmap().isNull()
    assert "digit.png" in view.input_note.text() and "alpha" in view.input_note.text()
    assert "normalised" in view.input_note.text()


def test_a_disagreement_and_an_error_say_so(qtbot, harness, tmp_path):
    _, _, _, quant_id, _ = harness
    view = view_of(qtbot, harness, quant_id)
    view.predict_file(png(tmp_path / "disagree.png", "L"))
    qtbot.waitUntil(lambda: view.result is not None, timeout=10_000)
    assert "they disagree" in view.verdict.text()
    assert view.table.item(0, 1).background().color() == MISMATCH
    view.predict_file(str(tmp_path / "missing.png"))
    qtbot.waitUntil(lambda: view.status.text().startswith("Could not predict"), timeout=10_000)
    assert "input: " in view.status.text() and "does not exist" in view.status.text()
    assert view.result is None and view.table.rowCount() == 0 and not view.busy.isVisibleTo(view)
    assert "not shown" in view.image.text()


def test_a_training_run_shows_one_column_and_a_sample_its_true_label(qtbot, harness):
    _, _, train_id, _, seen = harness
    view = view_of(qtbot, harness, train_id)
    view.split_combo.setCurrentIndex(view.split_combo.findData("val"))
    view.index_spin.setValue(7)
    view.top_k_spin.setValue(3)
    qtbot.mouseClick(view.sample_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: view.result is not None, timeout=10_000)
    assert (
        seen[-1]["sample"] == {"split": "val", "index": 7}
        and seen[-1]["top_k"] == 3
        and not seen[-1]["input"]
    )
    assert headers(view) == ["#", "Class", "Probability"] and len(cells(view)) == 3
    assert view.verdict.text().startswith("<b>3</b> (70.0%)") and "true label <b>3</b>" in view.verdict.text()
    assert "val #7" in view.input_note.text()
    assert not view.image.pixmap().isNull()  # a sample has no file: what the model saw is shown


def test_the_data_tab_sample_is_tried_when_it_is_the_run_dataset(qtbot, harness):
    _, _, train_id, _, seen = harness
    shown: dict = {}
    view = view_of(qtbot, harness, train_id, data_sample=lambda: dict(shown) or None)
    qtbot.mouseClick(view.data_tab_button, Qt.LeftButton)
    assert "Click a sample in the Data tab first" in view.status.text()
    shown.update(dataset={"name": "mnist"}, split="test", index=4)
    qtbot.mouseClick(view.data_tab_button, Qt.LeftButton)
    assert "The Data tab shows mnist, but this run was trained on digits" in view.status.text()
    shown.update(dataset={"name": "digits"})
    qtbot.mouseClick(view.data_tab_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: view.result is not None, timeout=10_000)
    assert seen[-1]["sample"] == {"split": "test", "index": 4}
    assert view.index_spin.value() == 4 and view.split_combo.currentData() == "test"


def test_every_control_has_a_tooltip(qtbot, harness):
    _, _, _, quant_id, _ = harness
    view = view_of(qtbot, harness, quant_id)
    controls = [
        w
        for kind in (QPushButton, QSpinBox, QComboBox, QTableWidget, QProgressBar)
        for w in view.window().findChildren(kind)
    ]
    assert len(controls) >= 9
    for widget in controls + [view.image, view.seen, view.chart, view.verdict, view.input_note]:
        assert widget.toolTip(), widget


@pytest.mark.slow
def test_the_real_worker_shows_fp32_and_w8a8_for_a_png_dropped_from_the_quantization_tab(
    qtbot, real_window, tmp_path
):
    from sklearn.datasets import load_digits

    window = real_window
    workspace = window.workspace
    # Trained and quantized by `workbench` in processes of their own: the GUI's process never loads torch (and
    # torch's triton beside QtWebEngine crashed it).
    trained = one_json(
        wb(
            tmp_path,
            "train",
            "--set",
            "model.name=cnn",
            "--set",
            "epochs=3",
            "--set",
            "lr=0.01",
            "--json",
            workspace=workspace,
            timeout=300,
        )
    )
    assert trained["status"] == "done", trained.get("error")
    quant = one_json(
        wb(
            tmp_path,
            "quantize",
            "--set",
            f"source.run={trained['run_dir']}",
            "--set",
            "calibration.samples=128",
            "--json",
            workspace=workspace,
            timeout=300,
        )
    )
    assert quant["status"] == "done", quant.get("error")
    quant_id = quant["run_dir"].rsplit("/", 1)[-1]
    # A PNG of a digit, as a user would save one (scikit-learn's digits are 0..16).
    path = tmp_path / "digit.png"
    Image.fromarray((load_digits().images[5] * (255 / 16)).round().astype("uint8"), "L").save(path)

    window.show_tab(window.quant_panel)
    panel = window.quant_panel
    panel.refresh()
    assert panel.select_run(quant_id)
    assert panel.try_it_button.isEnabled()
    qtbot.mouseClick(panel.try_it_button, Qt.LeftButton)
    dialog = window.try_it_dialog
    assert dialog.isVisible() and dialog.view.run.kind == "quantize"
    view = dialog.view
    drop(view, str(path))
    qtbot.waitUntil(lambda: view.result is not None or "Could not" in view.status.text(), timeout=60_000)
    assert view.result is not None, view.status.text()
    assert headers(view) == ["#", "FP32 class", "FP32 probability", "W8A8 class", "W8A8 probability"]
    rows = cells(view)
    assert len(rows) == 5 and all(row[1] in "0123456789" and row[3] in "0123456789" for row in rows)
    result = view.result
    assert result["run_kind"] == "quantize" and len(result["fp32"]) == len(result["quantized"]) == 5
    assert sum(r["probability"] for r in result["fp32"]) <= 1.0 + 1e-9
    assert "FP32 says" in view.verdict.text() and "W8A8 says" in view.verdict.text()
    assert result["input"]["size"] == [8, 8] and "digit.png" in view.input_note.text()
    # The training run's own Try it is one click away too.
    training = window.training_panel
    training.refresh()
    assert training.select_run(trained["run_dir"].rsplit("/", 1)[-1]) and training.try_it_button.isEnabled()
    dialog.close()
