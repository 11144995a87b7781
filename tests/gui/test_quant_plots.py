"""The Quantization tab's plots draw what the arrays and the report say: a line pair per range estimator, the
quantization error's sawtooth and clipping, a bar per channel, layer and step, and a message when cleared."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtGui import QPalette

from workbench.gui.panels.quant.channel_ranges_plot import NO_CHANNELS, ChannelRangesPlot
from workbench.gui.panels.quant.error_plot import ErrorPlot, quantize
from workbench.gui.panels.quant.ladder_chart import LadderChart
from workbench.gui.panels.quant.mixed_precision_plot import MixedPrecisionPlot
from workbench.gui.panels.quant.range_histogram import ERROR_HEADROOM, RangeHistogram, grid_extent
from workbench.gui.panels.quant.results import TensorArrays
from workbench.gui.panels.quant.sensitivity_chart import SensitivityChart
from workbench.gui.theme import apply_theme

BINS, CHANNELS = 256, 8
ESTIMATORS = ["chosen", "minmax", "mse", "percentile"]
RANGES = np.array(
    [
        [-0.5865, 0.5865, 19.0257, 1e-4, 3e-4],
        [-0.7326, 0.7258, 17.7068, 0.0, 5e-4],
        [-0.5700, 0.5865, 19.0257, 1e-4, 3e-4],
        [-0.6500, 0.6400, 18.2000, 2e-5, 4e-4],
    ]
)


def weight_arrays(cle: bool = True, channels: bool = True, tensor: str = "weight") -> TensorArrays:
    rng = np.random.default_rng(0)
    edges = np.linspace(-0.7326, 0.7258, BINS + 1)
    counts = np.histogram(rng.normal(0, 0.2, 18_432).clip(-0.73, 0.72), edges)[0].astype(np.int64)
    error = np.stack([np.where(np.abs(edges[:-1]) > 0.58, 1e-3, 0.0), np.full(BINS, 2e-3)])
    low = -rng.uniform(0.3, 0.7, CHANNELS)
    high = rng.uniform(0.3, 0.7, CHANNELS)
    channel_ranges = np.stack([np.stack([low * f, high * f], axis=-1) for f in (0.8, 1.0, 0.9, 0.95)])
    cle_ranges = np.stack([np.stack([low, high], axis=-1), np.stack([low * 0.7, high * 0.7], axis=-1)])
    return TensorArrays(
        layer="features.4",
        tensor=tensor,
        counts=counts,
        edges=edges,
        ranges=RANGES.copy(),
        estimators=list(ESTIMATORS),
        error=error,
        channel_ranges=channel_ranges if channels else None,
        cle_ranges=cle_ranges if cle else None,
        chosen="mse",
        sampled=tensor == "activation",
        values=18_432,
    )


def shown(qtbot, widget, width=800, height=480):
    qtbot.addWidget(widget)
    widget.resize(width, height)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


# -- range histogram -----------------------------------------------------------------------------------------
def test_histogram_draws_a_line_pair_per_estimator_at_its_range_and_names_its_sqnr(qtbot):
    histogram = shown(qtbot, RangeHistogram())
    histogram.set_tensor(weight_arrays(), {"bits": 4, "range_method": "mse", "granularity": "per_channel"})
    assert list(histogram.lines) == ESTIMATORS
    for row, name in zip(RANGES, ESTIMATORS):
        lo, hi = histogram.lines[name]
        assert (lo.value(), hi.value()) == (pytest.approx(row[0]), pytest.approx(row[1]))
    texts = histogram.legend_texts
    assert "mse  [-0.57, 0.59]  19.0 dB" in texts
    assert "in use (mse)  [-0.59, 0.59]  19.0 dB" in texts
    assert any(t.startswith("percentile") and t.endswith("18.2 dB") for t in texts)
    # The range in use is bold and solid; the alternatives are thinner and dashed.
    chosen_pen, minmax_pen = histogram.lines["chosen"][0].pen, histogram.lines["minmax"][0].pen
    assert chosen_pen.widthF() > minmax_pen.widthF() and minmax_pen.style() != chosen_pen.style()
    title = histogram.title
    assert "features.4" in title and "4-bit" in title and "sampled" not in title
    # Every estimator's lines are in view, the widest (minmax) included.
    x0, x1 = histogram.plot.getViewBox().viewRange()[0]
    assert x0 < -0.7326 and x1 > 0.7258


def test_learned_rounding_is_named_in_the_legend_beside_the_nearest_rounding_estimate(qtbot):
    import dataclasses

    histogram = shown(qtbot, RangeHistogram())
    arrays = dataclasses.replace(weight_arrays(), rounding="adaround")
    histogram.set_tensor(arrays, {"bits": 4, "range_method": "mse", "granularity": "per_channel"})
    texts = histogram.legend_texts
    assert any(t.startswith("in use (mse, adaround rounding)") for t in texts), texts
    assert any(t.startswith("mse  [") for t in texts)  # the estimator itself, rounding to nearest
    assert "The weights round with adaround" in histogram.legend.tooltips[2]  # the in-use row says why
    # QAT trains the weights under a range fixed before it: that, not the rounding, is what differs.
    histogram.set_tensor(
        dataclasses.replace(weight_arrays(), rounding="qat"), {"bits": 4, "range_method": "mse"}
    )
    assert histogram.legend_texts[2].startswith("in use (mse, range fixed before QAT)  ["), (
        histogram.legend_texts
    )


def test_the_legend_heads_its_columns_and_says_what_the_numbers_are(qtbot):
    histogram = shown(qtbot, RangeHistogram())
    histogram.set_tensor(weight_arrays(), {"bits": 4, "range_method": "mse"})
    assert histogram.legend.header_text == "clipping range · SQNR"
    header_tip = histogram.legend.header[0].toolTip()
    assert "clipping range [lo, hi]" in header_tip and "SQNR of these values" in header_tip
    assert "AdaRound" in header_tip  # why the in-use row may read lower than its method's row
    assert all("clipping range [lo, hi]" in tip for tip in histogram.legend.tooltips)
    assert histogram.legend.texts[:2] == ["values (18,432)", histogram.legend.texts[1]]
    assert histogram.legend.texts[1].startswith("clipped (")


def test_an_estimators_range_reads_as_the_grid_holds_it_so_the_one_in_use_matches_its_method(qtbot):
    """The worker gives each estimator's own (lo, hi) but the range in use as its grid represents it; on a
    symmetric grid mse's [-0.570, 0.587] clips at [-0.587, 0.587], as the range in use does."""
    histogram = shown(qtbot, RangeHistogram())
    entry = {"bits": 4, "range_method": "mse", "qmin": -7, "qmax": 7, "symmetric": True}
    histogram.set_tensor(weight_arrays(channels=False), entry)
    texts = histogram.legend_texts
    assert "in use (mse)  [-0.59, 0.59]  19.0 dB" in texts and "mse  [-0.59, 0.59]  19.0 dB" in texts
    assert [line.value() for line in histogram.lines["mse"]] == [
        pytest.approx(-0.5865),
        pytest.approx(0.5865),
    ]
    assert [line.value() for line in histogram.lines["minmax"]] == [
        pytest.approx(-0.7326),
        pytest.approx(0.7326),
    ]
    mse_tip = histogram.legend.tooltips[texts.index("mse  [-0.59, 0.59]  19.0 dB")]
    assert "picked [-0.570, 0.587]" in mse_tip and "clips at [-0.587, 0.587]" in mse_tip
    # Per channel: each channel's range on the grid, then the outermost (the lines show the widest channel).
    arrays = weight_arrays()
    histogram.set_tensor(arrays, {**entry, "granularity": "per_channel"})
    low, high = grid_extent(arrays.channel_ranges[2][:, 0], arrays.channel_ranges[2][:, 1], -7, 7, True)
    bound = max(-arrays.channel_ranges[2][:, 0].min(), arrays.channel_ranges[2][:, 1].max())
    assert [line.value() for line in histogram.lines["mse"]] == [
        pytest.approx(low.min()),
        pytest.approx(high.max()),
    ]
    assert high.max() == pytest.approx(bound) and low.min() == pytest.approx(-bound)
    # Without the grid (an older report) the estimator's own range is shown.
    histogram.set_tensor(weight_arrays(channels=False), {"bits": 4, "range_method": "mse"})
    assert [line.value() for line in histogram.lines["mse"]] == [pytest.approx(-0.57), pytest.approx(0.5865)]


