"""The Evaluation sub-tab for each task (issue #20): evaluation.json made by the real test evaluators on tiny
tensors (in this process, through JSON as the run folder holds it) is shown by the real view, and the test
reads what is drawn: scatter points and the y = x line, bar heights, table rows, mask overlay pixels, the
header."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PySide6.QtWidgets import QLabel, QTabWidget

from workbench.gui.panels.training.evaluation import EvaluationView
from workbench.gui.panels.training.evaluation_segmentation import ALPHA, class_colours
from workbench.worker.objectives import IGNORE_INDEX, build_objective

DATASET = {"name": "file:/somewhere/data.py:Shapes"}


def as_stored(result: dict) -> dict:
    return json.loads(json.dumps(result, allow_nan=False))


@pytest.fixture
def view(qtbot):
    widget = EvaluationView(queries=None)  # no classification gallery here: nothing asks the worker
    qtbot.addWidget(widget)
    widget.resize(1200, 760)
    widget.show()
    return widget


def regression_evaluation() -> dict:
    target = torch.linspace(0, 10, 21)
    pred = target + torch.linspace(-1, 1, 21) ** 3  # the ends are off the most
    pred[7] = 20.0  # one sample badly wrong
    evaluator = build_objective("regression").test_evaluator("test", [])
    for start in (0, 8, 16):
        idx = torch.arange(start, min(start + 8, 21))
        evaluator.add(idx + 100, pred[idx, None], target[idx])
    return as_stored(evaluator.result())


def test_regression_scatter_with_identity_line_and_worst_residuals(view, qtbot):
    evaluation = regression_evaluation()
    view.show_evaluation(evaluation, DATASET, "run-reg")
    page = view.task_views["regression"]
    assert view.pages.currentWidget() is page
    assert "test MAE ↓" in view.title.text() and "RMSE" in view.title.text() and "R²" in view.title.text()
    assert "run-reg" in view.title.text()
    x, y = page.scatter.getData()
    assert np.allclose(np.column_stack([x, y]), evaluation["scatter"])
    assert len(x) == 21 and y[7] == pytest.approx(20.0)
    assert [p.data() for p in page.scatter.points()][:3] == [100, 101, 102]  # hover tooltips name the sample
    assert "sample #107" in page._tip(x=7.0, y=20.0, data=107) and "residual 13" in page._tip(
        x=7.0, y=20.0, data=107
    )
    assert page.identity.angle == 45 and page.identity.pos().x() == 0 and page.identity.pos().y() == 0
    assert not page.scatter_plot.is_empty
    table = page.worst
    assert table.rowCount() == len(evaluation["worst"]) == 21
    assert [table.item(0, c).text() for c in range(5)] == ["test", "107", "3.5", "20", "16.5"]
    with qtbot.waitSignal(view.sample_requested) as signal:
        table.cellDoubleClicked.emit(0, 2)
    assert signal.args[:3] == [DATASET, "test", 107]
    assert "predicted 20" in signal.args[3] and "true 3.5" in signal.args[3]


def multilabel_evaluation() -> dict:
    g = torch.Generator().manual_seed(0)
    truth = (torch.rand(40, 3, generator=g) > 0.5).long()
    truth[:, 2] = 0  # "closed" never occurs: its AP is undefined
    truth[0, 2] = 0
    logits = (truth.float() * 2 - 1) * 2 + torch.randn(40, 3, generator=g) * 1.5
    evaluator = build_objective("multilabel", num_outputs=3).test_evaluator(
        "test", ["round", "tall", "closed"]
    )
    evaluator.add(torch.arange(40), logits, truth)
    return as_stored(evaluator.result())


def test_multilabel_per_label_bars_and_worst_samples(view, qtbot):
    evaluation = multilabel_evaluation()
    view.show_evaluation(evaluation, DATASET, "run-ml")
    page = view.task_views["multilabel"]
    assert view.pages.currentWidget() is page
    assert "test mean AP ↑" in view.title.text() and "F1 (micro)" in view.title.text()
    per_label = evaluation["per_label"]
    assert per_label[2]["ap"] is None
    ap_heights = page.ap_bars.opts["height"]
    assert list(ap_heights) == pytest.approx([per_label[0]["ap"], per_label[1]["ap"], 0.0])
    assert list(page.f1_bars.opts["height"]) == pytest.approx([r["f1"] or 0.0 for r in per_label])
    assert list(page.ap_bars.opts["x"]) < list(page.f1_bars.opts["x"])  # side by side, AP on the left
    ticks = page.bars_plot.getAxis("bottom")._tickLevels[0]
    assert [name for _, name in ticks] == ["round", "tall", "closed"]
    assert page.tooltips.text_at(0.2).startswith("round: AP ")
    assert "AP undefined" in page.tooltips.text_at(2.0) and page.tooltips.text_at(3.6) == ""
    worst = evaluation["worst"]
    table = page.worst
    assert 0 < table.rowCount() == len(worst)
    assert table.item(0, 1).text() == str(worst[0]["index"])
    assert table.item(0, 2).text() == (", ".join(worst[0]["target"]) or "none")
    assert table.item(0, 4).text() == str(worst[0]["errors"])
    assert "Probabilities: round" in table.item(0, 0).toolTip()
    with qtbot.waitSignal(view.sample_requested) as signal:
        table.cellDoubleClicked.emit(0, 0)
    assert signal.args[1:3] == ["test", worst[0]["index"]]


def segmentation_evaluation() -> tuple[dict, torch.Tensor, torch.Tensor]:
    n, side = 10, 12
    target = torch.zeros(n, side, side, dtype=torch.int64)
    target[:, 2:6, 2:6] = 1
    target[:, 7:11, 6:10] = 2
    target[:, 0, 0] = IGNORE_INDEX
    pred = target.clamp(max=2).clone()
    pred[3, 7:11, 6:10] = 1  # image 3: the disc called a square
    pred[6, 2:6, 2:6] = 0  # image 6: the square missed
    image = torch.rand(n, 3, side, side)
    scores = F.one_hot(pred, 3).permute(0, 3, 1, 2).float() * 5
    evaluator = build_objective("segmentation", num_outputs=3).test_evaluator(
        "test", ["background", "square", "disc"]
    )
    for start in (0, 4, 8):
        idx = torch.arange(start, min(start + 4, n))
        evaluator.add_inputs(image[idx])
        evaluator.add(idx + 50, scores[idx], target[idx])
    return as_stored(evaluator.result()), image, pred


def test_segmentation_class_iou_worst_images_and_mask_overlays(view, qtbot):
    evaluation, image, pred = segmentation_evaluation()
    view.show_evaluation(evaluation, DATASET, "run-seg")
    page = view.task_views["segmentation"]
    assert view.pages.currentWidget() is page
    assert "test mIoU ↑" in view.title.text() and "pixel accuracy" in view.title.text()
    assert list(page.iou_bars.opts["height"]) == pytest.approx([c["iou"] for c in evaluation["per_class"]])
    assert "square: IoU" in page.tooltips.text_at(1.1)
    # The eight worst images that carry thumbnails, the worst first, each with its predicted mask over it.
    assert page.gallery.count() == 8
    assert page.gallery.item(0).text().startswith(f"#{evaluation['worst'][0]['index']}")
    assert evaluation["worst"][0]["index"] in (53, 56)
    assert not page.gallery.item(0).icon().isNull()
    assert page.gallery.currentRow() == 0
    worst_index = evaluation["worst"][0]["index"] - 50
    shown_image, true_overlay, pred_overlay = (item.image.transpose(1, 0, 2) for item in page.image_items)
    # rand in [0, 1): stretched per image, nearly the same
    picture = (image[worst_index] * 255).round().numpy()
    stretched = (picture - picture.min()) / (picture.max() - picture.min()) * 255
    assert np.abs(shown_image.astype(float) - stretched.transpose(1, 2, 0)).max() <= 2
    colours = class_colours(3).astype(float)
    base = shown_image.astype(float)
    # The background is left clear, ignored pixels too; a square pixel is blended with the square's colour.
    assert (true_overlay[1, 1] == shown_image[1, 1]).all() and (true_overlay[0, 0] == shown_image[0, 0]).all()
    expected_square = (1 - ALPHA) * base[3, 3] + ALPHA * colours[1]
    assert np.abs(true_overlay[3, 3] - expected_square).max() <= 1
    expected_disc = (1 - ALPHA) * base[8, 7] + ALPHA * colours[2]
    assert np.abs(true_overlay[8, 7] - expected_disc).max() <= 1
    predicted_class = int(pred[worst_index, 8, 7])
    expected = (
        base[8, 7] if predicted_class == 0 else (1 - ALPHA) * base[8, 7] + ALPHA * colours[predicted_class]
    )
    assert np.abs(pred_overlay[8, 7] - expected).max() <= 1
    assert not np.array_equal(true_overlay, pred_overlay)  # the worst image is wrong somewhere
    page.gallery.setCurrentRow(1)
    assert f"#{evaluation['worst'][1]['index']}" in page.detail_title.text()
    with qtbot.waitSignal(view.sample_requested) as signal:
        page.gallery.itemActivated.emit(page.gallery.item(1))
    assert signal.args[1:3] == ["test", evaluation["worst"][1]["index"]] and "mIoU" in signal.args[3]


def test_segmentation_images_fill_their_plots_when_shown_on_a_hidden_tab(qtbot):
    # As in the window: the evaluation arrives while its tab is hidden, then the tab is opened. Each image
    # fills its plot (the range is its bounds, plus padding, widened along one axis only for the plot's
    # aspect).
    tabs = QTabWidget()
    qtbot.addWidget(tabs)
    view = EvaluationView(queries=None)
    tabs.addTab(QLabel("curves"), "Curves")
    tabs.addTab(view, "Evaluation")
    tabs.resize(1000, 600)
    tabs.show()
    evaluation, _, _ = segmentation_evaluation()
    view.show_evaluation(evaluation, DATASET, "run-seg")
    tabs.setCurrentIndex(1)
    qtbot.wait(300)
    page = view.task_views["segmentation"]
    height, width = page.image_items[0].image.shape[1::-1]
    for plot in page.image_plots:
        (x0, x1), (y0, y1) = plot.getPlotItem().vb.viewRange()
        assert x0 <= 0 and y0 <= 0 and x1 >= width and y1 >= height
        assert min(x1 - x0 - width, y1 - y0 - height) < 0.1 * max(width, height)


def test_segmentation_from_before_thumbnails_and_damaged_thumbnails(view):
    evaluation, _, pred = segmentation_evaluation()
    old = json.loads(json.dumps(evaluation))
    for row in old["worst"]:
        row.pop("thumbnail", None)
    view.show_evaluation(old, DATASET, "run-old")
    page = view.task_views["segmentation"]
    assert page.gallery.count() == len(old["worst"])  # the predicted masks alone, on grey
    assert page.image_items[0].image is None and page.image_items[2].image is not None
    damaged = json.loads(json.dumps(evaluation))
    damaged["worst"][0]["thumbnail"]["image"] = "not base64!"
    damaged["worst"][0]["thumbnail"]["true_mask"] = "AAAA"  # the wrong size
    view.show_evaluation(damaged, DATASET, "run-damaged")
    assert page.gallery.count() == 8
    assert page.image_items[0].image is None and page.image_items[1].image is None
    assert page.image_items[2].image is not None


def test_custom_task_shows_its_metrics_table_and_points_to_the_curves(view):
    evaluation = {
        "task": "custom",
        "split": "test",
        "metrics": {"dice": 0.8125, "hausdorff": 3.5},
        "monitor": {"name": "dice", "label": "dice", "higher_is_better": True, "value": 0.8125},
    }
    view.show_evaluation(evaluation, DATASET, "run-custom")
    page = view.task_views["metrics"]
    assert view.pages.currentWidget() is page
    assert "test dice ↑ <b>0.8125</b>" in view.title.text()
    assert [(page.table.item(r, 0).text(), page.table.item(r, 1).text()) for r in range(2)] == [
        ("dice", "0.8125"),
        ("hausdorff", "3.5"),
    ]
    assert "Curves tab" in page.note.text()


def test_classification_keeps_its_view_and_switching_back_clears_the_task_view(view):
    view.show_evaluation(regression_evaluation(), DATASET, "run-reg")
    assert view.task_views["regression"].worst.rowCount() > 0
    classification = {
        "classes": ["a", "b"],
        "confusion_matrix": [[3, 1], [0, 4]],
        "per_class_accuracy": [0.75, 1.0],
        "test_accuracy": 0.875,
        "worst": [],
    }  # as written before tasks: no "task" key
    view.show_evaluation(classification, DATASET, "run-cls")
    assert view.pages.currentIndex() == 0
    assert "87.50%" in view.title.text()
    assert view.task_views["regression"].worst.rowCount() == 0
    view.show_evaluation(dict(classification, task="classification"), DATASET, "run-cls")
    assert view.pages.currentIndex() == 0 and not view.confusion.is_empty


def test_a_task_evaluation_that_does_not_fit_its_view_says_so_in_one_line(view):
    view.show_evaluation(
        {"task": "regression", "split": "test", "scatter": [[1, 2, 3]], "worst": [{"x": 1}]},
        DATASET,
        "run-bad",
    )
    assert "could not be read as a regression evaluation" in view.title.text()
    assert view.task_views["regression"].worst.rowCount() == 0


def test_the_header_names_the_checkpoint_the_test_split_was_evaluated_with(view):
    classification = {
        "classes": ["a", "b"],
        "confusion_matrix": [[3, 1], [0, 4]],
        "per_class_accuracy": [0.75, 1.0],
        "test_accuracy": 0.875,
        "worst": [],
        "checkpoint": {"file": "best.pt", "epoch": 3},
    }
    view.show_evaluation(classification, DATASET, "run-cls")
    assert "with best.pt (epoch 3)" in view.title.text()
    view.show_evaluation(
        dict(regression_evaluation(), checkpoint={"file": "model.pt", "epoch": 5}), DATASET, "r"
    )
    assert "with model.pt (epoch 5)" in view.title.text()
