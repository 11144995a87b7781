"""A doctor finding's evidence, drawn by its cause: per-channel range bars with the widest picked out, the
concat inputs' ranges as horizontal bars, a histogram with its clip lines, per-channel bias error; any other
cause as a small table of its numbers. Plots zoom and pan as every plot of the tab does."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHeaderView, QStackedWidget, QTableWidget, QTableWidgetItem

from workbench.gui.panels.quant.plot_panel import CLIPPING, IN_USE, NEUTRAL, PlotPanel, brush, pen

EMPTY = (
    "Pick a finding: its evidence (channel ranges, the concat inputs' ranges, the histogram) appears here."
)
HIGHLIGHT = CLIPPING  # the channels or the input the finding is about, in the tab's "this hurts" red
HISTOGRAM_CAUSES = ("clipping", "weight_outliers")


def _numbers(values) -> np.ndarray:
    try:
        array = np.asarray(values if values is not None else [], dtype=float).ravel()
    except (TypeError, ValueError):
        return np.zeros(0)
    return array


def _number(value) -> float | None:
    return (
        float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


class EvidencePlot(PlotPanel):
    """One plot redrawn per finding. After drawing, `kind` names what it drew ("channels", "inputs",
    "histogram", "bias"), `values` holds the bars' values and `highlighted` the indices drawn in red."""

    def __init__(self, parent=None):
        super().__init__("", "", empty=EMPTY, legend="above", parent=parent)
        self.kind = ""
        self.values = np.zeros(0)
        self.highlighted: list[int] = []
        self.clip_lines: list[float] = []

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.kind, self.values, self.highlighted, self.clip_lines = "", np.zeros(0), [], []
        self.plot.getAxis("left").setTicks(None)
        self.plot.getAxis("bottom").setTicks(None)

    def _bars(
        self,
        x: np.ndarray,
        heights: np.ndarray,
        highlighted: list[int],
        names: tuple[str, str],
        tips: tuple[str, str],
        y0=0.0,
    ) -> None:
        """Bars at `x`, the `highlighted` ones in red, each group with its legend row."""
        mask = np.zeros(len(x), dtype=bool)
        mask[[i for i in highlighted if 0 <= i < len(x)]] = True
        for chosen, colour, name, tip in (
            (~mask, IN_USE, names[0], tips[0]),
            (mask, HIGHLIGHT, names[1], tips[1]),
        ):
            if chosen.any():
                base = y0[chosen] if isinstance(y0, np.ndarray) else y0
                self.plot.addItem(
                    pg.BarGraphItem(
                        x=x[chosen],
                        y0=base,
                        height=heights[chosen],
                        width=0.8,
                        brush=brush(colour, 210),
                        pen=None,
                    )
                )
                self.add_legend_bars(name, brush(colour, 210), tooltip=tip)

    def show_channels(self, layer: str, evidence: dict) -> bool:
        """outlier_channels: a bar per channel's range, the widest in red, the max/median ratio in the
        title."""
        ranges = _numbers(evidence.get("ranges"))
        if not ranges.size:
            return False
        self.clear()
        widest = [int(i) for i in evidence.get("channels") or [] if isinstance(i, (int, float))]
        ratio = _number(evidence.get("ratio"))
        axis = "input" if evidence.get("axis") == 1 else "output"
        self._bars(
            np.arange(len(ranges), dtype=float),
            ranges,
            widest,
            ("channel range", "widest channels"),
            (
                "Each channel's range (max |x|, or hi − lo)",
                "The channels that set the per-tensor range: every other channel gets few of its codes",
            ),
        )
        self.set_axis("left", "range", "plain")
        self.set_axis("bottom", f"{axis} channel", "plain")
        self.set_title(
            f"{layer}: range per {axis} channel" + (f" · widest / median {ratio:.1f}×" if ratio else "")
        )
        self.kind, self.values, self.highlighted = "channels", ranges, widest
        self.finish()
        return True

    def show_inputs(self, layer: str, evidence: dict) -> bool:
        """mixed_range_concat: one horizontal bar per input over [lo, hi]; the narrowest in red."""
        inputs = [
            i
            for i in evidence.get("inputs") or []
            if isinstance(i, dict) and _number(i.get("lo")) is not None and _number(i.get("hi")) is not None
        ]
        if not inputs:
            return False
        self.clear()
        lo = np.array([float(i["lo"]) for i in inputs])
        hi = np.array([float(i["hi"]) for i in inputs])
        narrow = int(np.argmin(hi - lo))
        y = np.arange(len(inputs), dtype=float)
        for chosen, colour, name, tip in (
            (y != narrow, IN_USE, "input range", "An input's range [lo, hi] as calibration saw it"),
            (
                y == narrow,
                HIGHLIGHT,
                "narrowest input",
                "Shares one grid with the wider input, so it gets only a few of its codes",
            ),
        ):
            if chosen.any():
                self.plot.addItem(
                    pg.BarGraphItem(
                        x0=lo[chosen],
                        width=(hi - lo)[chosen],
                        y=y[chosen],
                        height=0.6,
                        brush=brush(colour, 210),
                        pen=None,
                    )
                )
                self.add_legend_bars(name, brush(colour, 210), tooltip=tip)
        names = [str(i.get("name") or f"input {n}") for n, i in enumerate(inputs)]
        self.plot.getAxis("left").setTicks([[(float(n), name) for n, name in enumerate(names)]])
        self.plot.addItem(
            pg.InfiniteLine(0.0, angle=90, movable=False, pen=pen(NEUTRAL, 1.0)), ignoreBounds=True
        )
        self.set_axis("left", "input", "plain")
        self.set_axis("bottom", "value", "plain")
        op = str(evidence.get("op") or "cat")
        lost, ratio = _number(evidence.get("lost_share")), _number(evidence.get("range_ratio"))
        words = [f"{layer}: the inputs of its {op} share one grid"]
        if ratio:
            words.append(f"range ratio {ratio:.1f}×")
        if lost is not None:
            words.append(f"the narrowest loses {lost:.0%} of its codes")
        self.set_title(" · ".join(words))
        self.plot.setYRange(-0.7, len(inputs) - 0.3, padding=0)
        self.kind, self.values, self.highlighted = "inputs", hi - lo, [narrow]
        self.finish()
        return True

    def show_histogram(self, layer: str, cause: str, evidence: dict) -> bool:
        """clipping / weight_outliers: the values' histogram (when sent) with the clip lines, or the max and
        the 99.9th percentile of |w| as two bars."""
        histogram = evidence.get("histogram") or {}
        edges, counts = _numbers(histogram.get("edges")), _numbers(histogram.get("counts"))
        if len(counts) and len(edges) > len(counts) + 1:
            # Bins merged by a stride can repeat the last edge: the first len(counts) edges and the last one.
            edges = np.append(edges[: len(counts)], edges[-1])
        self.clear()
        if len(edges) == len(counts) + 1 and len(counts):
            self.plot.addItem(
                pg.PlotDataItem(
                    edges,
                    counts,
                    stepMode="center",
                    fillLevel=0,
                    brush=brush(IN_USE, 120),
                    pen=pen(IN_USE, 1.2),
                )
            )
            self.add_legend_bars("values", brush(IN_USE, 120), tooltip="How many values fall in each bin")
            self.set_axis("left", "count", "plain")
            self.set_axis("bottom", "value", "plain")
            self.values = counts
        elif cause == "weight_outliers" and _number(evidence.get("max")) is not None:
            heights = np.array([_number(evidence.get("p999")) or 0.0, float(evidence["max"])])
            self._bars(
                np.arange(2, dtype=float),
                heights,
                [1],
                ("99.9th percentile |w|", "largest |w|"),
                ("All but one weight in a thousand are within this", "The outlier that stretches the grid"),
            )
            self.plot.getAxis("bottom").setTicks([[(0.0, "p99.9 |w|"), (1.0, "max |w|")]])
            self.set_axis("left", "|w|", "plain")
            self.set_axis("bottom", "", "plain")
            self.values, self.highlighted = heights, [1]
        else:
            return False
        # The clip lines on a histogram of values; on the two |w| bars they would stand at meaningless x.
        lines = (
            [v for v in (_number(evidence.get("lo")), _number(evidence.get("hi"))) if v is not None]
            if len(counts)
            else []
        )
        for value in lines:
            self.plot.addItem(
                pg.InfiniteLine(value, angle=90, movable=False, pen=pen(CLIPPING, 1.8, Qt.DashLine))
            )
        if lines:
            self.add_legend_line(
                "clipping range",
                pen(CLIPPING, 1.8, Qt.DashLine),
                "Values beyond these lines are clipped to them",
            )
        words = [f"{layer}: {'clipping' if cause == 'clipping' else 'weight outliers'}"]
        clip, rounding = _number(evidence.get("clip_share")), _number(evidence.get("round_share"))
        if clip is not None:
            words.append(
                f"clipping {clip:.0%} of the error"
                + (f", rounding {rounding:.0%}" if rounding is not None else "")
            )
        ratio = _number(evidence.get("ratio"))
        if cause == "weight_outliers" and ratio:
            words.append(f"max / p99.9 {ratio:.1f}×")
        self.set_title(" · ".join(words))
        self.kind, self.clip_lines = "histogram", lines
        self.finish()
        return True

    def show_bias(self, layer: str, evidence: dict) -> bool:
        """bias_shift: each channel's mean output error, the worst in red."""
        errors = _numbers(evidence.get("mean_error"))
        if not errors.size:
            return False
        self.clear()
        worst = evidence.get("worst_channel")
        worst = [int(worst)] if isinstance(worst, (int, float)) else [int(np.argmax(np.abs(errors)))]
        self._bars(
            np.arange(len(errors), dtype=float),
            errors,
            worst,
            ("mean error", "worst channel"),
            (
                "A channel's mean quantized − float output: a shift bias correction removes",
                "The channel whose output moved most",
            ),
        )
        self.plot.addItem(
            pg.InfiniteLine(0.0, angle=0, movable=False, pen=pen(NEUTRAL, 1.0)), ignoreBounds=True
        )
        self.set_axis("left", "mean error", "plain")
        self.set_axis("bottom", "output channel", "plain")
        self.set_title(f"{layer}: mean output error per channel (quantized − float)")
        self.kind, self.values, self.highlighted = "bias", errors, worst
        self.finish()
        return True


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        text = ", ".join(
            _cell(v) if not isinstance(v, list) else " – ".join(map(_cell, v)) for v in value[:12]
        )
        return text + (" …" if len(value) > 12 else "")
    return str(value)