def test_grid_extent_follows_the_worker_on_symmetric_and_asymmetric_grids():
    # Symmetric signed: the larger side sets the bound; an unsigned symmetric grid (after a ReLU) keeps hi.
    assert grid_extent(-0.3, 0.6, -127, 127, True) == (pytest.approx(-0.6), pytest.approx(0.6))
    assert grid_extent(-0.3, 0.6, -128, 127, True) == (pytest.approx(-0.6 * 128 / 127), pytest.approx(0.6))
    assert grid_extent(0.2, 0.6, 0, 255, True) == (pytest.approx(0.0), pytest.approx(0.6))  # 0 is always held
    # Asymmetric: the zero point rounds to a whole code, moving both ends by under half a step.
    scale = (1.85 + 0.81) / 255
    zero_point = round(0.81 / scale)
    lo, hi = grid_extent(-0.81, 1.85, 0, 255, False)
    assert (lo, hi) == (pytest.approx(-zero_point * scale), pytest.approx((255 - zero_point) * scale))
    assert abs(lo + 0.81) <= scale / 2 and abs(hi - 1.85) <= scale / 2


def test_histogram_shades_and_colours_the_clipped_tails_and_shows_the_error_per_bin(qtbot):
    arrays = weight_arrays()
    histogram = shown(qtbot, RangeHistogram())
    histogram.set_tensor(arrays, None)
    spans = sorted(
        tuple(r.getRegion()) for r in histogram.regions if r.getViewBox() is histogram.plot.getViewBox()
    )
    assert spans == [
        (pytest.approx(arrays.edges[0]), pytest.approx(-0.5865)),
        (pytest.approx(0.5865), pytest.approx(arrays.edges[-1])),
    ]
    _x, clipped = histogram.clipped.getData()
    centres = (arrays.edges[:-1] + arrays.edges[1:]) / 2
    inside = np.abs(centres) <= 0.5865
    assert clipped[inside].sum() == 0 and clipped[~inside].sum() == arrays.counts[~inside].sum() > 0
    rounding = histogram.error_curves["rounding"].getData()[1]
    clipping = histogram.error_curves["clipping"].getData()[1]
    assert rounding == pytest.approx(arrays.error[1] / arrays.values)  # each bin's share of the MSE
    assert clipping == pytest.approx(arrays.error[0] / arrays.values)
    assert any(t.startswith("clipping error") for t in histogram.error_legend_texts)
    top = histogram.error_plot.getViewBox().viewRange()[1][1]
    assert top == pytest.approx(ERROR_HEADROOM * max(rounding.max(), clipping.max()))


