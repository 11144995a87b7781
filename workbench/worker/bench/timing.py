"""The timing loop of one benchmark row, in the spirit of nanoGPT's bench.py: untimed warm-up, then every
iteration timed on its own between synchronisations, at least `iters` of them and until `min_time_s` has
passed. A cancel is honoured between iterations. torch-free: the runnable brings its own synchronisation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Runnable:
    """One backend at one batch size, ready to run.

    `run()` computes on inputs already where the backend wants them and returns its outputs. On a device with
    its own memory, `upload()` copies the host input there and `download(outputs)` copies the outputs back;
    they are timed apart from `run`, as the transfer. `sync()` waits for queued device work (a no-op on the
    CPU). `close()` frees what the runnable holds.
    """

    run: Callable[[], Any]
    sync: Callable[[], None] = lambda: None
    upload: Callable[[], None] | None = None
    download: Callable[[Any], None] | None = None
    close: Callable[[], None] = lambda: None
    source: str = "model"  # what it was built from: the PyTorch model, a file, a quantize run


@dataclass
class Measured:
    samples_ms: np.ndarray  # one per timed iteration, float64 milliseconds
    transfer_ms: np.ndarray | None  # host->device plus device->host per iteration, where there is a transfer


def _once(runnable: Runnable) -> tuple[float, float | None]:
    """(compute seconds, transfer seconds or None) of one iteration."""
    sync, clock = runnable.sync, time.perf_counter
    if runnable.upload is None:
        sync()
        start = clock()
        outputs = runnable.run()
        sync()
        compute = clock() - start
        del outputs
        return compute, None
    sync()
    t0 = clock()
    runnable.upload()
    sync()
    t1 = clock()
    outputs = runnable.run()
    sync()
    t2 = clock()
    if runnable.download is not None:
        runnable.download(outputs)
    sync()
    t3 = clock()
    del outputs
    return t2 - t1, (t1 - t0) + (t3 - t2)


def measure(
    runnable: Runnable,
    *,
    warmup: int,
    iters: int,
    min_time_s: float = 0.0,
    check_stop: Callable[[], None] = lambda: None,
    on_iteration: Callable[[int, int], None] | None = None,
    after_iteration: Callable[[], None] | None = None,
) -> Measured:
    """Warm up, then time iterations until there are `iters` and `min_time_s` has passed.

    `check_stop` runs before every iteration (it raises to cancel). `on_iteration(done, planned)` reports
    progress; `after_iteration` (a memory sample, say) runs outside the timed window.
    """
    for _ in range(warmup):
        check_stop()
        _once(runnable)
        if after_iteration is not None:
            after_iteration()
    samples: list[float] = []
    transfers: list[float] = []
    started = time.perf_counter()
    while len(samples) < iters or time.perf_counter() - started < min_time_s:
        check_stop()
        compute, transfer = _once(runnable)
        samples.append(compute * 1e3)
        if transfer is not None:
            transfers.append(transfer * 1e3)
        if after_iteration is not None:
            after_iteration()
        if on_iteration is not None:
            on_iteration(len(samples), iters)
    return Measured(
        np.asarray(samples, dtype=np.float64), np.asarray(transfers, dtype=np.float64) if transfers else None
    )
