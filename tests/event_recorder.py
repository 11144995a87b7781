"""An `emit` for running a task in the test process (workbench.worker.runner.run_task) that keeps every
event."""

from __future__ import annotations

import threading


class Events:
    """An `emit` that keeps every event; `on_event(msg_type, content)` may act on one as it arrives."""

    def __init__(self, on_event=None):
        self.events: list[tuple[str, dict]] = []
        self.on_event = on_event
        self.lock = threading.Lock()

    def __call__(self, msg_type: str, content: dict, buffers: list) -> None:
        with self.lock:
            self.events.append((msg_type, content))
        if self.on_event is not None:
            self.on_event(msg_type, content)

    def of(self, msg_type: str) -> list[dict]:
        with self.lock:
            return [content for kind, content in self.events if kind == msg_type]

    def arrays(self, name: str) -> list[dict]:
        return [c for c in self.of("array") if c["name"] == name]