def test_the_legends_stand_beside_the_plots_and_hide_no_bar(qtbot):
    """Over the plot, a six-row legend covered the bars however much room the y range left: beside it, every
    bar and curve is in view, in a short plot too."""
    from PySide6.QtCore import QPoint, QRect

    histogram = shown(qtbot, RangeHistogram(), width=900, height=300)
    arrays = weight_arrays()
    histogram.set_tensor(arrays, {"bits": 4, "range_method": "mse"})
    qtbot.waitUntil(lambda: histogram.legend.isVisible() and histogram.error_legend.isVisible())

    def rect(widget) -> QRect:
        return QRect(widget.mapTo(histogram, QPoint(0, 0)), widget.size())

    for legend in (histogram.legend, histogram.error_legend):
        for plot in (histogram.plot, histogram.error_plot):
            assert not rect(legend).intersects(rect(plot))
        assert rect(legend).left() >= rect(histogram.plot).right()
    assert rect(histogram.legend).bottom() <= rect(histogram.error_legend).top()
    assert len(histogram.legend_texts) == 6  # values, clipped, in use and three estimators
    # The tallest bar is in view, and the view is not mostly empty headroom.
    top = histogram.plot.getViewBox().viewRange()[1][1]
    assert arrays.counts.max() < top <= 1.2 * arrays.counts.max()


def test_log_counts_switches_the_count_axis_and_keeps_empty_bins_drawable(qtbot):
    histogram = shown(qtbot, RangeHistogram())
    arrays = weight_arrays(tensor="activation")
    histogram.set_tensor(arrays, {"bits": 8})
    assert "(sampled" in histogram.title
    assert not histogram.plot.getAxis("left").logMode
    histogram.set_log_counts(True)
    assert histogram.log_counts.isChecked()
    assert histogram.plot.getAxis("left").logMode and histogram.plot.getViewBox().state["logMode"][1]
    y = histogram.histogram.getData()[1]
    assert np.isfinite(y).all()  # empty bins sit on the floor, not at log10(0)
    low, high = histogram.plot.getViewBox().viewRange()[1]
    assert low < 0 < np.log10(arrays.counts.max()) < high
    histogram.set_log_counts(False)
    assert not histogram.plot.getAxis("left").logMode
    assert histogram.histogram.getData()[1] == pytest.approx(arrays.counts)


