"""The numbers of a benchmark row: percentiles in order, throughput from the batch size and the median, the
timing loop's counting (on a fake clock: no test here asserts on wall-clock time) and the memory probe."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workbench.worker.bench import timing
from workbench.worker.bench.stats import MemoryProbe, summarize, throughput_per_s
from workbench.worker.bench.timing import Runnable, measure

positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(positive, min_size=1, max_size=300))
def test_percentiles_are_ordered_and_bounded(samples):
    stats = summarize(samples)
    assert set(stats) == {"p50", "p90", "p99", "mean", "std", "min"}
    assert stats["min"] <= stats["p50"] <= stats["p90"] <= stats["p99"] <= max(samples)
    assert stats["min"] == min(samples)
    assert stats["std"] >= 0
    assert min(samples) <= stats["mean"] * (1 + 1e-12) and stats["mean"] <= max(samples) * (1 + 1e-12)


def test_percentiles_of_a_known_sample():
    stats = summarize(np.arange(1, 101, dtype=np.float64))  # 1..100 ms
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["p90"] == pytest.approx(90.1)
    assert stats["p99"] == pytest.approx(99.01)
    assert stats["mean"] == pytest.approx(50.5) and stats["min"] == 1.0
    with pytest.raises(ValueError):
        summarize([])


@given(st.integers(min_value=1, max_value=4096), positive)
def test_throughput_is_the_batch_over_the_median_in_seconds(batch, p50_ms):
    assert throughput_per_s(batch, p50_ms) == pytest.approx(batch / (p50_ms / 1000.0))
    # Twice the batch at the same median is twice the throughput.
    assert throughput_per_s(2 * batch, p50_ms) == pytest.approx(2 * throughput_per_s(batch, p50_ms))


def test_throughput_of_a_zero_or_missing_median_is_none():
    assert throughput_per_s(8, 0.0) is None
    assert throughput_per_s(8, float("nan")) is None


class FakeClock:
    """perf_counter that moves 1 s per reading, so "until min_time_s" is counted, not waited for."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def counting_runnable(calls: dict, *, transfer: bool = False) -> Runnable:
    def run():
        calls["run"] = calls.get("run", 0) + 1
        return calls["run"]

    if not transfer:
        return Runnable(run=run)
    return Runnable(
        run=run,
        upload=lambda: calls.__setitem__("up", calls.get("up", 0) + 1),
        download=lambda out: calls.__setitem__("down", calls.get("down", 0) + 1),
    )


def test_measure_warms_up_untimed_then_times_each_iteration(monkeypatch):
    monkeypatch.setattr(timing.time, "perf_counter", FakeClock())
    calls, progress = {}, []
    measured = measure(
        counting_runnable(calls), warmup=4, iters=7, on_iteration=lambda d, p: progress.append((d, p))
    )
    assert calls["run"] == 4 + 7
    assert measured.samples_ms.shape == (7,) and measured.samples_ms.dtype == np.float64
    assert np.all(measured.samples_ms == 1000.0)  # one fake second between the readings around run()
    assert measured.transfer_ms is None
    assert progress[-1] == (7, 7) and len(progress) == 7


def test_measure_keeps_going_until_min_time_has_passed(monkeypatch):
    monkeypatch.setattr(timing.time, "perf_counter", FakeClock())
    calls = {}
    measured = measure(counting_runnable(calls), warmup=0, iters=2, min_time_s=30)
    # Each iteration reads the clock 3 times (start, end, the loop's check), so 30 fake seconds are ~10
    # iterations.
    assert measured.samples_ms.size > 2
    assert measured.samples_ms.size == calls["run"]


def test_measure_times_transfers_apart_from_compute(monkeypatch):
    monkeypatch.setattr(timing.time, "perf_counter", FakeClock())
    calls = {}
    measured = measure(counting_runnable(calls, transfer=True), warmup=1, iters=5)
    assert calls["up"] == calls["down"] == calls["run"] == 6
    assert measured.transfer_ms is not None and measured.transfer_ms.shape == (5,)
    assert np.all(measured.transfer_ms == 2000.0) and np.all(measured.samples_ms == 1000.0)


def test_measure_stops_at_the_iteration_where_a_cancel_arrives():
    calls = {}

    class Stop(Exception):
        pass

    def check_stop():
        if calls.get("run", 0) >= 5:
            raise Stop

    with pytest.raises(Stop):
        measure(counting_runnable(calls), warmup=2, iters=1_000_000, check_stop=check_stop)
    assert calls["run"] == 5


def test_memory_probe_on_the_cpu_reports_growth_in_bytes():
    import torch

    probe = MemoryProbe(torch.device("cpu"))
    probe.start()
    # Fresh anonymous pages, touched: numpy's buffer could come from heap pages an earlier test in this
    # process already made resident (glibc raises its mmap threshold after large frees), which grows nothing.
    kept = mmap.mmap(-1, 8 * 2**20)
    for offset in range(0, len(kept), mmap.PAGESIZE):
        kept[offset] = 1
    probe.sample()
    grown = probe.peak_bytes()
    assert isinstance(grown, int) and grown >= 4 * 2**20
    kept.close()