class EvidenceView(QStackedWidget):
    """The plot for the causes that have one, else a key/value table of the evidence's numbers."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.plot = EvidencePlot()
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["evidence", "value"])
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setToolTip("The numbers the doctor measured for this finding")
        self.plot.setToolTip("The finding's evidence: drag to pan, wheel to zoom, right-click for more")
        self.addWidget(self.plot)
        self.addWidget(self.table)

    def clear(self, message: str = "") -> None:
        self.plot.clear(message)
        self.setCurrentWidget(self.plot)

    def show_finding(self, finding: dict) -> None:
        layer, cause = str(finding.get("layer", "")), str(finding.get("cause", ""))
        evidence = finding.get("evidence") if isinstance(finding.get("evidence"), dict) else {}
        drawn = False
        if cause == "outlier_channels":
            drawn = self.plot.show_channels(layer, evidence)
        elif cause == "mixed_range_concat":
            drawn = self.plot.show_inputs(layer, evidence)
        elif cause in HISTOGRAM_CAUSES:
            drawn = self.plot.show_histogram(layer, cause, evidence)
        elif cause == "bias_shift":
            drawn = self.plot.show_bias(layer, evidence)
        if drawn:
            self.setCurrentWidget(self.plot)
            return
        self.plot.clear()
        self.table.setRowCount(0)
        for key, value in evidence.items():
            row = self.table.rowCount()
            self.table.insertRow(row)
            self.table.setItem(row, 0, QTableWidgetItem(str(key).replace("_", " ")))
            self.table.setItem(row, 1, QTableWidgetItem(_cell(value)))
        self.setCurrentWidget(self.table)
