"""Numbers of one benchmark row from its per-iteration samples: latency percentiles, throughput, and the
memory probes (CUDA's allocator peak, or the process's resident set on the CPU). numpy and the stdlib only;
torch is imported lazily by the CUDA probe. Never imports Qt.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


def summarize(samples_ms: Sequence[float] | np.ndarray) -> dict[str, float]:
    """{p50, p90, p99, mean, std, min} in milliseconds of per-iteration samples.

    Percentiles interpolate linearly between order statistics (numpy's default), so min <= p50 <= p90 <= p99
    holds for any non-empty sample; std is the population standard deviation.
    """
    values = np.asarray(samples_ms, dtype=np.float64)
    if values.size == 0:
        raise ValueError("no samples to summarize")
    stats = {name: float(np.percentile(values, q)) for name, q in PERCENTILES.items()}
    stats.update(mean=float(values.mean()), std=float(values.std()), min=float(values.min()))
    return stats


def throughput_per_s(batch_size: int, p50_ms: float) -> float | None:
    """Samples a second at the median latency: batch_size / (p50 in seconds). The median, not the mean, so one
    slow iteration (a page fault, a noisy neighbour) does not move the number."""
    if not p50_ms or p50_ms <= 0 or not np.isfinite(p50_ms):
        return None
    return batch_size / (p50_ms / 1000.0)


# --- memory -------------------------------------------------------------------------------------------------


def _rss_reader():
    """A function returning this process's resident set in bytes, or None where there is no way to read it."""
    try:
        import psutil

        process = psutil.Process()
        return lambda: int(process.memory_info().rss)
    except ImportError:
        pass
    statm = "/proc/self/statm"
    if os.path.exists(statm):
        page = os.sysconf("SC_PAGE_SIZE")

        def from_statm() -> int:
            with open(statm, "rb") as f:
                return int(f.read().split()[1]) * page

        return from_statm
    try:
        import resource
        import sys
    except ImportError:  # pragma: no cover - Windows without psutil
        return None
    # ru_maxrss is the peak so far (kilobytes on Linux, bytes on macOS): growth of the peak, a lower bound.
    scale = 1 if sys.platform == "darwin" else 1024
    return lambda: int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


class MemoryProbe:
    """Peak memory of one row. On CUDA: torch's max allocated bytes on the device from `running` (the peak is
    reset there, after the build, so a compiler's scratch space is not counted) to the end; it includes the
    weights resident on the device. Elsewhere: how far the process's resident set grew above its size at
    `start` (before the build, so a backend's own copy of the weights counts), sampled after the build and
    after every iteration, outside the timed window. Memory the allocator kept from an earlier row is reused
    without growing, so on the CPU this is what the row needed beyond what the process already held: a lower
    bound."""

    def __init__(self, device):
        self.device = device
        self.cuda = getattr(device, "type", str(device)) == "cuda"
        self._read = None if self.cuda else _rss_reader()
        self._base = 0
        self._peak = 0

    def start(self) -> None:
        """Before the row's runnable is built."""
        if not self.cuda and self._read is not None:
            self._base = self._peak = self._read()

    def running(self) -> None:
        """After the build, before the first warm-up iteration."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self.sample()

    def sample(self) -> None:
        if self._read is not None:
            value = self._read()
            if value > self._peak:
                self._peak = value

    def peak_bytes(self) -> int | None:
        if self.cuda:
            import torch

            return int(torch.cuda.max_memory_allocated(self.device))
        if self._read is None:
            return None
        self.sample()
        return max(0, self._peak - self._base)