def test_histogram_clear_shows_the_message(qtbot):
    histogram = shown(qtbot, RangeHistogram())
    histogram.set_tensor(weight_arrays(), None)
    histogram.clear("Pick a layer in the table.")
    assert histogram.plot.is_empty and histogram.plot.empty_text == "Pick a layer in the table."
    assert histogram.lines == {} and histogram.legend_texts == [] and not histogram.legend.isVisible()


# -- quantization error --------------------------------------------------------------------------------------
def test_error_is_within_half_a_step_inside_the_range_and_grows_linearly_outside(qtbot):
    plot = shown(qtbot, ErrorPlot())
    scale, zero_point = 0.0104, 78
    entry = {
        "name": "input",
        "tensor": "activation",
        "bits": 8,
        "qmin": 0,
        "qmax": 255,
        "scale": scale,
        "zero_point": zero_point,
        "min": scale * (0 - zero_point),
        "max": scale * (255 - zero_point),
    }
    plot.set_quantizer(entry)
    x, y = plot.curve.getData()
    low, high = entry["min"], entry["max"]
    inside = (x >= low) & (x <= high)
    assert inside.sum() > 255 * 10  # dense enough for every tooth
    assert np.abs(y[inside]).max() <= scale / 2 + 1e-9
    assert np.abs(y[inside]).max() > scale / 2 * 0.99  # the teeth reach ±scale/2
    right, left = x > high + scale, x < low - scale
    assert right.any() and left.any()
    # clamped at the top level: the error falls with slope −1
    assert y[right] == pytest.approx(high - x[right])
    assert y[left] == pytest.approx(low - x[left])
    assert [line.value() for line in plot.edges] == [pytest.approx(low), pytest.approx(high)]
    assert quantize(np.array([high + 1.0]), scale, zero_point, 0, 255)[0] == pytest.approx(high)


def test_per_channel_error_uses_the_largest_scale_by_default_and_says_which(qtbot):
    plot = shown(qtbot, ErrorPlot())
    scales = [0.05, 0.09, 0.07]
    entry = {
        "name": "conv",
        "tensor": "weight",
        "bits": 4,
        "qmin": -7,
        "qmax": 7,
        "scale": scales,
        "zero_point": [0, 0, 0],
        "min": [-7 * s for s in scales],
        "max": [7 * s for s in scales],
    }
    plot.set_quantizer(entry)
    assert plot.channel == 1 and plot.scale == pytest.approx(0.09)
    assert "channel 1 of 3 (largest scale)" in plot.title
    x, y = plot.curve.getData()
    assert x.min() < -7 * 0.09 and x.max() > 7 * 0.09
    plot.set_quantizer(entry, channel=2)
    assert plot.channel == 2 and "channel 2 of 3" in plot.title and "largest" not in plot.title
    assert np.abs(plot.curve.getData()[1][np.abs(plot.curve.getData()[0]) <= 7 * 0.07]).max() <= 0.035 + 1e-9
    plot.clear("No quantizer selected.")
    assert plot.is_empty and plot.message == "No quantizer selected." and plot.title == ""


# -- per-channel ranges --------------------------------------------------------------------------------------
def test_channel_ranges_draw_before_and_after_cle_side_by_side(qtbot):
    arrays = weight_arrays()
    plot = shown(qtbot, ChannelRangesPlot())
    plot.set_ranges(arrays)
    assert list(plot.bars) == ["before CLE", "after CLE"]
    for name, ranges in zip(plot.bars, arrays.cle_ranges):
        opts = plot.bars[name].opts
        assert len(opts["x"]) == CHANNELS
        assert opts["y0"] == pytest.approx(ranges[:, 0])
        assert opts["y0"] + opts["height"] == pytest.approx(ranges[:, 1])
    before, after = plot.bars["before CLE"].opts["x"], plot.bars["after CLE"].opts["x"]
    assert (before < after).all() and (after - before < 1).all()  # side by side within a channel's slot
    assert len(plot.marks.getData()[0]) == 2 * CHANNELS  # the quantizer's lo and hi on each channel


