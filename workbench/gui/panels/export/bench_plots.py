"""The benchmark's plots: latency against batch size per backend on log-log axes (p50 with its p10–p90 band),
one row's latency distribution as a histogram and a CDF with p50/p90/p99 marked, throughput bars per backend
and batch size, and earlier runs overlaid as dashed lines. Built on the shared plot helpers
(workbench.gui.plots via the quantization tab's PlotPanel), so they follow the light and dark themes; one hue
per backend in every plot."""

from __future__ import annotations

import re

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QWidget

from workbench.gui.panels.export.results import BenchResults, format_ms, measured
from workbench.gui.panels.quant.plot_panel import PlotPanel, brush, finite, pen
from workbench.gui.plots import run_colour
from workbench.results import BenchRow
from workbench.specs import BENCH_BACKENDS

# What each percentile mark is drawn in, in the histogram and the CDF alike.
PERCENTILE_COLOURS = {"p50": "#2e9d4a", "p90": "#e8710a", "p99": "#d93a3a"}
PERCENTILE_LEVELS = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
# Earlier runs overlaid on this one: the same hue per backend, a different dash per run.
OVERLAY_STYLES = (Qt.DashLine, Qt.DotLine, Qt.DashDotLine, Qt.DashDotDotLine)
OVERLAY_SYMBOLS = ("t", "s", "d", "star")

LATENCY_EMPTY = "Latency against batch size appears here, a line per backend, as each batch size is measured."
DISTRIBUTION_EMPTY = "Pick a measured row in the table to see its latency distribution."
THROUGHPUT_EMPTY = "Samples per second for each backend and batch size appear here as they are measured."
HISTORY_EMPTY = "Tick earlier benchmark runs in the list to overlay their p50 latency here as dashed lines."


def backend_colour(backend: str) -> str:
    """One hue per backend, the same in every plot and every run (the spec's order of backends)."""
    if backend in BENCH_BACKENDS:
        return run_colour(BENCH_BACKENDS.index(backend))
    return run_colour(len(BENCH_BACKENDS) + sum(map(ord, backend)) % 3)


def short_run_label(run_id: str) -> str:
    """ "20250301-142233-bench-3fa2c1" -> "03-01 14:22:33"; anything else -> its last six characters."""
    match = re.match(r"^\d{4}(\d{2})(\d{2})-(\d{2})(\d{2})(\d{2})-", run_id or "")
    if match:
        month, day, hour, minute, second = match.groups()
        return f"{month}-{day} {hour}:{minute}:{second}"
    return (run_id or "?")[-6:]


def _latency(row: dict, key: str) -> float | None:
    value = BenchRow.from_dict(row).latency(key)
    return float(value) if isinstance(value, (int, float)) and np.isfinite(value) and value > 0 else None


