"""Checkpoint writes on a background thread: the loop hands over a CPU copy of the state and goes on training.

Why: an fsync'd write blocks for milliseconds, and on small epochs the wait (and the idle cores it leaves)
costs more than the copy. Writes keep their order; `wait()` returns once everything handed over is on disk and
raises the first write error. Worker side; never imports Qt.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import torch

from workbench.worker.checkpoints import save_state_dict


def cpu_copy(obj):
    """A deep copy of a state dict whose tensors are detached CPU copies (the live ones change next step)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {key: cpu_copy(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(value) for value in obj)
    return obj


class CheckpointWriter:
    def __init__(self, relative_to: Path | None = None):
        # Errors name files relative to this folder (the run's): "disk full while saving checkpoints/last.pt".
        self._relative_to = Path(relative_to) if relative_to is not None else None
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, state: dict, path: Path) -> None:
        """Copy `state` now and write it to `path` (atomically, via save_state_dict) in the background."""
        self._raise_error()
        self._queue.put((cpu_copy(state), Path(path)))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="checkpoint-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:  # close(): the job is over, so is this thread
                self._queue.task_done()
                return
            state, path = item
            try:
                if self._error is None:
                    save_state_dict(state, path, name=self._name(path))
            except BaseException as exc:  # handed to the training thread at its next submit() or wait()
                self._error = exc
            finally:
                self._queue.task_done()

    def _name(self, path: Path) -> str:
        if self._relative_to is not None:
            try:
                return path.relative_to(self._relative_to).as_posix()
            except ValueError:  # not under it: the full path says more
                pass
        return str(path)

    def wait(self) -> None:
        """Block until every submitted checkpoint is written; raise the first error a write met."""
        self._queue.join()
        self._raise_error()

    def close(self) -> None:
        """Finish the writes handed over, then end the thread (errors are left to wait())."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
