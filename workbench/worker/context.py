"""TaskContext: what a running task may do: report progress, stream metrics, send arrays and artifacts, stop.

Metrics are buffered and flushed at most 20 times a second (to the run store and the event stream) as
column buffers, so a tight training loop never waits on the GUI; a watchdog thread flushes what a quiet
task left pending. The same class serves the worker and the headless CLI; only `emit` differs.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from pathlib import Path

from workbench.errors import JobCancelled
from workbench.protocol.arrays import array_to_buffer
from workbench.protocol.metrics import encode_metrics
from workbench.text import strip_ansi, strip_ansi_deep

Emit = Callable[[str, dict, list], None]  # (msg_type, content, buffers)
FLUSH_INTERVAL = 0.05  # seconds: at most 20 metrics messages a second
PROGRESS_INTERVAL = 0.1


class TaskContext:
    def __init__(
        self,
        emit: Emit,
        *,
        stop_event: threading.Event | None = None,
        run=None,
        job_id: str = "",
        workspace: str | Path | None = None,
        resuming: bool = False,
    ):
        self._emit = emit
        self.resuming = resuming  # continue `run` from its last checkpoint rather than start afresh
        self.workspace = Path(workspace) if workspace else None  # data roots and caches default to it
        self._stop = stop_event or threading.Event()
        self.run = run  # a workbench.runs.Run, or None for queries
        self.job_id = job_id
        self._flush_lock = threading.Lock()  # one flush at a time, so batches go out in order
        self._last_flush = time.time()
        # (step, values, time) per metrics() call; deque appends and pops are atomic, so the hot path
        # takes no lock and builds no per-metric rows (flush does that, 20 times a second at most).
        self._pending: collections.deque[tuple[int, dict, float]] = collections.deque()
        self._last_progress = 0.0
        self._sinks: list = []  # more writers of the same metrics (a run's TensorBoard files): see add_sink
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
    def progress(
        self, done: float, total: float | None = None, text: str = "", *, force: bool = False
    ) -> None:
        """Report progress; throttled to 10 messages a second except the final one."""
        now = time.monotonic()
        finished = total is not None and done >= total
        if not (force or finished) and now - self._last_progress < PROGRESS_INTERVAL:
            return
        self._last_progress = now
        fraction = (done / total) if total else None
        self._emit(
            "progress", {"done": done, "total": total, "fraction": fraction, "text": strip_ansi(text)}, []
        )

    def metrics(self, step: int, values: dict) -> None:
        """Record metric values at a step; cheap enough to call every training step.

        Values may be floats or 0-d tensors: they are converted at flush time, so a loop on a GPU
        synchronises with the host 20 times a second, not once per step.
        """
        now = time.time()
        self._pending.append((step, values, now))
        # Flushing inline, on the task's own thread, measured cheaper than handing every batch to a
        # background thread: that thread's wake-ups fight the task for the GIL between torch ops.
        if now - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def array(self, name: str, array, **meta) -> None:
        buffers: list[bytes] = []
        # The metadata may hold table rows with a library's message (a bench backend's reason): plain text
        # too.
        self._emit(
            "array",
            {"name": name, "array": array_to_buffer(array, buffers), **strip_ansi_deep(meta)},
            buffers,
        )

    def histogram(self, name: str, counts, edges, **meta) -> None:
        """Send a histogram (bin counts and their edges); one with a `step` also goes to the sinks."""
        if meta.get("step") is not None:
            for sink in list(self._sinks):
                sink.histogram(name, int(meta["step"]), counts, edges)
        buffers: list[bytes] = []
        content = {
            "name": name,
            "counts": array_to_buffer(counts, buffers),
            "edges": array_to_buffer(edges, buffers),
            **meta,
        }
        self._emit("histogram", content, buffers)

    def artifact(self, name: str, path: str | Path, kind: str = "file") -> None:
        for sink in list(self._sinks):  # a recorded step of layer statistics, say
            sink.artifact(name, path, kind)
        content = {"name": name, "path": str(path), "kind": kind}
        if self.run is not None:
            self.run.log_event("artifact", content)
        self._emit("artifact", content, [])

    def log(self, text: str, level: str = "info") -> None:
        # a library's coloured message (torch's exporter) reads as plain text everywhere
        text = strip_ansi(text)
        if self.run is not None:
            self.run.log_event("log", {"level": level, "text": text})
        self._emit("log", {"level": level, "text": text}, [])

    # -- flushing --------------------------------------------------------------------------------
    def flush(self) -> None:
        with self._flush_lock:
            self._last_flush = time.time()
            pending = []
            while self._pending:  # popleft until empty: a concurrent append lands in this flush or the next
                pending.append(self._pending.popleft())
            if not pending:
                return
            columns: dict[str, tuple[list, list, list]] = {}
            for step, values, t in pending:
                for name, value in values.items():
                    column = columns.get(name) or columns.setdefault(name, ([], [], []))
                    column[0].append(step)
                    # a 0-d device tensor syncs here: 20 times a second, not per step
                    column[1].append(float(value))
                    column[2].append(t)
            if self.run is not None:
                self.run.log_metrics(
                    [
                        (s, name, v, t)
                        for name, (steps, values, times) in columns.items()
                        for s, v, t in zip(steps, values, times)
                    ]
                )
            for sink in self._sinks:  # under the flush lock: a sink sees batches in order, one at a time
                sink.scalars(columns)
            content, buffers = encode_metrics(columns)
            self._emit("metrics", content, buffers)

    def add_sink(self, sink) -> None:
        """Also hand every flushed batch of metrics to `sink.scalars({name: (steps, values, times)})` (values
        are host floats by then, so a sink never synchronises with the device), every histogram that has a
        step to `sink.histogram(name, step, counts, edges)` and every artifact to `sink.artifact(name, path,
        kind)`. A sink must not raise."""
        with self._flush_lock:
            self._sinks.append(sink)

    def remove_sink(self, sink) -> None:
        """Stop feeding `sink`, after a flush of what is pending (so it has every value recorded until
        now)."""
        self.flush()
        with self._flush_lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def _flush_periodically(self) -> None:
        # Only for a task that stops calling metrics() (a long evaluation, say): rows it left pending still
        # reach the store within a quarter second, which bounds what a crash can lose.
        while not self._closed.wait(0.25):
            if self._pending and time.time() - self._last_flush >= 0.25:
                self.flush()

    def close(self) -> None:
        self._closed.set()
        self._flusher.join(timeout=1)
        self.flush()