def curves_by_backend(rows: list[dict]) -> dict[str, list[dict]]:
    """The measured rows of each backend, sorted by batch size (backends in the order they came)."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        if measured(row) and _latency(row, "p50") is not None:
            grouped.setdefault(str(row.get("backend", "")), []).append(row)
    return {
        backend: sorted(group, key=lambda r: int(r.get("batch_size", 0)))
        for backend, group in grouped.items()
    }


class LatencyPlot(PlotPanel):
    """`set_results(results, overlays)`: p50 latency against batch size, a line per backend on log-log axes,
    with a band from p10 (the fastest run when the samples are not at hand) to p90; `overlays` (earlier runs)
    add their p50 lines dashed. `curves` holds this run's line per backend, `bands` its bands and
    `overlay_curves` the earlier runs' lines as (run id, backend, item)."""

    def __init__(self, empty: str = LATENCY_EMPTY, parent=None):
        super().__init__("latency (ms)", "batch size", empty=empty, parent=parent)
        self.plot.setLogMode(x=True, y=True)
        self.legend.setOffset((8, 8))  # top left: latency climbs to the top right
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.bands: dict[str, pg.FillBetweenItem] = {}
        self.overlay_curves: list[tuple[str, str, pg.PlotDataItem]] = []
        self.data_range: tuple[float, float] | None = None  # log10 of the lowest and highest latency drawn
        view = self.plot.getViewBox()
        # Until the user zooms or pans, a resize refits the lines under the legend (its height is in pixels).
        view.sigResized.connect(self._fit_under_legend)
        view.sigRangeChangedManually.connect(self._stop_fitting)

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.curves.clear()
        self.bands.clear()
        self.overlay_curves.clear()
        self.data_range = None

    def set_results(
        self, results: BenchResults | None, overlays: list[BenchResults] = (), *, band: bool = True
    ) -> None:
        self.clear()
        groups = curves_by_backend(results.rows()) if results is not None else {}
        earlier = [(other, curves_by_backend(other.rows())) for other in overlays]
        if not groups and not any(g for _, g in earlier):
            self.clear(self.empty)
            return
        suffix = " (this run)" if earlier else ""
        for backend, rows in groups.items():
            colour = backend_colour(backend)
            x = np.array([float(r["batch_size"]) for r in rows])
            y = np.array([_latency(r, "p50") for r in rows])
            if band:
                self._add_band(backend, results, rows, x, colour)
            curve = pg.PlotDataItem(
                x,
                y,
                pen=pen(colour, 2.0),
                symbol="o",
                symbolSize=7,
                symbolPen=None,
                symbolBrush=brush(colour),
                name=f"{backend}{suffix}",
            )
            self.plot.addItem(curve)
            self.curves[backend] = curve
        for index, (other, other_groups) in enumerate(earlier):
            style = OVERLAY_STYLES[index % len(OVERLAY_STYLES)]
            for backend, rows in other_groups.items():
                colour = backend_colour(backend)
                x = np.array([float(r["batch_size"]) for r in rows])
                y = np.array([_latency(r, "p50") for r in rows])
                curve = pg.PlotDataItem(
                    x,
                    y,
                    pen=pen(colour, 1.6, style),
                    symbol=OVERLAY_SYMBOLS[index % len(OVERLAY_SYMBOLS)],
                    symbolSize=7,
                    symbolPen=pen(colour, 1.2),
                    symbolBrush=None,
                    name=f"{backend} · {short_run_label(other.run_id)}",
                )
                self.plot.addItem(curve)
                self.overlay_curves.append((other.run_id, backend, curve))
        batches = sorted(
            {
                float(r["batch_size"])
                for group in [groups, *[g for _, g in earlier]]
                for rows in group.values()
                for r in rows
            }
        )
        # Ticks at the batch sizes measured (1, 8, 64), not at 1-2-5 marks between them.
        self.plot.getAxis("bottom").setTicks([[(np.log10(b), f"{b:g}") for b in batches]])
        what = "p50 latency, p10–p90 band" if band and groups else "p50 latency"
        self.set_title(f"{what} by batch size" + (" (dashed: earlier runs)" if earlier else ""))
        # A wide, short legend (a row of backends) leaves the lines most of the height; runs' longer names get
        # two columns.
        self.legend.setColumnCount(2 if earlier else max(1, min(len(self.legend.items), 4)))
        self.finish()
        drawn = finite(
            [v for item in self.plot.listDataItems() for v in (item.yData if item.yData is not None else [])]
        )
        drawn = drawn[drawn > 0]
        self.data_range = (float(np.log10(drawn.min())), float(np.log10(drawn.max()))) if drawn.size else None
        self._fit_under_legend()

    def _fit_under_legend(self, *args) -> None:
        """The lines fill the height below the legend: with batch sizes an order of magnitude apart, the lines
        start low on the left, just where a top-left legend would cover them."""
        space = self.height_under_legend(0.45)  # a legend taller than half the panel may cover the top
        if self.data_range is None or space is None:
            return
        height, free = space
        low, high = self.data_range
        span = max(high - low, 0.3)  # a flat line still gets a readable decade's fraction around it
        low, high = low - span * 0.08, high + span * 0.05
        self.plot.getViewBox().setYRange(low, low + (high - low) * height / free, padding=0)

    def _stop_fitting(self, *args) -> None:
        self.data_range = None

    def _add_band(
        self, backend: str, results: BenchResults, rows: list[dict], x: np.ndarray, colour: str
    ) -> None:
        low, high = [], []
        for row in rows:
            samples = results.samples_of(row)
            if samples is not None:
                p10, p90 = np.percentile(samples, [10, 90])
            else:
                p10, p90 = _latency(row, "min"), _latency(row, "p90")
            p50 = _latency(row, "p50")
            low.append(p10 if p10 and p10 > 0 else p50)
            high.append(p90 if p90 and p90 > 0 else p50)
        invisible = pg.mkPen(0, 0, 0, 0)
        lower = pg.PlotDataItem(x, np.array(low), pen=invisible)
        upper = pg.PlotDataItem(x, np.array(high), pen=invisible)
        for item in (lower, upper):
            self.plot.addItem(item)
        fill = pg.FillBetweenItem(lower, upper, brush=brush(colour, 55))
        self.plot.addItem(fill)
        self.bands[backend] = fill


