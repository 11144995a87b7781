"""The Quantization tab's charts name what a run measured (issue #20): a result with a `metric` block (a
task's monitor, e.g. val MSE, lower is better) labels its axes and titles "val MSE ↓" and shows plain numbers,
with the mixed-precision target above FP32; a result without one is accuracy, in percent, as before."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.gui.panels.quant.ladder_chart import LadderChart
from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.mixed_precision_plot import MixedPrecisionPlot
from workbench.gui.panels.quant.results import QuantResults
from workbench.gui.panels.quant.sensitivity_chart import SensitivityChart

MSE = {"name": "mse", "label": "val MSE", "higher_is_better": False}
MIOU = {"name": "miou", "label": "val mIoU", "higher_is_better": True}
LADDER = [
    {"step": "fp32", "accuracy": 0.0123, "loss": 0.0123},
    {"step": "fold_bn", "accuracy": 0.0123, "loss": 0.0123},
    {"step": "weight_ranges", "accuracy": 0.0131, "loss": 0.0131},
    {"step": "activation_ranges", "accuracy": 0.0158, "loss": 0.0158},
]


def shown(qtbot, widget):
    qtbot.addWidget(widget)
    widget.resize(800, 480)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def texts(chart) -> list[str]:
    return [label.textItem.toPlainText() for label in chart.labels]


def test_a_lower_is_better_metric_labels_the_ladder_with_its_name_and_arrow(qtbot):
    chart = shown(qtbot, LadderChart())
    chart.set_ladders([("W8A8", LADDER)], metric=MSE)
    axis = chart.plot.getAxis("left")
    assert axis.labelText == "val MSE ↓" and axis.fmt == "plain"
    assert chart.title == "val MSE ↓ after each step"
    assert "0.0158" in texts(chart) and not any("%" in t for t in texts(chart))
    low, high = chart.plot.getViewBox().viewRange()[1]
    assert low < 0.0123 and 0.0158 < high < 0.05  # zoomed on the metric's own scale, not on 0–100 %
    # The next run shown is a classification run: accuracy again, in percent.
    chart.set_ladders([("W8A8", [dict(s, accuracy=0.99) for s in LADDER])])
    assert axis.labelText == "accuracy" and axis.fmt == "percent"
    assert chart.title == "Accuracy after each step" and "99.00%" in texts(chart)


def test_the_sensitivity_chart_names_a_higher_is_better_metric(qtbot):
    rows = [
        {"layer": "enc.0", "only_this": 0.81, "all_but_this": 0.78},
        {"layer": "head", "only_this": 0.80, "all_but_this": 0.82},
    ]
    chart = shown(qtbot, SensitivityChart())
    chart.set_rows(rows, 0.82, 0.77, MIOU)
    assert chart.plot.getAxis("bottom").labelText == "val mIoU ↑"
    assert chart.title.startswith("val mIoU ↑ per layer")
    assert "0.81" in texts(chart)
    legend = chart.legend_texts
    assert "FP32 0.82" in legend and "quantized 0.77" in legend


def test_a_lower_is_better_targets_lies_above_fp32_in_the_mixed_precision_plot(qtbot):
    proposal = {
        "target_drop": 0.002,
        "layers": [{"name": "head", "bits": 16}],
        "accuracy": 0.0135,
        "size_bytes": 900,
        "met": True,
        "fp32_accuracy": 0.0123,
        "fp32_size_bytes": 3000,
        "points": [
            {"layers": [], "accuracy": 0.0158, "size_bytes": 750},
            {"layers": ["head"], "accuracy": 0.0135, "size_bytes": 900},
        ],
    }
    plot = shown(qtbot, MixedPrecisionPlot())
    plot.set_proposal(proposal, MSE)
    assert plot.target.value() == pytest.approx(0.0143)  # FP32 + the allowed rise
    assert plot.plot.getAxis("left").labelText == "val MSE ↓"
    assert plot.title.startswith("Mixed precision: val MSE ↓ against model size")
    legend = plot.legend_texts
    assert "target: at most 0.002 above FP32" in legend
    assert any(t.startswith("proposal: 0.0135 at") for t in legend)
    plot.set_proposal(dict(proposal, fp32_accuracy=0.99, target_drop=0.01, accuracy=0.985))
    assert plot.target.value() == pytest.approx(0.98) and plot.plot.getAxis("left").labelText == "accuracy"


def test_results_know_the_metric_live_and_from_the_report():
    results = QuantResults(run_id="q1")
    assert results.metric is None and Measure.of(results.metric).axis == "accuracy"
    ladder = np.array([[0.0123, 0.0123]])
    results.add_array(
        "quant/ladder", ladder, {"steps": ["fp32"], "planned": ["fp32", "activation_ranges"], "metric": MSE}
    )
    assert results.metric == MSE and results.ladder[0]["accuracy"] == pytest.approx(0.0123)
    results.set_report({"steps": LADDER, "metric": MIOU})
    assert results.metric == MIOU
    assert Measure.of(MSE).text(0.01234567) == "0.01235" and Measure.of(None).text(0.5) == "50.0%"


def test_a_result_names_the_split_it_measured_not_val():
    # Written before the label named the split: "val mIoU" measured on the test split reads "test mIoU".
    old = QuantResults(report={"metric": MIOU, "held_out": {"samples": 40, "split": "test split"}})
    assert old.metric["label"] == "test mIoU"
    assert Measure.of(old.metric).axis == "test mIoU ↑"
    on_val = QuantResults(report={"metric": MIOU, "held_out": {"samples": 40, "split": "val split"}})
    assert on_val.metric["label"] == "val mIoU"
    assert Measure.of(MIOU, "test split").axis == "test mIoU ↑"
