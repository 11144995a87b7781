"""A detection run's evaluation view on an evaluation.json in the detection route's shape: AP per class as
bars, a PR curve per class, the test images ordered by missed objects or false positives, and the true and
predicted boxes over the image, predictions filtered by a score threshold that persists."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QSettings

from workbench.gui.panels.training.evaluation import TASK_VIEWS
from workbench.gui.panels.training.evaluation_detection import THRESHOLD_KEY, DetectionEvaluationView
from workbench.worker.data.detection.synthetic import write_shapes_coco


def _evaluation(image: str) -> dict:
    def row(index, missed, false_positives):
        return {
            "index": index,
            "image_id": index + 1,
            "file": image,
            "width": 128,
            "height": 128,
            "true": {"boxes": [[10, 10, 40, 40], [60, 60, 100, 100]], "labels": [1, 2]},
            "pred": {
                "boxes": [[11, 10, 40, 41], [62, 60, 99, 100], [0, 0, 20, 20]],
                "labels": [1, 2, 3],
                "scores": [0.95, 0.7, 0.3],
            },
            "missed": missed,
            "false_positives": false_positives,
        }

    recall = [k / 100 for k in range(101)]
    return {
        "task": "detection",
        "split": "test",
        "monitor": {"name": "map", "label": "mAP", "higher_is_better": True, "value": 0.5},
        "metrics": {"map": 0.5, "map_50": 0.8, "map_75": 0.45, "mar_100": 0.6},
        "classes": ["square", "circle", "triangle"],
        "per_class": [
            {"class": "square", "ap": 0.6, "ap_50": 0.9, "count": 10},
            {"class": "circle", "ap": 0.5, "ap_50": 0.8, "count": 8},
            {"class": "triangle", "ap": 0.4, "ap_50": 0.7, "count": 6},
        ],
        "pr": {
            name: {"recall": recall, "precision": [1 - r / 2 for r in recall]}
            for name in ("square", "circle", "triangle")
        },
        "images": [row(0, 0, 2), row(1, 2, 0), row(2, 1, 1)],
    }


def _labels(view) -> list[str]:
    return [item.toPlainText() for item in view.overlays if isinstance(item, pg.TextItem)]


def test_the_detection_view_draws_ap_pr_and_boxes_over_the_image(qtbot, tmp_path):
    images, _ = write_shapes_coco(tmp_path, 1, seed=0)
    settings = QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)
    assert TASK_VIEWS["detection"] is DetectionEvaluationView
    view = DetectionEvaluationView(settings=settings)
    qtbot.addWidget(view)
    view.show_evaluation(_evaluation(str(images / "shapes_0000.png")))
    assert list(view.ap_bars.opts["height"]) == [0.6, 0.5, 0.4]
    assert list(view.ap50_bars.opts["height"]) == [0.9, 0.8, 0.7]
    assert len(view.pr_plot.getPlotItem().listDataItems()) == 3
    # worst first by missed objects, then by false positives
    assert view.gallery.item(0).text().startswith("#1: 2 missed")
    view.order.setCurrentIndex(1)
    assert view.gallery.item(0).text().startswith("#0: 0 missed, 2 false")
    assert view.image_item.image is not None and view.image_item.image.shape == (128, 128, 3)
    assert _labels(view) == ["square 0.95", "circle 0.70"]  # the 0.30 triangle is under the 0.50 threshold
    rects = [item for item in view.overlays if not isinstance(item, pg.TextItem)]
    assert len(rects) == 4  # two true (dashed) and two predicted
    view.threshold.setValue(20)
    assert _labels(view) == ["square 0.95", "circle 0.70", "triangle 0.30"]
    assert abs(float(settings.value(THRESHOLD_KEY)) - 0.2) < 1e-9
    again = DetectionEvaluationView(settings=settings)
    qtbot.addWidget(again)
    assert again.threshold.value() == 20  # the threshold persists


def test_a_missing_image_file_still_shows_the_boxes(qtbot, tmp_path):
    view = DetectionEvaluationView(settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    qtbot.addWidget(view)
    view.show_evaluation(_evaluation(str(tmp_path / "moved.png")))
    assert view.image_item.image is None and _labels(view) == ["square 0.95", "circle 0.70"]
