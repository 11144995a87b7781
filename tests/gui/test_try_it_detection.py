"""Try it on a detection run: the detector's answer (boxes with their class and score, and the image with the
boxes above the score drawn, as workbench.worker.predict_boxes gives them) shown as the picture and a table
of boxes, best first; no probability bars, no top k."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSettings

from workbench.gui.panels.try_it import DETECTION_ROWS, TryItView
from workbench.gui.panels.try_it_boxes import THRESHOLD_KEY
from workbench.runs import RunStore

SPEC = {
    "task": "detection",
    "model": {"name": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn", "num_classes": 4},
    "dataset": {"name": "shapes_detection", "size": 24},
}


def _answer(count: int) -> dict:
    rows = [
        {
            "class": 1 + k % 3,
            "label": ("square", "circle", "triangle")[k % 3],
            "probability": 0.9 - 0.03 * k,
            "box": [4.0 * k, 5.0, 4.0 * k + 20, 30.0],
        }
        for k in range(count)
    ]
    return {
        "run": "r",
        "run_kind": "training",
        "model": SPEC["model"]["name"],
        "dataset": "shapes_detection",
        "task": "detection",
        "device": "cpu",
        "input": {"kind": "sample", "split": "test", "index": 0, "channels": 3, "model_size": [128, 128]},
        "notes": [f"{count} box(es); those scoring 0.5 or more are drawn"],
        "predictions": rows,
        "score_threshold": 0.5,
        "preview": np.full((128, 128, 3), 60, dtype=np.uint8),
        "image": np.full((128, 128, 3), 50, dtype=np.uint8),
        "truth": {"boxes": [[1.0, 2.0, 30.0, 40.0]], "labels": [1]},
    }


def _labels(picture) -> list[str]:
    return [item.toPlainText() for item in picture.overlays if isinstance(item, pg.TextItem)]


def test_a_detectors_answer_is_its_picture_and_a_table_of_boxes(qtbot, tmp_path):
    with RunStore(tmp_path).create_run("train", SPEC, task="train.model") as run:
        run.set_status("done")
        run_id = run.id
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat)
    view = TryItView(None, tmp_path, run_id, settings=settings)
    qtbot.addWidget(view)
    view.show()
    view.show_result(_answer(30))
    table = view.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers == ["#", "Class", "Score", "Box (x1, y1, x2, y2)"]
    assert table.rowCount() == DETECTION_ROWS  # the best of thirty
    assert [table.item(0, c).text() for c in range(4)][1:] == ["square", "90.0%", "0, 5, 20, 30"]
    assert view.chart.isHidden() and view.top_k_spin.isHidden() and view.masks.isHidden()
    assert view.image.pixmap() is not None and not view.image.pixmap().isNull()
    # 0.90 .. 0.51 score 0.5 or more: fourteen of them
    assert view.verdict.text().startswith("14 box(es) score 0.5 or more: square 0.90")
    # The boxes are drawn over the image in the window, at the slider's threshold: the true box dashed, the
    # fourteen predictions with their class and score.
    picture = view.boxes.pictures["predictions"]
    assert picture.image_item.image is not None and picture.image_item.image.shape == (128, 128, 3)
    assert _labels(picture)[:2] == ["square 0.90", "circle 0.87"] and len(_labels(picture)) == 14
    assert len([item for item in picture.overlays if not isinstance(item, pg.TextItem)]) == 15
    view.boxes.threshold.setValue(80)  # 0.90 .. 0.81: four boxes, and the verdict counts the same
    assert len(_labels(picture)) == 4 and view.verdict.text().startswith("4 box(es) score 0.8 or more")
    assert abs(float(settings.value(THRESHOLD_KEY)) - 0.8) < 1e-9  # kept for the next Try it
    again = TryItView(None, tmp_path, run_id, settings=settings)
    qtbot.addWidget(again)
    assert again.boxes.value() == 0.8


def _quantized_answer() -> dict:
    answer = _answer(6)
    fp32 = answer["predictions"]
    quantized = [dict(row, probability=row["probability"] - 0.01) for row in fp32]
    quantized[1] = dict(quantized[1], **{"class": 3, "label": "triangle"})  # rank 2 differs
    picture = np.full((128, 128, 3), 60, dtype=np.uint8)
    return {
        **answer,
        "run_kind": "quantize",
        "fp32": fp32,
        "quantized": quantized,
        "predictions": quantized,
        "agreement": {"fp32": 6, "quantized": 6, "matched": 5, "iou_min": 0.5, "mean_iou": 0.97},
        "previews": {"fp32": picture, "quantized": picture.copy()},
    }


def test_a_quantize_runs_boxes_stand_beside_the_fp32_detectors(qtbot, tmp_path):
    store = RunStore(tmp_path)
    with store.create_run("train", SPEC, task="train.model") as run:
        run.set_status("done")
        trained = run.id
    quant_spec = {"source": {"run": trained}, "weights": {"bits": 8}, "activations": {"bits": 8}}
    with store.create_run("quant", quant_spec, task="quant.analyze") as run:
        run.set_status("done")
        quantized = run.id
    view = TryItView(
        None, tmp_path, quantized, settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat)
    )
    qtbot.addWidget(view)
    view.show()
    view.show_result(_quantized_answer())
    table = view.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert headers == ["#", "FP32 class", "FP32 score", "W8A8 class", "W8A8 score"]
    assert table.rowCount() == 6 and table.item(1, 3).text() == "triangle"
    assert table.item(1, 0).background().color().alpha() > 0  # the rank where the two differ
    assert view.boxes.isVisible() and set(view.boxes.pictures) == {"fp32", "quantized"}
    fp32, int8 = view.boxes.pictures["fp32"], view.boxes.pictures["quantized"]
    assert _labels(fp32)[1] == "circle 0.87" and _labels(int8)[1] == "triangle 0.86"  # each its own boxes
    assert "W8A8 finds 5 of the FP32 detector's 6 box(es)" in view.boxes.caption.text()
    assert view.verdict.text().startswith("FP32: 6 box(es) score 0.5 or more · W8A8: 6 box(es)")
    view.show_result(_answer(3))  # a training run's answer after it: one picture, no pair
    assert set(view.boxes.pictures) == {"predictions"}
