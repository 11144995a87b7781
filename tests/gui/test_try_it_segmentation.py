"""Try it on a segmentation run: the view draws the predicted mask over the image in the segmentation
evaluation's class colours with a legend, the true mask beside it for a sample, FP32 beside quantized for a
quantize run, and a table of each class's pixels and IoU; the Training tab's Try it button is enabled on a
finished segmentation run. The fake worker speaks the real protocol (masks travel as raw uint8 buffers) and
answers with the worker's own mask code (workbench.worker.predict_masks) on canned scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fake_worker import FakeWorker
from PySide6.QtWidgets import QLabel

from workbench.client import WorkerManager
from workbench.gui.panels.training.evaluation_segmentation import class_colours
from workbench.gui.panels.try_it import TryItDialog
from workbench.gui.queries import QueryRunner
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.runs import RunStore

CLASSES = ["background", "square", "disc"]
SIDE = 16


def _truth() -> np.ndarray:
    mask = np.zeros((SIDE, SIDE), dtype=np.uint8)
    mask[2:8, 2:8] = 1
    mask[10:14, 9:13] = 2
    return mask


def _predict(spec, ctx):
    """Like predict.model on a segmentation run: the square found, the disc a little too large."""
    from workbench.worker.predict_masks import segmentation_answer

    with RunStore(ctx.workspace).open_run(spec.source.run) as run:
        quantize = run.task == "quant.analyze"
    truth = _truth()
    scores = torch.zeros(1, 3, SIDE, SIDE)
    scores[0, 1, 2:8, 2:8] = 4
    scores[0, 2, 9:14, 9:14] = 4
    fp32 = segmentation_answer(scores, CLASSES, truth)
    scores[0, 2, 9, 9:14] = 0  # the quantized model misses a row of the disc
    quantized = segmentation_answer(scores, CLASSES, truth)
    image = np.full((SIDE, SIDE, 3), 40, dtype=np.uint8)
    result = {
        "run": spec.source.run,
        "run_kind": "quantize" if quantize else "train",
        "model": "unet",
        "dataset": "file:/p/data.py:Shapes",
        "task": "segmentation",
        "top_k": spec.top_k,
        "device": "cpu",
        "input": {"kind": "sample", "split": spec.sample.split, "index": spec.sample.index},
        "notes": [],
        "classes": CLASSES,
        "true_mask": truth,
        "preview": image,
    }
    if quantize:
        result.update(
            masks={"fp32": fp32["mask"], "quantized": quantized["mask"]},
            mask=quantized["mask"],
            fp32=fp32["shares"],
            quantized=quantized["shares"],
            predictions=quantized["shares"],
            scores={"fp32": fp32["scores"], "quantized": quantized["scores"]},
            agree=None,
            mask_agreement=float((fp32["mask"] == quantized["mask"]).mean()),
        )
    else:
        result.update(
            masks={"fp32": fp32["mask"]},
            mask=fp32["mask"],
            predictions=fp32["shares"],
            scores={"fp32": fp32["scores"]},
        )
    return result


@pytest.fixture
def harness(qtbot, tmp_path):
    worker = FakeWorker(tmp_path)
    worker.replace_task("predict.model", _predict)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    workspace = tmp_path / "workspace"
    queries = QueryRunner(QtWorkerBridge(manager), workspace)
    manager.start(wait=False)
    qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
    store = RunStore(workspace)
    spec = {
        "task": "segmentation",
        "model": {"name": "file:/p/model.py:UNet"},
        "dataset": {"name": "file:/p/data.py:Shapes"},
    }
    with store.create_run("train", spec, task="train.classifier") as run:
        run.set_status("done")
        train_id = run.id
    with store.create_run(
        "quant",
        {"source": {"run": train_id}, "weights": {"bits": 8}, "activations": {"bits": 8}},
        task="quant.analyze",
    ) as run:
        run.set_status("done")
        quant_id = run.id
    yield queries, workspace, train_id, quant_id
    manager.detach()
    worker.stop()


def _view(qtbot, harness, run_id):
    queries, workspace, *_ = harness
    dialog = TryItDialog(queries, workspace, run_id)
    qtbot.addWidget(dialog)
    dialog.show()
    view = dialog.view
    view.split_combo.setCurrentIndex(view.split_combo.findData("test"))
    view.index_spin.setValue(2)
    view.sample_button.click()
    qtbot.waitUntil(lambda: view.result is not None, timeout=10_000)
    return dialog, view


def _pixel(label: QLabel, x: float, y: float) -> tuple[int, int, int]:
    """The colour at a fraction (x, y) of the label's pixmap."""
    image = label.pixmap().toImage()
    colour = image.pixelColor(int(x * (image.width() - 1)), int(y * (image.height() - 1)))
    return colour.red(), colour.green(), colour.blue()


