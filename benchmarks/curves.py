"""One live update of the Training tab's curves at 1k, 100k and 1M points per series (loss, accuracy, lr),
against bare pyqtgraph PlotDataItems (peak down-sampling, clip to view) given the same data, in the same run.

An update is what the 200 ms timer does: a batch of new steps arrives, the plots take it, the plots repaint.
Goal (polish issue, item 26): within 1.5x of the bare items and at least 30 updates/s at 1M points.
Offscreen Qt; medians of interleaved repeats, since these machines are shared and noisy.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
from PySide6.QtWidgets import QApplication, QVBoxLayout, QWidget  # noqa: E402

from workbench.gui.metric_buffers import MetricSeries, ema  # noqa: E402
from workbench.gui.panels.training.curves import CurvesWidget  # noqa: E402

SIZES = (1_000, 100_000, 1_000_000)
# new steps per update and series: 20 metrics messages a second of 25 steps, at 5 redraws a second
BATCH = 100
REPEATS = 25
NAMES = ("train/loss", "train/acc", "lr")
GOAL_RATIO, GOAL_RATE = 1.5, 30.0


def series(start: int, n: int, rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    steps = np.arange(start + 1, start + n + 1, dtype=np.float64)
    loss = 2.3 * np.exp(-steps / 2e5) + 0.05 * rng.random(n)
    acc = np.clip(1 - np.exp(-steps / 1e5) + 0.02 * rng.standard_normal(n), 0, 1)
    lr = 3e-3 * (1 + np.cos(np.pi * np.minimum(steps / 2e6, 1))) / 2
    return {"train/loss": (steps, loss), "train/acc": (steps, acc), "lr": (steps, lr)}


class Bare:
    """The reference: three plain PlotWidgets, each one PlotDataItem re-set with the whole series per
    update."""

    def __init__(self):
        self.widget = QWidget()
        layout = QVBoxLayout(self.widget)
        self.plots, self.items, self.buffers = [], {}, {name: MetricSeries() for name in NAMES}
        for name in NAMES:
            plot = pg.PlotWidget()
            item = plot.plot()
            item.setDownsampling(auto=True, method="peak")
            item.setClipToView(True)
            layout.addWidget(plot)
            self.plots.append(plot)
            self.items[name] = item

    def update(self, batch) -> None:
        for name, (x, y) in batch.items():
            buffer = self.buffers[name]
            buffer.extend(x, y)
            self.items[name].setData(buffer.x, buffer.y)


def paint(plots) -> None:
    for plot in plots:
        plot.viewport().repaint()  # synchronous: view range, clip, down-sample and draw, as a real frame does


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv[:1])
    rng = np.random.default_rng(0)
    print(
        f"one live update: {BATCH} new steps in each of {len(NAMES)} series, then a repaint; "
        f"median of {REPEATS}, interleaved"
    )
    print(
        f"{'points':>10} {'workbench ms':>13} {'bare ms':>9} {'ratio':>7} {'updates/s':>10} "
        f"{'full EMA ms':>12}"
    )
    verdict = True
    for n in SIZES:
        curves = CurvesWidget()
        curves.timer.stop()  # the benchmark drives redraws itself
        curves.resize(1000, 700)
        curves.show()
        bare = Bare()
        bare.widget.resize(1000, 700)
        bare.widget.show()
        first = series(0, n, rng)
        curves.add_columns("run", {k: (x, y, x) for k, (x, y) in first.items()})
        curves.redraw_if_needed()
        bare.update(first)
        paint(curves.plots.values())
        paint(bare.plots)
        app.processEvents()
        ours, theirs, step = [], [], n
        for _ in range(REPEATS):
            batch = series(step, BATCH, rng)
            step += BATCH
            t = time.perf_counter()
            curves.add_columns("run", {k: (x, y, x) for k, (x, y) in batch.items()})
            curves.redraw_if_needed()
            paint(curves.plots.values())
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            bare.update(batch)
            paint(bare.plots)
            theirs.append(time.perf_counter() - t)
            app.processEvents()
        # What each update cost before smoothing was incremental: the EMA of both smoothed series from
        # scratch.
        loss = curves.runs["run"].get("train/loss").y
        t = time.perf_counter()
        for _ in range(2):
            ema(loss, curves.smoothing_weight)
        full = time.perf_counter() - t
        ours_s, bare_s = statistics.median(ours), statistics.median(theirs)
        ratio, rate = ours_s / bare_s, 1 / ours_s
        print(
            f"{n:>10,} {ours_s * 1000:>13.2f} {bare_s * 1000:>9.2f} {ratio:>7.2f} {rate:>10.1f} "
            f"{full * 1000:>12.1f}"
        )
        if n == SIZES[-1]:
            verdict = ratio <= GOAL_RATIO and rate >= GOAL_RATE
        curves.close()
        bare.widget.close()
        curves.deleteLater()
        bare.widget.deleteLater()
        app.processEvents()
    print(
        f"goal at {SIZES[-1]:,} points: ratio <= {GOAL_RATIO} and >= {GOAL_RATE:.0f} updates/s: "
        f"{'OK' if verdict else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
