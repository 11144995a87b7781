"""The accuracy ladder: accuracy (or a task's monitor, "val MSE ↓") after each step of the quantization
pipeline, a bar group per step and a colour per run (two runs side by side), with the steps still to come
shown as empty slots that fill in live. The legend stands above the plot (the panel is narrow), so it hides no
bar and no value."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics

from workbench.gui.panels.quant.metric import Measure
from workbench.gui.panels.quant.plot_panel import PlotPanel, brush, finite, pen
from workbench.gui.plots import run_colour

EMPTY = (
    "The accuracy after each step (FP32, BN folding, CLE, ranges, AdaRound, bias correction, QAT) appears "
    "here."
)
PIPELINE = (
    "fp32",
    "fold_bn",
    "cle",
    "weight_ranges",
    "adaround",
    "bias_correction",
    "activation_ranges",
    "qat",
)
# Two lines where a name has two words: eight steps side by side leave a narrow panel ~60 px a name.
STEP_NAMES = {
    "fp32": "FP32",
    "fold_bn": "fold BN",
    "cle": "CLE",
    "weight_ranges": "weight\nranges",
    "adaround": "AdaRound",
    "bias_correction": "bias\ncorrection",
    "activation_ranges": "act.\nranges",
    "qat": "QAT",
}
GROUP_WIDTH = 0.8
LABEL_FONT = QFont()
LABEL_FONT.setPointSize(8)
LABEL_AIR = 4  # pixels between the top label and the top of the view


def step_order(ladders: list[list[dict]], planned: list[str]) -> list[str]:
    """The steps to show, in pipeline order; a step the pipeline does not know goes after the ones it
    follows."""
    seen: list[str] = []
    for step in [s.get("step") for ladder in ladders for s in ladder] + list(planned):
        if step and step not in seen:
            seen.append(step)
    known = [s for s in PIPELINE if s in seen]
    return known + [s for s in seen if s not in known]


class LadderChart(PlotPanel):
    """`set_ladders([(label, ladder), ...], planned)` draws each run's {step, accuracy, loss} rungs; `planned`
    (the steps the live run, the last one, will make) adds empty slots for the rungs still to come.

    `metric` (a result's metric block; None: accuracy) names what the rungs' "accuracy" holds. `ladders` holds
    what was drawn, `bars` one BarGraphItem per run, `slots` the empty slots and `labels` the value labels."""

    def __init__(self, parent=None):
        super().__init__("accuracy", "", empty=EMPTY, y_format="percent", legend="above", parent=parent)
        self.bars: list[pg.BarGraphItem] = []
        self.slots: pg.BarGraphItem | None = None
        self.labels: list[pg.TextItem] = []
        self.steps: list[str] = []
        self.ladders: list[tuple[str, list[dict]]] = []  # what was drawn, as given
        self.measure = Measure()
        # (bottom, highest rung, span, label lines) while a resize refits the room above the bars for the
        # labels; None once the user zooms or pans.
        self._fit: tuple[float, float, float, int] | None = None
        view = self.plot.getViewBox()
        view.sigResized.connect(self._fit_top)
        view.sigRangeChangedManually.connect(self._stop_fitting)

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.bars.clear()
        self.labels.clear()
        self.slots = None
        self.steps = []
        self.ladders = []
        self._fit = None
        self.plot.getAxis("bottom").setHeight(None)

    def set_ladders(
        self,
        ladders: list[tuple[str, list[dict]]],
        planned: list[str] | None = None,
        metric: dict | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.clear()
        self.measure = measure = Measure.of(metric)
        self.set_axis("left", measure.axis, measure.fmt)
        ladders = [(label, list(ladder or [])) for label, ladder in ladders]
        planned = list(planned or [])
        self.steps = step_order([ladder for _, ladder in ladders], planned)
        if not self.steps or not ladders:
            self.clear(EMPTY)
            return
        self.ladders = ladders
        # A note (which ops module-level quantization left float) qualifies every rung, so it rides in the
        # title.
        self.set_title(
            f"{measure.title} after each step"
            + ("" if len(ladders) == 1 else ", per run")
            + "".join(f" · {note}" for note in notes or [])
        )
        width = GROUP_WIDTH / len(ladders)
        position = {step: i for i, step in enumerate(self.steps)}
        accuracies: list[float] = []
        # step position -> each run's (accuracy, colour), in run order
        groups: dict[int, list[tuple[float, str]]] = {}
        for run, (label, ladder) in enumerate(ladders):
            colour = run_colour(run)
            rungs = [
                (position[s["step"]], float(s["accuracy"]))
                for s in ladder
                if s.get("step") in position and _finite(s.get("accuracy"))
            ]
            offset = (run - (len(ladders) - 1) / 2) * width
            x = np.array([p for p, _ in rungs], dtype=float) + offset
            heights = np.array([a for _, a in rungs], dtype=float)
            bar = pg.BarGraphItem(x=x, height=heights, width=width * 0.9, brush=brush(colour, 220), pen=None)
            self.plot.addItem(bar)
            self.bars.append(bar)
            self.add_legend_bars(label or f"run {run + 1}", brush(colour, 220))
            accuracies += list(heights)
            for (step, accuracy), xi in zip(rungs, x):
                if len(ladders) == 1:
                    # In the run's own hue, which reads on either theme's background (no recolouring on a
                    # switch).
                    self._label(xi, accuracy, measure.text(accuracy, 2), colour)
                else:
                    groups.setdefault(step, []).append((accuracy, colour))
        for step, values in groups.items():
            # Side by side, two runs' bars are narrower than "99.4%": their labels stand in a column over the
            # group instead, the first run's on top, so that no label runs into its neighbour.
            top = max(accuracy for accuracy, _ in values)
            for line, (accuracy, colour) in enumerate(reversed(values)):
                self._label(step, top, measure.text(accuracy, 1), colour, line=line)
        live = ladders[-1][1]
        done = {s.get("step") for s in live}
        pending = [position[s] for s in planned if s in position and s not in done]
        self._fit_view(accuracies, label_lines=len(ladders))
        if pending:
            reached = [float(s["accuracy"]) for s in live if _finite(s.get("accuracy"))]
            self._add_slots(
                pending,
                (len(ladders) - 1) / 2 * width,
                width,
                run_colour(len(ladders) - 1),
                reached[-1] if reached else None,
            )
        names = [STEP_NAMES.get(s, s) for s in self.steps]
        axis = self.plot.getAxis("bottom")
        axis.setTicks([list(enumerate(names))])
        # pyqtgraph sizes the axis for one line of tick text: room for the two-line names.
        lines = max(name.count("\n") + 1 for name in names)
        axis.setHeight(QFontMetrics(axis.font()).lineSpacing() * lines + 14 if lines > 1 else None)
        self.plot.setXRange(-0.6, len(self.steps) - 0.4, padding=0)
        self.finish()

    def _add_slots(
        self, pending: list[int], offset: float, width: float, colour: str, reached: float | None
    ) -> None:
        """Empty, dashed outlines where the live run's next rungs will stand, as tall as its last rung (half
        the view before it has one), each marked "…"."""
        low, high = self.plot.getViewBox().viewRange()[1]
        top = reached if reached is not None else (low + high) / 2
        self.slots = pg.BarGraphItem(
            x=np.array(pending, dtype=float) + offset,
            y0=low,
            height=top - low,
            width=width * 0.9,
            brush=brush(colour, 18),
            pen=pen(colour, 1.2, Qt.DashLine),
        )
        self.plot.addItem(self.slots)
        for x in pending:
            self._label(x + offset, top, "…", colour)

    def _label(self, x: float, y: float, text: str, colour: str, line: int = 0) -> None:
        # An anchor's y of 1 + line puts the text `line` text heights above the point, whatever the zoom.
        label = pg.TextItem(text, color=colour, anchor=(0.5, 1.0 + line))
        label.setFont(LABEL_FONT)
        label.setPos(x, y)
        self.plot.addItem(label)
        self.labels.append(label)

    def _fit_view(self, accuracies: list[float], label_lines: int = 1) -> None:
        """Steps move the accuracy by tenths of a percent: bars from 0 would all look alike, so the axis
        starts a little under the lowest rung (bars run off its bottom), with room above the highest for its
        labels (a line a run), measured in pixels (_fit_top): the legend stands above the plot."""
        values = finite(accuracies)
        if not len(values):
            self._fit = None
            self.plot.setYRange(0.0, 1.0, padding=0)
            return
        low, high = float(values.min()), float(values.max())
        # Another metric has its own scale (an MSE of 0.002 or of 40): a floor for the span relative to it.
        span = max(high - low, 0.01) if self.measure.accuracy else max(high - low, abs(high) * 0.02, 1e-12)
        bottom = low - span * 0.6
        self._fit = (max(0.0, bottom) if low >= 0 else bottom, high, span, label_lines)
        self._fit_top()

    def _fit_top(self, *args) -> None:
        """The top of the view: the label lines over the highest rung fit under it, at the view's height now
        (the share of the height they need grows as the panel gets shorter); before the view has a height, as
        much room as the rungs' span."""
        if self._fit is None:
            return
        bottom, high, span, lines = self._fit
        pixels = self.plot.getViewBox().height()
        room = lines * self.label_height() + LABEL_AIR
        if pixels > 2 * room:  # the labels take `share` of the height: top - high = share * (top - bottom)
            share = room / pixels
            top = (high - share * bottom) / (1 - share)
        else:
            top = high + span * lines
        if self.measure.accuracy:
            top = min(top, max(1.0, high + span * 0.3))  # never far past 100 %
        self.plot.setYRange(bottom, top, padding=0)

    def label_height(self) -> float:
        """A value label's height in pixels, its margins included: the labels of a group stack at this
        pitch."""
        if self.labels:
            return self.labels[0].boundingRect().height()
        return QFontMetrics(LABEL_FONT).height() + 8

    def _stop_fitting(self, *args) -> None:
        self._fit = None


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
