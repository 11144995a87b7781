"""Full-resolution metric series for live plots: growable numpy buffers fed by metrics events or the run store.

Nothing is ever down-sampled here (only the plot does that, for display). Qt-free, so it is tested alone.
"""

from __future__ import annotations

import math

import numpy as np


class MetricSeries:
    """One metric's (step, value) points, appended in batches, amortised O(1) per point."""

    def __init__(self, capacity: int = 1024):
        self._x = np.empty(capacity, dtype=np.float64)
        self._y = np.empty(capacity, dtype=np.float64)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def extend(self, steps, values) -> None:
        steps = np.asarray(steps, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        need = self._n + len(steps)
        if need > len(self._x):
            size = max(need, 2 * len(self._x))
            self._x = np.resize(self._x, size)
            self._y = np.resize(self._y, size)
        self._x[self._n:need] = steps
        self._y[self._n:need] = values
        self._n = need

    @property
    def x(self) -> np.ndarray:
        return self._x[: self._n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self._n]

    def value_at(self, step: float) -> tuple[float, float] | None:
        """The point nearest to `step` (for the crosshair readout)."""
        if not self._n:
            return None
        i = int(np.searchsorted(self.x, step))
        candidates = [j for j in (i - 1, i) if 0 <= j < self._n]
        j = min(candidates, key=lambda k: abs(self.x[k] - step))
        return float(self.x[j]), float(self.y[j])


class RunMetrics:
    """All series of one run, keyed by metric name.

    Steps only move forward per metric: a row at or before the last step held is a duplicate (the same
    rows can arrive from the run store and from the live stream) and is dropped.
    """

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.series: dict[str, MetricSeries] = {}
        self.version = 0  # bumps on every change, so views redraw only when something is new

    def add_rows(self, rows) -> None:
        """(step, name, value, time) rows, e.g. from protocol.metrics.metric_rows; strings like "nan" parse too."""
        grouped: dict[str, tuple[list, list]] = {}
        for step, name, value, _time in rows:
            steps, values = grouped.setdefault(name, ([], []))
            steps.append(step)
            values.append(float(value))  # "nan" / "inf" strings parse back to floats here
        for name, (steps, values) in grouped.items():
            self.add_series(name, steps, values)

    def add_series(self, name: str, steps, values) -> None:
        steps = np.asarray(steps, dtype=np.float64)
        values = np.asarray(values, dtype=np.float64)
        series = self.series.setdefault(name, MetricSeries())
        if len(series):
            keep = steps > series.x[-1]
            steps, values = steps[keep], values[keep]
        if len(steps):
            series.extend(steps, values)
            self.version += 1

    def get(self, name: str) -> MetricSeries | None:
        return self.series.get(name)


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """Debiased exponential moving average (as TensorBoard's smoothing), vectorised in chunks.

    Chunks keep weight**-k finite: within a chunk s_t = w**t * (s_0 + (1-w) * sum_i w**-i x_i).
    """
    values = np.asarray(values, dtype=np.float64)
    if weight <= 0 or len(values) == 0:
        return values.copy()
    weight = min(weight, 0.999)
    chunk = max(1, int(200 / -math.log(weight)))  # weight**-chunk stays below e**200
    out = np.empty_like(values)
    finite = np.where(np.isfinite(values), values, 0.0)
    state, total_weight = 0.0, 0.0  # running numerator and the debias denominator
    for start in range(0, len(values), chunk):
        x = finite[start:start + chunk]
        k = np.arange(1, len(x) + 1, dtype=np.float64)
        decay = weight ** k
        num = decay * (state + (1 - weight) * np.cumsum(x * weight ** -k))
        den = decay * (total_weight + (1 - weight) * np.cumsum(weight ** -k))
        out[start:start + len(x)] = num / den
        state, total_weight = num[-1], den[-1]
    return out