def test_channel_ranges_fall_back_to_the_quantizer_range_then_to_a_message(qtbot):
    arrays = weight_arrays(cle=False)
    plot = shown(qtbot, ChannelRangesPlot())
    plot.set_ranges(arrays)
    assert list(plot.bars) == ["quantizer range (mse)"]
    opts = plot.bars["quantizer range (mse)"].opts
    assert len(opts["x"]) == CHANNELS and opts["y0"] == pytest.approx(arrays.channel_ranges[0][:, 0])
    plot.set_ranges(weight_arrays(cle=False, channels=False))
    assert plot.is_empty and plot.message == NO_CHANNELS and plot.bars == {}


# -- sensitivity ---------------------------------------------------------------------------------------------
def test_sensitivity_chart_has_a_bar_per_layer_per_series_and_reference_lines(qtbot):
    rows = [
        {"layer": "input", "only_this": 0.994, "all_but_this": 0.990},
        {"layer": "features.0", "only_this": 0.992, "all_but_this": 0.983},
        {"layer": "features.4", "only_this": 0.983, "all_but_this": 0.994},
        {"layer": "classifier", "only_this": 0.994, "all_but_this": 0.989},
    ]
    chart = shown(qtbot, SensitivityChart())
    chart.set_rows(rows, 0.9944, 0.981)
    assert set(chart.bars) == {"only_this", "all_but_this"}
    for key, bar in chart.bars.items():
        assert len(bar.opts["y"]) == len(rows)
        assert bar.opts["width"] == pytest.approx([r[key] for r in rows])
    assert chart.references["fp32"].value() == pytest.approx(0.9944)
    assert chart.references["quantized"].value() == pytest.approx(0.981)
    ticks = chart.plot.getAxis("left")._tickLevels[0]
    assert [name for _pos, name in ticks] == [r["layer"] for r in rows]
    assert chart.plot.getViewBox().state["yInverted"]  # the first layer on top
    low, high = chart.plot.getViewBox().viewRange()[0]
    assert 0.9 < low < 0.981 and high > 0.9944  # zoomed on the differences, every bar end in view
    legend = chart.legend_texts
    assert legend == [
        "only this layer quantized",
        "all but this layer quantized",
        "FP32 99.4%",
        "quantized 98.1%",
    ]
    chart.clear("Sensitivity is measured after the ladder.")
    assert chart.is_empty and chart.message == "Sensitivity is measured after the ladder."
    assert chart.plot.getAxis("left")._tickLevels is None


# -- ladder and mixed precision ------------------------------------------------------------------------------
LADDER = [
    {"step": "fp32", "accuracy": 0.9944, "loss": 0.04},
    {"step": "fold_bn", "accuracy": 0.9944, "loss": 0.04},
    {"step": "cle", "accuracy": 0.9944, "loss": 0.04},
    {"step": "weight_ranges", "accuracy": 0.9889, "loss": 0.04},
    {"step": "bias_correction", "accuracy": 0.9944, "loss": 0.04},
    {"step": "activation_ranges", "accuracy": 0.9944, "loss": 0.04},
]


def test_ladder_draws_one_bar_group_per_step_and_one_colour_per_run(qtbot):
    chart = shown(qtbot, LadderChart())
    live = [dict(s, accuracy=s["accuracy"] - 0.01) for s in LADDER[:3]]
    planned = ["fp32", "fold_bn", "cle", "weight_ranges", "adaround", "bias_correction", "activation_ranges"]
    chart.set_ladders([("W4A8", LADDER), ("W4A4", live)], planned=planned)
    assert chart.steps == planned  # pipeline order, AdaRound where it belongs though only planned
    assert [label for label, _ in chart.ladders] == ["W4A8", "W4A4"] and len(chart.bars) == 2
    first, second = chart.bars
    assert len(first.opts["x"]) == len(LADDER) and len(second.opts["x"]) == len(live)
    assert first.opts["brush"].color().name() != second.opts["brush"].color().name()
    assert (second.opts["x"][:3] > first.opts["x"][:3]).all()  # the runs side by side in each step's group
    # The live run's four steps to come are empty slots, at its place in their groups.
    assert chart.slots is not None and len(chart.slots.opts["x"]) == 4
    assert chart.slots.opts["x"] == pytest.approx(np.array([3, 4, 5, 6]) + (second.opts["x"][0] - 0))
    texts = [label.textItem.toPlainText() for label in chart.labels]
    assert "99.4%" in texts and "98.4%" in texts
    ticks = [name for _pos, name in chart.plot.getAxis("bottom")._tickLevels[0]]
    assert ticks[0] == "FP32" and "AdaRound" in ticks


