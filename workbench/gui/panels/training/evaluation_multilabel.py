"""The multi-label evaluation view: each label's average precision and F1 on the test split as bars, and the
samples with the most wrong labels. GUI side; never imports torch."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from workbench.gui.panels.training.evaluation_common import BarTooltips, WorstTable, category_ticks, number
from workbench.gui.plots import SERIES_COLOURS, add_legend, make_plot

BAR_WIDTH = 0.38  # two bars per label, side by side, with a gap between labels


def _names(labels: list[str]) -> str:
    return ", ".join(labels) if labels else "none"


class MultilabelEvaluationView(QWidget):
    sample_requested = Signal(str, int, str)  # split, index, a note (the labels predicted)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.bars_plot = make_plot(
            "Per-label average precision and F1",
            "AP, F1",
            "label",
            categories=True,
            empty="Each label's average precision and F1 on the test split appear here.",
        )
        self.bars_plot.setYRange(0, 1)
        self.legend = add_legend(self.bars_plot, columns=2)
        self.ap_bars = pg.BarGraphItem(
            x=[], height=[], width=BAR_WIDTH, brush=SERIES_COLOURS[0], pen=None, name="AP"
        )
        self.f1_bars = pg.BarGraphItem(
            x=[], height=[], width=BAR_WIDTH, brush=SERIES_COLOURS[1], pen=None, name="F1 at 0.5"
        )
        self.bars_plot.addItem(self.ap_bars)
        self.bars_plot.addItem(self.f1_bars)
        self.tooltips = BarTooltips(self.bars_plot)
        self.worst = WorstTable(
            ["split", "index", "true labels", "predicted labels", "wrong", "loss"],
            "The test samples with the most wrong labels (ties: the larger loss); "
            "double-click one to open it in the Data tab",
        )
        self.worst.sample_activated.connect(self.sample_requested)
        worst_box = QWidget()
        box = QVBoxLayout(worst_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(QLabel("Worst samples (labels predicted at probability ≥ 0.5)"))
        box.addWidget(self.worst)
        split = QSplitter(Qt.Vertical)
        split.addWidget(self.bars_plot)
        split.addWidget(worst_box)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def clear(self) -> None:
        for bars in (self.ap_bars, self.f1_bars):
            bars.setOpts(x=[], height=[])
        self.tooltips.texts = []
        self.worst.set_rows([], [])

    def show_evaluation(self, evaluation: dict) -> None:
        per_label = evaluation.get("per_label") or []
        names = [str(r.get("label", i)) for i, r in enumerate(per_label)]
        x = np.arange(len(per_label), dtype=float)
        # An undefined AP (a label with no positive in the split) draws no bar; its tooltip says why.
        ap = np.array([r.get("ap") if r.get("ap") is not None else np.nan for r in per_label], dtype=float)
        f1 = np.array([r.get("f1") if r.get("f1") is not None else np.nan for r in per_label], dtype=float)
        self.ap_bars.setOpts(x=x - BAR_WIDTH / 2, height=np.nan_to_num(ap), width=BAR_WIDTH)
        self.f1_bars.setOpts(x=x + BAR_WIDTH / 2, height=np.nan_to_num(f1), width=BAR_WIDTH)
        self.tooltips.texts = [
            f"{name}: AP {number(r.get('ap'))}, F1 {number(r.get('f1'))}, {int(r.get('positives') or 0):,} "
            "positive "
            "samples" + ("" if r.get("ap") is not None else " (no positives in the split: AP undefined)")
            for name, r in zip(names, per_label)
        ]
        category_ticks(self.bars_plot, names)
        self.bars_plot.setXRange(-0.6, max(len(names), 1) - 0.4, padding=0)
        self.bars_plot.setYRange(0, 1.05, padding=0)
        self.bars_plot.getPlotItem().update_empty_state()
        split = evaluation.get("split") or "test"
        labels = [str(n) for n in evaluation.get("labels") or names]
        rows, samples, tips = [], [], []
        for info in evaluation.get("worst") or []:
            target, predicted = info.get("target") or [], info.get("predicted") or []
            wrong = info.get("errors", len(set(target) ^ set(predicted)))
            rows.append(
                [
                    info.get("split", split),
                    int(info["index"]),
                    _names(target),
                    _names(predicted),
                    int(wrong),
                    info.get("loss"),
                ]
            )
            samples.append(
                (
                    info.get("split", split),
                    int(info["index"]),
                    f"predicted labels {_names(predicted)} (true {_names(target)})",
                )
            )
            probabilities = info.get("probabilities") or []
            tips.append(
                "Probabilities: " + ", ".join(f"{n} {number(p)}" for n, p in zip(labels, probabilities))
                if probabilities
                else ""
            )
        self.worst.set_rows(rows, samples, tips)
