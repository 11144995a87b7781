"""Try it on a detection run: the detector's answer (boxes with their class and score, and the image with the
boxes above the score drawn, as workbench.worker.predict_boxes gives them) shown as the picture and a table
of boxes, best first; no probability bars, no top k."""

from __future__ import annotations

import numpy as np

from workbench.gui.panels.try_it import DETECTION_ROWS, TryItView
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
    }


def test_a_detectors_answer_is_its_picture_and_a_table_of_boxes(qtbot, tmp_path):
    with RunStore(tmp_path).create_run("train", SPEC, task="train.model") as run:
        run.set_status("done")
        run_id = run.id
    view = TryItView(None, tmp_path, run_id)
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