class HistogramPlot(PlotPanel):
    """One row's latency samples binned, with p50, p90 and p99 as vertical lines."""

    def __init__(self, parent=None):
        super().__init__("iterations", "latency (ms)", empty=DISTRIBUTION_EMPTY, parent=parent)
        self.counts = np.zeros(0)
        self.edges = np.zeros(0)
        self.markers: dict[str, float] = {}

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.counts, self.edges, self.markers = np.zeros(0), np.zeros(0), {}

    def set_samples(self, samples: np.ndarray, title: str, colour: str) -> None:
        self.clear()
        values = finite(samples)
        if not values.size:
            self.clear(DISTRIBUTION_EMPTY)
            return
        bins = int(np.clip(np.sqrt(values.size) * 1.5, 10, 60))
        low, high = float(values.min()), float(values.max())
        if high <= low:
            low, high = low * 0.99, high * 1.01 + 1e-9
        self.counts, self.edges = np.histogram(values, bins=bins, range=(low, high))
        self.plot.addItem(
            pg.PlotDataItem(
                self.edges,
                self.counts,
                stepMode="center",
                fillLevel=0,
                brush=brush(colour, 110),
                pen=pen(colour, 1.2),
            )
        )
        top = float(self.counts.max())
        for name, level in PERCENTILE_LEVELS.items():
            value = float(np.percentile(values, level * 100))
            self.markers[name] = value
            line_pen = pen(PERCENTILE_COLOURS[name], 1.6, Qt.DashLine)
            self.plot.addItem(pg.InfiniteLine(value, angle=90, pen=line_pen))
            self.add_legend_line(f"{name} {format_ms(value)} ms", line_pen)
        self.plot.setYRange(0, top * 1.15, padding=0)
        self.set_title(f"Latency of {title}: {values.size} iterations")
        self.finish()


class CdfPlot(PlotPanel):
    """One row's samples as a cumulative distribution, p50, p90 and p99 marked where the curve crosses
    them."""

    def __init__(self, parent=None):
        super().__init__(
            "share of iterations", "latency (ms)", empty=DISTRIBUTION_EMPTY, y_format="percent", parent=parent
        )
        self.legend.setOffset((-8, -8))  # bottom right: the curve climbs through the top left
        self.cdf_x = np.zeros(0)
        self.cdf_y = np.zeros(0)
        self.markers: dict[str, tuple[float, float]] = {}  # name -> (latency, share)

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.cdf_x, self.cdf_y, self.markers = np.zeros(0), np.zeros(0), {}

    def set_samples(self, samples: np.ndarray, title: str, colour: str) -> None:
        self.clear()
        values = np.sort(finite(samples))
        if not values.size:
            self.clear(DISTRIBUTION_EMPTY)
            return
        self.cdf_x = values
        self.cdf_y = np.arange(1, values.size + 1, dtype=float) / values.size
        self.plot.addItem(pg.PlotDataItem(self.cdf_x, self.cdf_y, pen=pen(colour, 2.0)))
        for name, level in PERCENTILE_LEVELS.items():
            value = float(np.percentile(values, level * 100))
            self.markers[name] = (value, level)
            colour_ = PERCENTILE_COLOURS[name]
            line_pen = pen(colour_, 1.2, Qt.DashLine)
            self.plot.addItem(pg.InfiniteLine(value, angle=90, pen=line_pen))
            self.plot.addItem(
                pg.ScatterPlotItem([value], [level], size=9, pen=pen(colour_, 1.5), brush=brush(colour_))
            )
            self.add_legend_line(f"{name} {format_ms(value)} ms", line_pen)
        self.plot.setYRange(0, 1.02, padding=0)
        self.set_title(f"Cumulative distribution of {title}")
        self.finish()


