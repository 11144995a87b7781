"""The class chart leaves room for its legend above the bars, and forgets class names when cleared."""

from __future__ import annotations

from workbench.gui.panels.data.class_chart import ClassChart


def _info():
    counts = {"train": [100, 120, 90, 95, 110, 105, 98, 102, 99, 180], "val": [10] * 10, "test": [20] * 10}
    return {
        "dataset": "digits",
        "classes": [str(i) for i in range(10)],
        "class_counts": counts,
        "num_samples": {k: sum(v) for k, v in counts.items()},
        "mean": [0.3],
        "std": [0.2],
        "sample_shape": [1, 8, 8],
    }


def test_the_legend_does_not_cover_the_tallest_bar(qtbot):
    chart = ClassChart()
    qtbot.addWidget(chart)
    chart.resize(700, 420)
    chart.show()
    chart.show_info(_info())
    qtbot.wait(50)
    view_box = chart.plot.getViewBox()
    legend = chart.plot.getPlotItem().legend
    legend_bottom = view_box.mapSceneToView(legend.mapToScene(legend.boundingRect().bottomLeft())).y()
    assert legend_bottom > 180  # the class-9 bar (180 samples) ends below the legend


def test_clear_forgets_the_class_names(qtbot):
    chart = ClassChart()
    qtbot.addWidget(chart)
    chart.show_info(_info())
    chart.clear("Computing class counts…")
    assert chart.plot.getAxis("bottom")._tickLevels is None
