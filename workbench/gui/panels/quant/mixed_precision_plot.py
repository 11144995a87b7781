"""The mixed-precision search: accuracy (or a task's monitor, "val MAE ↓") against model size for every
configuration tried, the proposal highlighted, FP32 marked and the target drawn, so the trade-off the proposal
makes is visible. The legend stands beside the plot, so no marker hides under it."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.plot_panel import (
    CLIPPING,
    FP32,
    IN_USE,
    NEUTRAL,
    PlotPanel,
    brush,
    finite,
    pen,
)

EMPTY = "The mixed-precision search's configurations (accuracy against model size) appear here."
KIB = 1024.0
MARGIN = 0.12  # of the values' span, around the markers: a marker is drawn in pixels, not in the axis' units


def layer_names(layers) -> list[str]:
    """A point's or the proposal's layers, given as names or as {name, bits}."""
    return [str(layer.get("name", "?")) if isinstance(layer, dict) else str(layer) for layer in layers or []]


def size_text(size_bytes: float) -> str:
    return f"{size_bytes / KIB:,.1f} KiB" if size_bytes < KIB * KIB else f"{size_bytes / KIB / KIB:,.2f} MiB"


class MixedPrecisionPlot(PlotPanel):
    """`set_proposal(proposal, metric)` draws the report's mixed_precision block: `points` (a scatter, joined
    in order of size), `proposal` and `fp32` (one marker each) and `target` (a horizontal line). `metric` (the
    result's metric block; None: accuracy) names the values; for a lower-is-better one the target lies above
    FP32."""

    def __init__(self, parent=None):
        super().__init__(
            "accuracy", "model size (KiB)", empty=EMPTY, y_format="percent", legend="beside", parent=parent
        )
        self.points: pg.ScatterPlotItem | None = None
        self.proposal: pg.ScatterPlotItem | None = None
        self.fp32: pg.ScatterPlotItem | None = None
        self.target: pg.InfiniteLine | None = None
        self.measure = Measure()

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.points = self.proposal = self.fp32 = None
        self.target = None

    def set_proposal(self, proposal: dict, metric: dict | None = None) -> None:
        self.clear()
        self.measure = measure = Measure.of(metric)
        self.set_axis("left", measure.axis, measure.fmt)
        points = [
            p
            for p in proposal.get("points") or []
            if _finite(p.get("accuracy")) and _finite(p.get("size_bytes"))
        ]
        if not points and not _finite(proposal.get("accuracy")):
            self.clear("The mixed-precision search found no configuration to show.")
            return
        points.sort(key=lambda p: float(p["size_bytes"]))
        x = np.array([float(p["size_bytes"]) / KIB for p in points])
        y = np.array([float(p["accuracy"]) for p in points])
        tips = [
            f"{', '.join(layer_names(p.get('layers'))) or 'every layer at the low bit width'}" for p in points
        ]
        if len(points) > 1:
            self.plot.plot(x, y, pen=pen(NEUTRAL, 1.2, Qt.DotLine))  # the trade-off curve the search walked
        self.points = pg.ScatterPlotItem(
            x=x,
            y=y,
            data=tips,
            symbol="o",
            size=8,
            pen=pen(NEUTRAL, 1.0),
            brush=brush(NEUTRAL, 200),
            hoverable=True,
            tip=lambda x, y, data: f"{data}\n{x:,.1f} KiB · {measure.text(y, 2)}",
        )
        self.plot.addItem(self.points)
        self.add_legend_marker(
            "configurations tried",
            "o",
            8,
            pen(NEUTRAL, 1.0),
            brush(NEUTRAL, 200),
            "Each configuration the search measured: which layers it kept at more bits, its "
            "size and its " + measure.axis,
        )
        names = layer_names(proposal.get("layers"))
        met = proposal.get("met")
        if _finite(proposal.get("accuracy")) and _finite(proposal.get("size_bytes")):
            bits = ", ".join(
                f"{layer.get('name')} {layer.get('bits')}-bit"
                for layer in proposal.get("layers") or []
                if isinstance(layer, dict)
            )
            colour = IN_USE if met is not False else CLIPPING
            self.proposal = pg.ScatterPlotItem(
                x=[float(proposal["size_bytes"]) / KIB],
                y=[float(proposal["accuracy"])],
                symbol="star",
                size=18,
                pen=pen(colour, 1.2),
                brush=brush(colour),
                hoverable=True,
                tip=lambda x, y, data, text=bits or "no layer wider": text,
            )
            self.plot.addItem(self.proposal)
            self.add_legend_marker(
                self._proposal_label(proposal, names),
                "star",
                18,
                pen(colour, 1.2),
                brush(colour),
                f"Kept at more bits: {bits}" if bits else "No layer kept at more bits",
            )
        fp32_accuracy, fp32_size = proposal.get("fp32_accuracy"), proposal.get("fp32_size_bytes")
        if _finite(fp32_accuracy) and _finite(fp32_size):
            self.fp32 = pg.ScatterPlotItem(
                x=[float(fp32_size) / KIB],
                y=[float(fp32_accuracy)],
                symbol="s",
                size=11,
                pen=pen(FP32, 1.2),
                brush=brush(FP32),
            )
            self.plot.addItem(self.fp32)
            self.add_legend_marker(
                f"FP32: {measure.text(fp32_accuracy)} at {size_text(float(fp32_size))}",
                "s",
                11,
                pen(FP32, 1.2),
                brush(FP32),
            )
            if _finite(proposal.get("target_drop")):
                target = measure.target(float(fp32_accuracy), float(proposal["target_drop"]))
                target_pen = pen(FP32, 1.4, Qt.DashLine)
                self.target = pg.InfiniteLine(target, angle=0, movable=False, pen=target_pen)
                self.plot.addItem(self.target, ignoreBounds=True)
                self.add_legend_line(
                    f"target: {measure.allowed_text(float(proposal['target_drop']))}", target_pen
                )
        verdict = {True: "target met", False: "target missed"}.get(met, "")
        self.set_title(
            f"Mixed precision: {measure.axis} against model size" + (f" · {verdict}" if verdict else "")
        )
        self._fit_view()
        self.finish()

    def _proposal_label(self, proposal: dict, names: list[str]) -> str:
        """On up to three lines, so that the legend beside the plot stays narrow (its `texts` join them)."""
        size = float(proposal["size_bytes"])
        text = f"proposal: {self.measure.text(proposal['accuracy'])} at {size_text(size)}"
        fp32_size = proposal.get("fp32_size_bytes")
        if _finite(fp32_size) and size > 0:
            text += f",\n{float(fp32_size) / size:.1f}× smaller than FP32"
        if names:
            text += f"\n({len(names)} layer{'s' * (len(names) != 1)} at more bits)"
        return text

    def _fit_view(self) -> None:
        """Every marker and the target in view, with room for the markers' size, and sizes from 0 (how much
        smaller reads off the axis)."""
        items = [i for i in (self.points, self.proposal, self.fp32) if i is not None]
        xs = finite(np.concatenate([i.getData()[0] for i in items])) if items else np.array([])
        ys = finite(
            np.concatenate([i.getData()[1] for i in items] + ([[self.target.value()]] if self.target else []))
        )
        if not len(xs) or not len(ys):
            return
        x_span = max(float(xs.max() - xs.min()), float(xs.max()) * 0.05, 1e-9)
        y_span = max(
            float(ys.max() - ys.min()), 0.005 if self.measure.accuracy else abs(float(ys.max())) * 0.02, 1e-12
        )
        self.plot.setXRange(0.0, float(xs.max()) + x_span * 0.08, padding=0)
        self.plot.setYRange(float(ys.min()) - y_span * MARGIN, float(ys.max()) + y_span * MARGIN, padding=0)


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
