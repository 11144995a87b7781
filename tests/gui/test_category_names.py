"""Class names along a bar chart's or a heat map's x axis (CategoryAxis): at the size the evaluation view has
in a 1400x820 window, every name is drawn (whole, or elided with "…") and no two overlap; pyqtgraph's own axis
dropped the first bar's "background" and ran long names into each other."""

from __future__ import annotations

import itertools

import pytest
from PySide6.QtGui import QPainter, QPicture

from workbench.gui.panels.training.evaluation import EvaluationView

DATASET = {"name": "file:/somewhere/data.py:Shapes"}
VOC = [
    "background",
    "aeroplane",
    "bicycle",
    "bird",
    "boat",
    "bottle",
    "bus",
    "pottedplant",
    "motorbike",
    "person",
]
NAMES = ["Veltic", "Sorvan", "Lunaro", "Hakumi", "Grendt"]  # the names_transformer example's languages


@pytest.fixture
def view(qtbot):
    widget = EvaluationView(queries=None)
    qtbot.addWidget(widget)
    widget.resize(920, 480)  # the Evaluation tab's size in the window at its default 1400x820
    widget.show()
    return widget


def paint(plot, qtbot) -> None:
    """Lay out and paint as the window would: a first paint sizes the axis to its names, the next uses it."""
    for _ in range(2):
        plot.grab()
        qtbot.wait(20)


def drawn_names(plot) -> list[tuple]:
    """The (rect, flags, text) of each name the bottom axis draws, as its paint() makes them."""
    axis = plot.getAxis("bottom")
    picture = QPicture()
    painter = QPainter(picture)
    try:
        if axis.style["tickFont"]:
            painter.setFont(axis.style["tickFont"])
        return list(axis.generateDrawSpecs(painter)[2])
    finally:
        painter.end()


def assert_every_name_shows_apart(plot, names: list[str]) -> None:
    specs = drawn_names(plot)
    texts = [text for _, _, text in specs]
    assert len(texts) == len(names)
    for text, name in zip(texts, names):
        assert text == name or (text.endswith("…") and name.startswith(text[:-1])), (text, name)
    for (a, _, ta), (b, _, tb) in itertools.combinations(specs, 2):
        assert not a.intersects(b), f"{ta!r} overlaps {tb!r}"
    bounds = plot.getAxis("bottom").boundingRect()
    for rect, _, text in specs:
        assert bounds.contains(rect), f"{text!r} runs past the axis"


def segmentation(classes: list[str]) -> dict:
    return {
        "task": "segmentation",
        "split": "test",
        "classes": classes,
        "miou": 0.5,
        "pixel_acc": 0.9,
        "per_class": [{"class": c, "iou": 0.5 + k / 40, "pixels": 100} for k, c in enumerate(classes)],
        "worst": [],
    }


@pytest.mark.parametrize("classes", [["background", "square", "disc"], VOC], ids=["shapes", "voc"])
def test_every_class_name_under_the_iou_bars_shows_and_none_overlap(view, qtbot, classes):
    view.show_evaluation(segmentation(classes), DATASET, "run-seg")
    plot = view.task_views["segmentation"].iou_plot
    paint(plot, qtbot)
    assert_every_name_shows_apart(plot, classes)


def test_the_confusion_matrix_names_its_columns_apart(view, qtbot):
    matrix = [[20 if i == j else 1 for j in range(5)] for i in range(5)]
    view.show_evaluation(
        {
            "task": "classification",
            "classes": NAMES,
            "confusion_matrix": matrix,
            "per_class_accuracy": [0.83] * 5,
            "test_accuracy": 0.83,
            "worst": [],
        },
        DATASET,
        "run",
    )
    paint(view.confusion, qtbot)
    assert_every_name_shows_apart(view.confusion, NAMES)
    paint(view.per_class, qtbot)
    assert_every_name_shows_apart(view.per_class, NAMES)
