"""TaskContext: what a running task may do: report progress, stream metrics, send arrays and artifacts, stop.

Metrics are buffered and flushed at most 20 times a second (to the run store and the event stream), so a
tight training loop never waits on the GUI; a flusher thread bounds the loss on a crash to a fraction of
a second. The same class serves the worker and the headless CLI; only `emit` differs.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workbench.errors import JobCancelled
from workbench.protocol.arrays import array_to_buffer

Emit = Callable[[str, dict, list], None]  # (msg_type, content, buffers)
FLUSH_INTERVAL = 0.05  # seconds: at most 20 metrics messages a second
PROGRESS_INTERVAL = 0.1


def _json_number(value: float):
    """JSON has no NaN or infinity; send those as strings the GUI turns back into floats."""
    value = float(value)
    return value if math.isfinite(value) else str(value)


class TaskContext:
    def __init__(self, emit: Emit, *, stop_event: threading.Event | None = None, run=None, job_id: str = "",
                 workspace: str | Path | None = None, resuming: bool = False):
        self._emit = emit
        self.resuming = resuming  # continue `run` from its last checkpoint rather than start afresh
        self.workspace = Path(workspace) if workspace else None  # data roots and caches default to it
        self._stop = stop_event or threading.Event()
        self.run = run  # a workbench.runs.Run, or None for queries
        self.job_id = job_id
        self._lock = threading.Lock()  # guards the pending rows; held only for an append or a swap
        self._flush_lock = threading.Lock()  # one flush at a time, so batches go out in order
        self._pending: list[tuple[int, str, float, float]] = []
        self._last_flush = time.time()  # wall clock: metrics() already reads it for the row stamps
        self._last_progress = 0.0
        self._closed = threading.Event()
        self._flusher = threading.Thread(target=self._flush_periodically, name="metrics-flusher", daemon=True)
        self._flusher.start()

    @property
    def run_dir(self) -> Path | None:
        return self.run.dir if self.run is not None else None

    # -- stopping --------------------------------------------------------------------------------
    def should_stop(self) -> bool:
        return self._stop.is_set()

    def check_stop(self) -> None:
        """Raise JobCancelled at a step boundary if the user asked to stop."""
        if self._stop.is_set():
            raise JobCancelled("cancelled by the user")

    # -- events ----------------------------------------------------------------------------------
    def progress(self, done: float, total: float | None = None, text: str = "", *, force: bool = False) -> None:
        """Report progress; throttled to 10 messages a second except the final one."""
        now = time.monotonic()
        finished = total is not None and done >= total
        if not (force or finished) and now - self._last_progress < PROGRESS_INTERVAL:
            return
        self._last_progress = now
        fraction = (done / total) if total else None
        self._emit("progress", {"done": done, "total": total, "fraction": fraction, "text": text}, [])

    def metrics(self, step: int, values: dict) -> None:
        """Record metric values at a step; cheap enough to call every training step.

        Values may be floats or 0-d tensors: they are converted at flush time, so a loop on a GPU
        synchronises with the host 20 times a second, not once per step.
        """
        now = time.time()
        rows = [(step, name, value, now) for name, value in values.items()]
        with self._lock:
            self._pending += rows
        if now - self._last_flush >= FLUSH_INTERVAL:
            self.flush(blocking=False)

    def array(self, name: str, array, **meta) -> None:
        buffers: list[bytes] = []
        self._emit("array", {"name": name, "array": array_to_buffer(array, buffers), **meta}, buffers)

    def histogram(self, name: str, counts, edges, **meta) -> None:
        buffers: list[bytes] = []
        content = {"name": name, "counts": array_to_buffer(counts, buffers),
                   "edges": array_to_buffer(edges, buffers), **meta}
        self._emit("histogram", content, buffers)

    def artifact(self, name: str, path: str | Path, kind: str = "file") -> None:
        content = {"name": name, "path": str(path), "kind": kind}
        if self.run is not None:
            self.run.log_event("artifact", content)
        self._emit("artifact", content, [])

    def log(self, text: str, level: str = "info") -> None:
        if self.run is not None:
            self.run.log_event("log", {"level": level, "text": text})
        self._emit("log", {"level": level, "text": text}, [])

    # -- flushing --------------------------------------------------------------------------------
    def flush(self, blocking: bool = True) -> None:
        # Non-blocking from metrics(): if the flusher thread is mid-write, the loop goes on and the rows
        # wait for the next flush, rather than the training step waiting for SQLite.
        if not self._flush_lock.acquire(blocking=blocking):
            return
        try:
            with self._lock:
                pending, self._pending = self._pending, []
                self._last_flush = time.time()
            if not pending:
                return
            rows = [(step, name, float(value), t) for step, name, value, t in pending]
            if self.run is not None:
                self.run.log_metrics(rows)
            self._emit("metrics", {"rows": [[s, n, _json_number(v), t] for s, n, v, t in rows]}, [])
        finally:
            self._flush_lock.release()

    def _flush_periodically(self) -> None:
        # Bounds what a crash can lose when the task stops calling metrics() (a long evaluation, say).
        while not self._closed.wait(0.25):
            if time.time() - self._last_flush >= 0.25:
                self.flush()

    def close(self) -> None:
        self._closed.set()
        self._flusher.join(timeout=1)
        self.flush()
