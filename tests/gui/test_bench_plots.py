"""The benchmark's latency plot on its own: its lines stay clear of the legend at any panel height, until the
user zooms."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.gui.panels.export.bench_plots import LatencyPlot
from workbench.gui.panels.export.results import BenchResults

# Four backends a decade apart at batch 1 and climbing to the right: the lines start low on the left, where
# the top-left legend stands.
LATENCY = {
    "eager": (0.19, 0.47, 1.09),
    "torchscript": (0.11, 0.55, 0.85),
    "onnxruntime": (0.016, 0.047, 0.15),
    "onnxruntime_int8": (0.018, 0.05, 0.14),
}


def _results() -> BenchResults:
    rows = [
        {
            "backend": backend,
            "batch_size": batch,
            "status": "ok",
            "latency_ms": {"p50": p50, "p90": p50 * 1.3, "min": p50 * 0.9},
        }
        for backend, values in LATENCY.items()
        for batch, p50 in zip((1, 8, 32), values)
    ]
    return BenchResults(run_id="20261123-052518-bench-d425c8", report={"results": rows})


def _legend_bottom(plot: LatencyPlot) -> float:
    """The legend's lower edge in the view's coordinates (log10 of milliseconds)."""
    legend = plot.legend
    return plot.plot.getViewBox().mapSceneToView(legend.mapToScene(legend.boundingRect().bottomLeft())).y()


@pytest.mark.parametrize("height", [260, 420])
def test_the_lines_stay_under_the_legend_at_any_height(qtbot, height):
    plot = LatencyPlot()
    qtbot.addWidget(plot)
    plot.resize(880, height)
    plot.show()
    qtbot.waitExposed(plot)
    plot.set_results(_results())
    qtbot.wait(20)
    highest = np.log10(max(p50 * 1.3 for values in LATENCY.values() for p50 in values))  # the p90 band's top
    assert plot.legend.isVisible() and len(plot.legend.items) == 4
    assert _legend_bottom(plot) > highest
    plot.resize(880, height + 200)  # a resize fits again
    qtbot.waitUntil(lambda: _legend_bottom(plot) > highest)
    low, _high = plot.plot.getViewBox().viewRange()[1]
    assert low < np.log10(0.016 * 0.9)  # and nothing falls off the bottom


def test_a_users_zoom_is_kept_through_a_resize(qtbot):
    plot = LatencyPlot()
    qtbot.addWidget(plot)
    plot.resize(880, 300)
    plot.show()
    qtbot.waitExposed(plot)
    plot.set_results(_results())
    view = plot.plot.getViewBox()
    view.sigRangeChangedManually.emit(view.state["mouseEnabled"])  # what a wheel zoom emits
    view.setYRange(-1.0, 0.0, padding=0)
    plot.resize(880, 500)
    qtbot.wait(20)
    assert view.viewRange()[1] == pytest.approx([-1.0, 0.0])