def test_a_sample_draws_the_predicted_mask_over_the_image_and_the_true_mask_beside_it(qtbot, harness):
    _, _, train_id, _ = harness
    dialog, view = _view(qtbot, harness, train_id)
    assert isinstance(view.result["mask"], np.ndarray) and view.result["mask"].shape == (SIDE, SIDE)
    assert view.masks.isVisibleTo(view) and not view.chart.isVisibleTo(view)
    assert not view.top_k_spin.isVisibleTo(view)  # every class is listed: no top k
    assert list(view.masks.pictures) == ["fp32", "true"]
    colours = class_colours(3)
    predicted = view.masks.pictures["fp32"]
    # The square (class 1) blended over the grey image in its evaluation colour; the background left clear.
    square = np.array(_pixel(predicted, 5 / SIDE, 5 / SIDE))
    expected = np.round(0.45 * 40 + 0.55 * colours[1].astype(float))
    assert np.abs(square - expected).max() <= 2
    assert _pixel(predicted, 0.5 / SIDE, 15.5 / SIDE) == (40, 40, 40)
    disc = np.array(_pixel(view.masks.pictures["true"], 11 / SIDE, 11.5 / SIDE))
    assert np.abs(disc - np.round(0.45 * 40 + 0.55 * colours[2].astype(float))).max() <= 2
    legend = view.masks.legend.text()
    assert all(name in legend for name in CLASSES) and "(clear)" in legend
    r, g, b = colours[1].tolist()
    assert f"rgb({r},{g},{b})" in legend
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert headers == ["Class", "pixels", "IoU"]
    rows = [[view.table.item(r, c).text() for c in range(3)] for r in range(view.table.rowCount())]
    assert [row[0] for row in rows] == CLASSES and rows[1][2] == "1.000" and rows[2][2] == "0.640"
    assert "mostly <b>square</b>" in view.verdict.text() and "mIoU" in view.verdict.text()
    assert any("pixel accuracy" in label.text() for label in view.masks.findChildren(QLabel))
    assert view.masks.toolTip() and view.masks.legend.toolTip()


def test_a_quantize_run_draws_fp32_and_quantized_masks_side_by_side(qtbot, harness):
    _, _, _, quant_id = harness
    dialog, view = _view(qtbot, harness, quant_id)
    assert list(view.masks.pictures) == ["fp32", "quantized", "true"]
    captions = " ".join(label.text() for label in view.masks.findChildren(QLabel))
    assert "FP32" in captions and "W8A8" in captions and "True mask" in captions
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert headers == ["Class", "FP32 pixels", "FP32 IoU", "W8A8 pixels", "W8A8 IoU"]
    assert "agree on" in view.verdict.text()
    # The quantized mask misses the disc's top row: the two pictures differ there.
    assert _pixel(view.masks.pictures["fp32"], 11 / SIDE, 9.5 / SIDE) != _pixel(
        view.masks.pictures["quantized"], 11 / SIDE, 9.5 / SIDE
    )


def test_the_training_tab_offers_try_it_on_a_finished_segmentation_run(fake_window, qtbot):
    window = fake_window
    with RunStore(window.workspace).create_run(
        "train", {"task": "segmentation", "epochs": 1}, task="train.classifier"
    ) as run:
        run.write_report({"status": "done", "task": "segmentation"})
        run.set_status("done")
        run_id = run.id
    panel = window.training_panel
    window.show_tab(panel)
    panel.refresh()
    assert panel.select_run(run_id)
    assert panel.try_it_button.isEnabled() and "mask" in panel.try_it_button.toolTip()