class DistributionView(QWidget):
    """The histogram and the CDF of one row, side by side."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.histogram = HistogramPlot()
        self.cdf = CdfPlot()
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(6)
        layout.addWidget(self.histogram, 1)
        layout.addWidget(self.cdf, 1)
        self.row: dict | None = None

    def clear(self, message: str = "") -> None:
        self.row = None
        self.histogram.clear(message)
        self.cdf.clear(message)

    def set_row(self, row: dict | None, samples: np.ndarray | None) -> None:
        if row is None:
            self.clear(DISTRIBUTION_EMPTY)
            return
        title = f"{row.get('backend', '?')}, batch {row.get('batch_size', '?')}"
        if not measured(row):
            reason = row.get("reason") or row.get("status", "")
            self.clear(f"{title} was not measured: {reason}")
            return
        if samples is None:
            self.clear(
                f"The per-iteration samples of {title} are not in this run (no artifacts/samples.npz)."
            )
            return
        self.row = row
        colour = backend_colour(str(row.get("backend", "")))
        self.histogram.set_samples(samples, title, colour)
        self.cdf.set_samples(samples, title, colour)


class ThroughputPlot(PlotPanel):
    """Samples per second, a bar group per batch size with a bar per backend. `bars` holds a BarGraphItem per
    backend."""

    def __init__(self, parent=None):
        super().__init__("samples / s", "batch size", empty=THROUGHPUT_EMPTY, parent=parent)
        self.legend.setOffset((8, 8))
        self.bars: dict[str, pg.BarGraphItem] = {}

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.bars.clear()

    def set_results(self, results: BenchResults | None) -> None:
        self.clear()
        rows = [
            r
            for r in (results.rows() if results else [])
            if measured(r)
            and isinstance(r.get("throughput_per_s"), (int, float))
            and np.isfinite(r["throughput_per_s"])
        ]
        if not rows:
            self.clear(THROUGHPUT_EMPTY)
            return
        batches = sorted({int(r["batch_size"]) for r in rows})
        backends = list(dict.fromkeys(str(r["backend"]) for r in rows))
        width = 0.8 / len(backends)
        position = {b: i for i, b in enumerate(batches)}
        top = 0.0
        for index, backend in enumerate(backends):
            mine = [r for r in rows if r["backend"] == backend]
            offset = (index - (len(backends) - 1) / 2) * width
            x = np.array([position[int(r["batch_size"])] + offset for r in mine])
            heights = np.array([float(r["throughput_per_s"]) for r in mine])
            colour = backend_colour(backend)
            bar = pg.BarGraphItem(
                x=x, height=heights, width=width * 0.9, brush=brush(colour, 220), pen=None, name=backend
            )
            self.plot.addItem(bar)
            self.bars[backend] = bar
            top = max(top, float(heights.max()))
        self.plot.getAxis("bottom").setTicks([[(i, f"{b:g}") for i, b in enumerate(batches)]])
        self.plot.setXRange(-0.6, len(batches) - 0.4, padding=0)
        self.plot.setYRange(0, top * 1.25, padding=0)  # room for the legend over the tallest bar
        self.set_title("Throughput by batch size (higher is better)")
        self.finish()


PARITY_EMPTY = (
    "The largest differences between the export's outputs and PyTorch's appear here after the check."
)
PARITY_ROWS = (("max_rel_diff", "max rel diff"), ("max_abs_diff", "max abs diff"))  # bottom to top


class ParityPlot(PlotPanel):
    """An export's largest absolute and relative output differences on a log axis, against the tolerance: a
    lollipop per difference in green (within the tolerance) or red, the tolerance a dashed line."""

    def __init__(self, parent=None):
        super().__init__("", "difference from PyTorch (log scale)", empty=PARITY_EMPTY, parent=parent)
        self.plot.setLogMode(x=True, y=False)
        self.plot.setMouseEnabled(x=True, y=False)
        self.values: dict[str, float] = {}
        self.tolerance: float | None = None

    def clear(self, message: str = "") -> None:
        super().clear(message)
        self.values, self.tolerance = {}, None

    def set_parity(self, parity: dict | None, passed_colour: str, failed_colour: str) -> None:
        self.clear()
        parity = parity or {}
        values = {
            key: float(parity[key])
            for key, _ in PARITY_ROWS
            if isinstance(parity.get(key), (int, float)) and np.isfinite(parity[key])
        }
        if not values:
            self.clear(PARITY_EMPTY)
            return
        tolerance = parity.get("tolerance")
        tolerance = float(tolerance) if isinstance(tolerance, (int, float)) and tolerance > 0 else None
        positive = [v for v in values.values() if v > 0] + ([tolerance] if tolerance else [])
        floor = min(positive) / 30 if positive else 1e-9
        for row, (key, _) in enumerate(PARITY_ROWS):
            if key not in values:
                continue
            value = max(values[key], floor)
            within = tolerance is None or values[key] <= tolerance
            colour = passed_colour if within else failed_colour
            self.plot.addItem(pg.PlotDataItem([floor, value], [row, row], pen=pen(colour, 3.0)))
            self.plot.addItem(
                pg.PlotDataItem(
                    [value],
                    [row],
                    pen=None,
                    symbol="o",
                    symbolSize=11,
                    symbolPen=None,
                    symbolBrush=brush(colour),
                )
            )
        self.values = values
        if tolerance:
            self.tolerance = tolerance
            line_pen = pen("#8a8f98", 1.6, Qt.DashLine)
            self.plot.addItem(pg.InfiniteLine(np.log10(tolerance), angle=90, pen=line_pen))
            self.add_legend_line(f"tolerance {tolerance:.3g}", line_pen)
        self.plot.getAxis("left").setTicks([[(row, name) for row, (_, name) in enumerate(PARITY_ROWS)]])
        self.plot.setYRange(-0.6, len(PARITY_ROWS) - 0.4, padding=0)
        self.plot.setXRange(np.log10(floor), np.log10(max(positive) * 30), padding=0)
        self.finish()
