"""Full-resolution metric series for live plots: growable numpy buffers fed by metrics events or the run
store.

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
        self._x[self._n : need] = steps
        self._y[self._n : need] = values
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
        """(step, name, value, time) rows, e.g. from protocol.metrics.metric_rows; strings like "nan" parse
        too."""
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


MAX_WEIGHT = 0.999  # the slider tops out at 0.99; a cap keeps w**-k finite for any caller


class IncrementalEma:
    """A debiased exponential moving average (TensorBoard's smoothing) that is extended, never recomputed.

    s_t = w*s_{t-1} + (1-w)*x_t, shown as s_t / (1 - w**t). Non-finite points are shown as they are and
    skipped by the average (as TensorBoard does), so one NaN does not drag the curve to zero. A live update
    costs O(new points); only a new weight means starting again.
    """

    def __init__(self, weight: float, capacity: int = 1024):
        self.weight = min(float(weight), MAX_WEIGHT)
        self._num = 0.0  # the undebiased average after the last finite point
        self._count = 0  # finite points seen: the debias term is 1 - w**count
        self._out = np.empty(capacity, dtype=np.float64)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def values(self) -> np.ndarray:
        return self._out[: self._n]

    def extend(self, values) -> None:
        values = np.asarray(values, dtype=np.float64)
        need = self._n + len(values)
        if need > len(self._out):
            self._out = np.resize(self._out, max(need, 2 * len(self._out)))
        out = self._out[self._n : need]
        out[:] = values
        self._n = need
        if self.weight <= 0 or not len(values):
            return
        finite = np.isfinite(values)
        x = values[finite] if not finite.all() else values
        if not len(x):
            return
        num = _ema_numerators(x, self.weight, self._num)
        # The debias term from the count (a closed form) rather than a second running sum.
        den = -np.expm1(np.log(self.weight) * np.arange(self._count + 1, self._count + len(x) + 1))
        if finite.all():
            out[:] = num / den
        else:
            out[finite] = num / den
        self._num = float(num[-1])
        self._count += len(x)


def _ema_numerators(x: np.ndarray, w: float, start: float) -> np.ndarray:
    """n_t = w*n_{t-1} + (1-w)*x_t from n_0 = start, vectorised: O(len(x)) numpy work, no Python loop per
    point.

    Within a block of L points n_k = w**k * (n_0 + (1-w) * sum_i w**-i x_i); L is chosen so that w**-L stays
    near e**200 (finite), which also makes the carry between blocks w**L * (...) vanish after one block, so
    the carries need no sequential scan either.
    """
    n = len(x)
    block = max(1, min(n, math.ceil(200 / -math.log(w))))
    rows = -(-n // block)
    padded = np.zeros(rows * block)
    padded[:n] = x
    padded = padded.reshape(rows, block)
    k = np.arange(1, block + 1, dtype=np.float64)
    decay = w**k
    local = (1 - w) * decay * np.cumsum(padded * w**-k, axis=1)  # each block started from zero
    carry = np.empty(rows)
    carry[0] = start
    if rows > 1:
        ends = local[:, -1]
        w_block = w**block  # at most e**-200: carries older than one block are below double precision
        carry[1:] = ends[:-1]
        carry[1] += w_block * start
        carry[2:] += w_block * ends[:-2]
    return (local + carry[:, None] * decay).ravel()[:n]


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    """The whole smoothed series at once (IncrementalEma from empty): for one-off use and tests."""
    smoother = IncrementalEma(weight, capacity=max(1, len(values)))
    smoother.extend(values)
    return smoother.values.copy()


class _Growable:
    """A float64 array that is appended to or rewritten at its tail, amortised O(1) per element."""

    def __init__(self, capacity: int = 256):
        self._data = np.empty(capacity, dtype=np.float64)
        self.size = 0

    def write(self, start: int, values: np.ndarray) -> None:
        """Replace everything from `start` on with `values` (the last bucket may be rewritten, never
        earlier)."""
        need = start + len(values)
        if need > len(self._data):
            self._data = np.resize(self._data, max(need, 2 * len(self._data)))
        self._data[start:need] = values
        self.size = need

    @property
    def values(self) -> np.ndarray:
        return self._data[: self.size]


class PeakPyramid:
    """Min and max of every FAN**k consecutive points (k = 1, 2, …) of a growing series, for drawing.

    A live plot of a million points needs a few thousand to draw, chosen per pixel column so no peak is lost
    (pyqtgraph's "peak" down-sampling). pyqtgraph recomputes that from all points at every repaint; here each
    level is extended by the new points only (O(new + levels) per append), and a view is read off the level
    whose buckets are about as wide as the pixels.
    """

    FAN = 4

    def __init__(self):
        self._mins: list[_Growable] = []  # level k (bucket FAN**(k+1)) at index k
        self._maxs: list[_Growable] = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def extend(self, y: np.ndarray) -> None:
        """`y` is the whole series so far; points past the last call are the new ones."""
        n = len(y)
        if n <= self._n:
            return
        changed, below_min, below_max = self._n, y, y  # first index that changed at the level below
        level = 0
        while len(below_min) > 1:
            start = changed // self.FAN
            mins = _reduce_buckets(np.fmin, below_min[start * self.FAN :], self.FAN)
            maxs = _reduce_buckets(np.fmax, below_max[start * self.FAN :], self.FAN)
            if level == len(self._mins):
                self._mins.append(_Growable())
                self._maxs.append(_Growable())
            self._mins[level].write(start, mins)
            self._maxs[level].write(start, maxs)
            below_min, below_max = self._mins[level].values, self._maxs[level].values
            changed = start
            level += 1
        self._n = n

    def reset(self) -> None:
        self.__init__()

    def window(
        self, x: np.ndarray, y: np.ndarray, i0: int, i1: int, buckets: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Points to draw for indices [i0, i1): the raw points if there are at most 2 * `buckets`, else
        (min, max) per bucket at the level with at most `buckets` buckets in the window.

        A decimated window that reaches the end also gets the newest raw point, so a live curve reaches the
        latest step (a bucket is drawn at its first step).
        """
        n = min(len(x), len(y), self._n)
        i0, i1 = max(0, i0), min(n, i1)
        if i1 <= i0:
            return x[:0], y[:0]
        xs, ys = self._span(x, y, i0, i1, buckets)
        if i1 == n and len(xs) and xs[-1] != x[n - 1]:
            xs, ys = np.append(xs, x[n - 1]), np.append(ys, y[n - 1])
        return xs, ys

    def _span(self, x, y, i0: int, i1: int, buckets: int) -> tuple[np.ndarray, np.ndarray]:
        count = i1 - i0
        if count <= 2 * buckets or not self._mins:
            return x[i0:i1], y[i0:i1]
        level = 0
        while level + 1 < len(self._mins) and -(-count // self.FAN ** (level + 1)) > buckets:
            level += 1
        size = self.FAN ** (level + 1)
        j0, j1 = i0 // size, -(-i1 // size)
        mins, maxs = self._mins[level].values[j0:j1], self._maxs[level].values[j0:j1]
        xs = np.repeat(x[np.arange(j0, j0 + len(mins)) * size], 2)
        ys = np.empty(2 * len(mins))
        ys[0::2], ys[1::2] = mins, maxs
        return xs, ys


def _reduce_buckets(ufunc, values: np.ndarray, fan: int) -> np.ndarray:
    """ufunc.reduce over consecutive groups of `fan` (the last one may be short); fmin/fmax skip NaN."""
    whole = len(values) // fan * fan
    out = ufunc.reduce(values[:whole].reshape(-1, fan), axis=1) if whole else np.empty(0)
    if whole < len(values):
        out = np.append(out, ufunc.reduce(values[whole:]))
    return out