def test_two_runs_value_labels_stand_in_a_column_over_their_group_and_never_overlap(qtbot):
    chart = shown(qtbot, LadderChart(), width=430, height=300)  # as narrow as the Quantization tab gives it
    other = [dict(s, accuracy=s["accuracy"] - 0.0005) for s in LADDER]
    chart.set_ladders([("W4A8", LADDER), ("W8A8", other)])
    qtbot.wait(20)
    assert len(chart.labels) == 2 * len(LADDER)
    assert {label.pos().x() for label in chart.labels} == set(range(len(LADDER)))  # centred on each group
    boxes = [label.mapRectToScene(label.boundingRect()) for label in chart.labels]
    for i, box in enumerate(boxes):
        assert not any(box.intersects(other_box) for other_box in boxes[i + 1 :]), chart.labels[
            i
        ].textItem.toPlainText()
    # each label in its run's colour, the first run's above the second's
    colours = [bar.opts["brush"].color().name() for bar in chart.bars]
    in_first_group = [label for label in chart.labels if label.pos().x() == 0]
    first, second = (
        next(label for label in in_first_group if label.color.name() == colour) for colour in colours
    )
    assert first.textItem.toPlainText() == "99.4%" and second.textItem.toPlainText() == "99.4%"
    assert (
        first.mapToScene(first.boundingRect().center()).y()
        < second.mapToScene(second.boundingRect().center()).y()
    )


def test_a_single_finished_ladder_has_no_slots_and_clears_to_a_message(qtbot):
    chart = shown(qtbot, LadderChart())
    chart.set_ladders([("W4A8", LADDER)], planned=[s["step"] for s in LADDER])
    assert len(chart.bars) == 1 and chart.slots is None
    assert "98.89%" in [label.textItem.toPlainText() for label in chart.labels]
    _low, high = chart.plot.getViewBox().viewRange()[1]
    assert high <= 1.0 + 1e-9  # room for the labels, but no 101 % on an accuracy axis
    chart.clear("Start a quantization run to see its ladder.")
    assert chart.is_empty and chart.message == "Start a quantization run to see its ladder."
    assert chart.bars == [] and chart.ladders == [] and chart.title == ""


def test_mixed_precision_plot_marks_points_the_proposal_fp32_and_the_target(qtbot):
    proposal = {
        "target_drop": 0.005,
        "layers": [{"name": "features.0", "bits": 8}],
        "accuracy": 0.985,
        "size_bytes": 14_000,
        "met": True,
        "fp32_accuracy": 0.9944,
        "fp32_size_bytes": 77_864,
        "points": [
            {"layers": [], "accuracy": 0.95, "size_bytes": 10_104},
            {"layers": ["features.0"], "accuracy": 0.985, "size_bytes": 14_000},
            {"layers": ["features.0", "classifier"], "accuracy": 0.992, "size_bytes": 30_000},
        ],
    }
    plot = shown(qtbot, MixedPrecisionPlot())
    plot.set_proposal(proposal)
    x, y = plot.points.getData()
    assert x == pytest.approx(np.array([10_104, 14_000, 30_000]) / 1024) and y == pytest.approx(
        [0.95, 0.985, 0.992]
    )
    assert plot.proposal.getData()[0] == pytest.approx([14_000 / 1024])
    assert plot.fp32.getData()[1] == pytest.approx([0.9944])
    assert plot.target.value() == pytest.approx(0.9894)
    legend = plot.legend_texts
    assert legend[0] == "configurations tried"
    assert legend[1] == "proposal: 98.5% at 13.7 KiB, 5.6× smaller than FP32 (1 layer at more bits)"
    assert legend[2:] == ["FP32: 99.4% at 76.0 KiB", "target: at most 0.5% below FP32"]
    assert "target met" in plot.title
    x0, x1 = plot.plot.getViewBox().viewRange()[0]
    assert x0 == pytest.approx(0) and x1 > 77_864 / 1024
    plot.clear("No mixed-precision search in this run.")
    assert plot.is_empty and plot.message == "No mixed-precision search in this run." and plot.points is None


# -- legends beside or above the plots: none covers data -----------------------------------------------------
SENSITIVITY_ROWS = [
    {"layer": name, "only_this": 0.944 - i * 0.002, "all_but_this": 0.939}
    for i, name in enumerate(["input", "features.0", "features.4", "pool", "classifier"])
]
MIXED_PRECISION = {
    "target_drop": 0.003,
    "layers": [{"name": "features.0", "bits": 8}],
    "accuracy": 0.944,
    "size_bytes": 20_072,
    "met": True,
    "fp32_accuracy": 0.9944,
    "fp32_size_bytes": 77_864,
    "points": [
        {"layers": [], "accuracy": 0.939, "size_bytes": 10_104},
        {"layers": ["features.0"], "accuracy": 0.944, "size_bytes": 20_072},
    ],
}


