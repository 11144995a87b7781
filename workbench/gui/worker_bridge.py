"""QtWorkerBridge: turns the WorkerManager's background-thread callbacks into Qt signals on the GUI thread.

Like qtconsole's channels: one thread reads frames, one signal per kind reaches the widgets.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from workbench.client import JobRecord, WorkerManager
from workbench.protocol import Message


class QtWorkerBridge(QObject):
    # Signals emitted from the manager's threads are delivered queued, on the thread this object lives in.
    state_changed = Signal(str, str)  # state, detail
    message_received = Signal(object)  # Message
    job_changed = Signal(object)  # JobRecord snapshot

    def __init__(self, manager: WorkerManager, parent: QObject | None = None):
        super().__init__(parent)
        self.manager = manager
        manager.add_listener(self._on_manager_event)

    def _on_manager_event(self, kind: str, payload) -> None:
        if kind == "state":
            self.state_changed.emit(*payload)
        elif kind == "message" and isinstance(payload, Message):
            self.message_received.emit(payload)
        elif kind == "job" and isinstance(payload, JobRecord):
            self.job_changed.emit(payload)
