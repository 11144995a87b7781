"""QueryRunner: a panel asks the worker a quick question (a page of thumbnails, one sample) and gets a
callback.

Replies arrive on the GUI thread with their arrays rebuilt from the message buffers. Queries are internal
jobs, so the jobs list does not show them.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.protocol import Message, array_from_buffer

Callback = Callable[[dict], None]


def unpack_arrays(value, buffers: list[bytes]):
    """The inverse of the kernel's pack_arrays: buffer descriptors back to numpy arrays."""
    if isinstance(value, dict):
        if set(value) == {"dtype", "shape", "buffer"}:
            return array_from_buffer(value, buffers)
        return {k: unpack_arrays(v, buffers) for k, v in value.items()}
    if isinstance(value, list):
        return [unpack_arrays(v, buffers) for v in value]
    return value


class QueryRunner(QObject):
    def __init__(self, bridge: QtWorkerBridge, workspace=None, parent: QObject | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.workspace = workspace  # tells the worker where data roots and caches default to
        # a TrustGate: a query that would import untrusted user code is asked about, or not sent
        self.gate = None
        self._pending: dict[str, tuple[Callback, Callback | None]] = {}
        bridge.message_received.connect(self._on_bridge_message)
        bridge.job_changed.connect(self._on_bridge_job_changed)

    def query(
        self, task: str, spec: dict, on_result: Callback, on_error: Callback | None = None
    ) -> str | None:
        """Ask the worker; returns the job id, or None (after calling on_error) if the worker cannot take it,
        or the query would import user code the user has not trusted."""
        if self.gate is not None and not self.gate.allow(spec, ask_declined=False):
            if on_error:
                on_error(self.gate.refusal(spec))
            return None
        try:
            record = self.bridge.manager.submit(task, spec, self.workspace, internal=True)
        except RuntimeError as exc:
            if on_error:
                on_error({"type": "WorkerUnavailable", "message": str(exc)})
            return None
        self._pending[record.job_id] = (on_result, on_error)
        return record.job_id

    def forget(self, job_id: str) -> None:
        """Drop interest in a query (a stale page, say): its reply will be ignored."""
        self._pending.pop(job_id, None)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _on_bridge_message(self, msg: Message) -> None:
        if msg.msg_type != "job_reply" or msg.parent_id not in self._pending:
            return
        on_result, on_error = self._pending.pop(msg.parent_id)
        if msg.content.get("status") == "done":
            on_result(unpack_arrays(msg.content, msg.buffers))
        elif on_error:
            on_error(msg.content.get("error") or {"type": "Error", "message": "the query failed"})

    def _on_bridge_job_changed(self, record) -> None:
        # A worker crash fails the job without any reply; tell the asker instead of leaving it waiting.
        if record.job_id in self._pending and not record.active and record.result is None:
            _, on_error = self._pending.pop(record.job_id)
            if on_error:
                on_error(record.error or {"type": "Error", "message": "the worker stopped"})