def rect_in(panel, widget):
    """A child widget's rectangle in the panel's coordinates."""
    from PySide6.QtCore import QPoint, QRect

    return QRect(widget.mapTo(panel, QPoint(0, 0)), widget.size())


def scene_rect_in(panel, items):
    """The union of pyqtgraph items' scene rectangles (bars, markers, labels) in the panel's coordinates."""
    from PySide6.QtCore import QRectF

    union = QRectF()
    for item in items:
        union = union.united(item.sceneBoundingRect())
    view = panel.plot
    return view.mapFromScene(union).boundingRect().translated(view.mapTo(panel, view.rect().topLeft()))


def view_rect_in(panel):
    return scene_rect_in(panel, [panel.plot.getViewBox()])


def draw(qtbot, kind, width=940, height=235):
    """A panel drawn as in the Quantization tab at 1400x820, where the plots are about 940x235 (the ladder
    430)."""
    if kind == "sensitivity":
        panel = shown(qtbot, SensitivityChart(), width, height)
        panel.set_rows(SENSITIVITY_ROWS, 0.9944, 0.939)
        items = list(panel.bars.values()) + panel.labels
    elif kind == "channels":
        panel = shown(qtbot, ChannelRangesPlot(), width, height)
        panel.set_ranges(weight_arrays())
        items = [*panel.bars.values(), panel.marks]
    elif kind == "mixed precision":
        panel = shown(qtbot, MixedPrecisionPlot(), width, height)
        panel.set_proposal(MIXED_PRECISION)
        items = [panel.points, panel.proposal, panel.fp32]
    elif kind == "error":
        panel = shown(qtbot, ErrorPlot(), width, height)
        panel.set_quantizer(
            {
                "name": "features.4",
                "tensor": "weight",
                "bits": 4,
                "scale": 0.05,
                "zero_point": 0,
                "qmin": -7,
                "qmax": 7,
                "min": -0.35,
                "max": 0.35,
            }
        )
        items = [panel.curve]
    else:
        panel = shown(qtbot, LadderChart(), width, height)
        panel.set_ladders(
            [
                ("W4A8 20261127-085550-quant-c518b9", LADDER),
                (
                    "W8A8 20261127-085549-quant-5de3af",
                    [dict(s, accuracy=s["accuracy"] - 0.0005) for s in LADDER],
                ),
            ]
        )
        items = panel.bars + panel.labels
    qtbot.waitUntil(lambda: panel.legend.isVisible() and panel.plot.getViewBox().height() > 0)
    qtbot.wait(20)  # the rows, labels and ticks refit to the view's first size
    return panel, items


@pytest.mark.parametrize("kind", ["sensitivity", "channels", "mixed precision", "error"])
def test_the_legend_stands_beside_the_plot_and_covers_none_of_its_data(qtbot, kind):
    """Over the plot, the legend covered the top bars (sensitivity, channel ranges) and the middle of the
    sawtooth (error), or took half the height from the markers (mixed precision); beside it, it covers
    nothing."""
    panel, items = draw(qtbot, kind)
    legend, plot, data = rect_in(panel, panel.legend), rect_in(panel, panel.plot), scene_rect_in(panel, items)
    assert panel.legend_place == "beside" and panel.legend.texts
    assert not legend.intersects(plot) and legend.left() >= plot.right()
    assert not legend.intersects(data)
    view = view_rect_in(panel)
    if kind == "sensitivity":
        # the bars run off the left edge on purpose: the axis starts under the lowest value
        data.setLeft(view.left())
    if kind != "error":  # the sawtooth's clipping lines leave the view on purpose, rising
        assert view.adjusted(-1, -1, 1, 1).contains(data)  # every bar, marker and label in view


def test_without_the_legend_over_them_the_bars_fill_the_height(qtbot):
    chart, _items = draw(qtbot, "sensitivity")
    assert chart.plot.getViewBox().viewRange()[1] == pytest.approx([-0.5, len(SENSITIVITY_ROWS) - 0.5])
    plot, _ = draw(qtbot, "channels")
    low, high = plot.plot.getViewBox().viewRange()[1]
    bars = plot.bars["before CLE"].opts
    top = max(float((bars["y0"] + bars["height"]).max()), float(plot.marks.getData()[1].max()))
    assert top < high <= top + 0.05 * (high - low)  # a little air above the highest bar, no legend's room
    mixed, _ = draw(qtbot, "mixed precision")
    _low, high = mixed.plot.getViewBox().viewRange()[1]
    # the markers drawn as the plot draws them
    assert high > 0.9944 and mixed.legend.swatches[1].symbol == "star"


