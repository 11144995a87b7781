"""Inputs that are not images, drawn: one sample's token ids by position, a signal as lines, a tabular row as
bars (`draw_sample`, on the sample view's plot), and data.info's `input_histogram` as the Data tab's "Inputs"
side tab (`InputChart`): token sequences' lengths and id range, a histogram per tabular column, a signal's
values.

GUI side: Qt, pyqtgraph and numpy, never torch. The worker's sequence_views.py makes what is drawn here.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGridLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from workbench.gui.plots import SERIES_COLOURS, make_plot

COLUMNS_PER_ROW = 3
MAX_COLUMN_PLOTS = 40
MAX_LISTED = 40  # a row's values listed by name; a wider row's are in its plot
COLUMN_PLOT_HEIGHT = 150
# kind -> (plot title, left axis, bottom axis) of one sample's plot
SAMPLE_PLOTS = {
    "tokens": ("Token ids by position", "id", "position"),
    "signal": ("Signal", "value", "step"),
    "tabular": ("Feature values", "value", "feature"),
}


def sample_lines(sample: dict) -> list[str]:
    """HTML lines of what one input is: a token sequence's text, ids and length; a signal's or a row's
    size."""
    kind = sample.get("kind")
    lines = []
    if kind == "tokens":
        ids = sample.get("ids") or []
        if "text" in sample:
            lines.append(f"<b>text</b>: {html.escape(sample['text'])}")
        if sample.get("decode_error"):
            lines.append(f"<i>{html.escape(sample['decode_error'])}</i>")
        more = sample.get("total", len(ids)) - len(ids)
        lines.append("<b>ids</b>: " + " ".join(str(i) for i in ids) + (f" … (+{more})" if more > 0 else ""))
        pad = " non-padding" if sample.get("pad") else ""
        lines.append(
            f"{sample.get('length', len(ids))}{pad} tokens of {sample.get('total', len(ids))}, "
            f"ids {sample.get('min')} … {sample.get('max')}"
        )
    elif kind == "signal":
        channels = len(sample.get("values") or [])
        stride = sample.get("stride", 1)
        lines.append(
            f"a signal of {sample.get('length')} steps"
            + (f", {channels} channels" if channels > 1 else "")
            + (f" (every {stride}th step drawn)" if stride > 1 else "")
        )
    elif kind == "tabular":
        values = sample.get("values") or []
        names = sample.get("names") or [str(i) for i in range(len(values))]
        lines.append(f"a row of {len(values)} features")
        shown = [f"{html.escape(str(n))} = {v:.4g}" for n, v in zip(names, values[:MAX_LISTED], strict=False)]
        lines.append(
            " · ".join(shown) + (f" … (+{len(values) - MAX_LISTED})" if len(values) > MAX_LISTED else "")
        )
    return lines


def draw_sample(plot: pg.PlotWidget, sample: dict) -> bool:
    """Draw one non-image input on `plot` (cleared first); False when its kind has no drawing."""
    kind = sample.get("kind")
    if kind not in SAMPLE_PLOTS:
        return False
    plot.clear()
    title, left, bottom = SAMPLE_PLOTS[kind]
    plot.setTitle(title, size="10pt")
    plot.setLabel("left", left)
    plot.setLabel("bottom", bottom)
    plot.getAxis("bottom").setTicks(None)
    brush = SERIES_COLOURS[0]
    if kind == "tokens":
        ids = np.asarray(sample.get("ids") or [], dtype=float)
        plot.addItem(pg.BarGraphItem(x=np.arange(len(ids)), height=ids, width=0.8, brush=brush, pen=None))
    elif kind == "signal":
        stride = int(sample.get("stride", 1))
        for c, row in enumerate(sample.get("values") or []):
            values = np.asarray(row, dtype=float)
            colour = SERIES_COLOURS[c % len(SERIES_COLOURS)]
            plot.plot(np.arange(len(values)) * stride, values, pen=pg.mkPen(colour, width=1.5))
    else:
        values = np.asarray(sample.get("values") or [], dtype=float)
        names = sample.get("names") or [str(i) for i in range(len(values))]
        plot.addItem(
            pg.BarGraphItem(x=np.arange(len(values)), height=values, width=0.8, brush=brush, pen=None)
        )
        step = max(1, len(names) // 16)
        plot.getAxis("bottom").setTicks([[(float(i), str(n)) for i, n in enumerate(names)][::step]])
    plot.enableAutoRange()
    return True


def _bars(plot: pg.PlotWidget, counts, edges) -> None:
    counts, edges = np.asarray(counts, dtype=float), np.asarray(edges, dtype=float)
    if len(edges) != len(counts) + 1 or not len(counts):
        return
    if np.allclose(np.diff(edges), 1.0) and np.allclose(edges, np.round(edges)):
        # One bin per integer (a sequence length): a bar centred on its number, so the tick names the bar.
        plot.addItem(
            pg.BarGraphItem(x=edges[:-1], height=counts, width=0.8, brush=SERIES_COLOURS[0], pen=None)
        )
    else:
        plot.addItem(
            pg.BarGraphItem(
                x0=edges[:-1],
                x1=edges[1:],
                height=counts,
                brush=SERIES_COLOURS[0],
                pen=pg.mkPen(SERIES_COLOURS[0]),
            )
        )
    plot.setYRange(0, max(1.0, counts.max()) * 1.1, padding=0)


def _number(value) -> str:
    return "—" if value is None else f"{value:.4g}"


class InputChart(QWidget):
    """data.info's input_histogram: sequence lengths (tokens), one small histogram per column (tabular), or
    the values of the first signals; a line above says what was read and the value range."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.histogram: dict | None = None
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.plot = make_plot(
            "", "samples", "", empty="The inputs' histogram appears here once a dataset loads."
        )
        # One themed plot per column in a grid that scrolls: a dataset of forty columns stays readable.
        self.columns = QWidget()
        self.columns.setToolTip("Each column's values over the first training samples")
        self.columns_grid = QGridLayout(self.columns)
        self.columns_grid.setContentsMargins(0, 0, 0, 0)
        self.columns_scroll = QScrollArea()
        self.columns_scroll.setWidget(self.columns)
        self.columns_scroll.setWidgetResizable(True)
        self.columns_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.column_plots: list[pg.PlotWidget] = []
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.summary)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.columns_scroll, 1)
        self.clear()

    def clear(self, message: str = "") -> None:
        self.histogram = None
        self.summary.setText(message)
        self.plot.clear()
        self.plot.show()
        for plot in self.column_plots:
            self.columns_grid.removeWidget(plot)
            plot.deleteLater()
        self.column_plots = []
        self.columns_scroll.hide()

    def show_histogram(self, histogram: dict | None) -> None:
        self.clear()
        if not histogram:
            self.summary.setText(
                "This dataset's inputs have no histogram here (they are images or tensors of "
                "another shape; the table lists their ranges)."
            )
            return
        self.histogram = histogram
        kind = histogram.get("kind")
        sampled, total = histogram.get("sampled", 0), histogram.get("total", 0)
        read = f"the first {sampled:,} train samples" if sampled < total else f"all {sampled:,} train samples"
        value_range = f"{_number(histogram.get('min'))} … {_number(histogram.get('max'))}"
        if kind == "tokens":
            vocab = histogram.get("vocab_size")
            self.summary.setText(
                f"Token ids {value_range}"
                + (f" (a vocabulary of {vocab:,})" if vocab else "")
                + f"; sequence lengths of {read}"
                + (
                    ""
                    if histogram.get("decodes")
                    else "; the Dataset has no decode(ids) or vocab, so no text"
                )
            )
            self.plot.setTitle("Sequence lengths (non-padding tokens)", size="10pt")
            self.plot.setLabel("bottom", "tokens")
            self.plot.setToolTip(
                "How many samples have each length: tokens other than the padding id 0 when the "
                "sequences are padded, else the sequence length"
            )
            _bars(self.plot, histogram.get("counts"), histogram.get("edges"))
        elif kind == "signal":
            self.summary.setText(f"Signal values {value_range}, from {read}")
            self.plot.setTitle("Signal values", size="10pt")
            self.plot.setLabel("bottom", "value")
            self.plot.setLabel("left", "count")
            self.plot.setToolTip("How often each value occurs in the first signals")
            _bars(self.plot, histogram.get("counts"), histogram.get("edges"))
        elif kind == "tabular":
            self._show_columns(histogram.get("columns") or [], read)

    def _show_columns(self, columns: list[dict], read: str) -> None:
        shown = columns[:MAX_COLUMN_PLOTS]
        more = f" (the first {len(shown)} drawn)" if len(columns) > len(shown) else ""
        self.summary.setText(f"{len(columns)} feature columns, each one's values over {read}{more}")
        self.plot.hide()
        self.columns_scroll.show()
        for i, column in enumerate(shown):
            plot = make_plot(
                f"{html.escape(column['name'])}: {_number(column.get('min'))} … {_number(column.get('max'))}"
            )
            plot.setMinimumHeight(COLUMN_PLOT_HEIGHT)
            plot.setMouseEnabled(x=False, y=False)
            plot.getAxis("left").setWidth(40)
            plot.setToolTip(f"The values of column {column['name']} (mean {_number(column.get('mean'))})")
            _bars(plot, column.get("counts"), column.get("edges"))
            self.columns_grid.addWidget(plot, i // COLUMNS_PER_ROW, i % COLUMNS_PER_ROW)
            self.column_plots.append(plot)