def test_sensitivity_value_labels_show_at_the_tabs_default_size_and_shrink_before_they_hide(qtbot):
    from PySide6.QtGui import QFontMetrics

    from workbench.gui.panels.quant.sensitivity_chart import LABEL_FONTS, LABEL_SIZES

    chart, _items = draw(qtbot, "sensitivity")  # the Sensitivity tab at 1400x820
    assert chart.labels and all(label.isVisible() for label in chart.labels)
    assert {label.textItem.font().pointSizeF() for label in chart.labels} == {LABEL_SIZES[0]}
    # Each label on its own bar: centred on it, no taller than it (a pixel or two over), in no other bar's
    # row.
    view = chart.plot.getViewBox()
    pixels_per_row = view.height() / len(SENSITIVITY_ROWS)
    for label in chart.labels:
        centre = view.mapViewToScene(label.pos()).y()  # the bar's centre: the label stands at its end
        assert label.sceneBoundingRect().center().y() == pytest.approx(centre, abs=1.5)
        assert QFontMetrics(label.textItem.font()).height() - 2 <= chart.bar_pixels() < pixels_per_row / 2
    # More layers in the same room: thinner bars, then a smaller font, then no labels (the bars stay); a label
    # shows whenever a font fits its bar.
    sizes = []
    for count in range(6, 41):
        chart.set_rows(
            [dict(r, layer=f"layer{i}") for i, r in enumerate(SENSITIVITY_ROWS * 8)][:count], 0.9944, 0.939
        )
        qtbot.wait(5)
        shown_labels = {label.isVisible() for label in chart.labels}
        assert len(shown_labels) == 1
        size = chart.labels[0].textItem.font().pointSizeF() if shown_labels == {True} else None
        if size is not None:  # the text fits its bar
            assert QFontMetrics(chart.labels[0].textItem.font()).height() - 2 <= chart.bar_pixels()
        else:  # no font fits
            assert all(QFontMetrics(font).height() - 2 > chart.bar_pixels() for font in LABEL_FONTS)
        sizes.append(size)
    assert sizes[0] == LABEL_SIZES[0] and sizes[-1] is None
    assert LABEL_SIZES[-1] in sizes  # between the two, the smaller font
    order = [LABEL_SIZES[0], LABEL_SIZES[-1], None]
    assert [order.index(size) for size in sizes] == sorted(order.index(size) for size in sizes)
    assert len(chart.bars["only_this"].opts["y"]) == 40


@pytest.mark.parametrize("height", [300, 220])
def test_two_ladders_legend_stands_above_the_plot_and_their_labels_stay_in_view(qtbot, height):
    """The ladder's panel is narrow: its legend stands above the plot, and the room above the bars is what the
    labels need at the panel's height, not a legend's."""
    chart, items = draw(qtbot, "ladder", width=430, height=height)
    legend, plot = rect_in(chart, chart.legend), rect_in(chart, chart.plot)
    assert chart.legend_place == "above" and len(chart.legend.texts) == 2
    assert not legend.intersects(plot) and legend.bottom() <= plot.top()
    view, labels = view_rect_in(chart), scene_rect_in(chart, chart.labels)
    # a label's box holds its text and this
    margin = int(chart.labels[0].textItem.document().documentMargin())
    assert view.adjusted(-1, -1, 1, 1).contains(labels.adjusted(0, margin, 0, -margin))  # no label is cut off
    assert labels.top() - view.top() < 12  # and the view keeps no legend's worth of empty room above them


def test_titles_and_plots_follow_a_live_theme_switch(qtbot, qapp):
    histogram = shown(qtbot, RangeHistogram())
    histogram.set_tensor(weight_arrays(), {"bits": 4})
    try:
        apply_theme(qapp, "dark")
        qtbot.wait(10)
        base = qapp.palette().color(QPalette.Base)
        assert histogram.title_label.palette().color(histogram.title_label.backgroundRole()) == base
        assert histogram.plot.backgroundBrush().color() == base
    finally:
        apply_theme(qapp, "light")
