"""JobTable: what the GUI knows about each job, kept up to date from the worker's events and replies.

A job is keyed by the msg_id of its job_request; every event about it carries that id as parent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace

from workbench.protocol import Message
from workbench.results import dig

ACTIVE_STATES = frozenset({"submitted", "queued", "running"})


@dataclass
class JobRecord:
    job_id: str
    task: str
    spec: dict = field(default_factory=dict)
    state: str = "submitted"  # submitted, queued, running, done, failed, cancelled
    fraction: float | None = None
    text: str = ""
    run_dir: str | None = None
    result: dict | None = None
    error: dict | None = None
    internal: bool = False  # a query a panel made for itself (thumbnails, devices): not listed as a job
    submitted: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def error_message(self) -> str:
        return dig(self.error, "message", default="")


class JobTable:
    """Thread-safe: updated from the client's I/O thread, read from anywhere as snapshots."""

    def __init__(self):
        self._jobs: dict[str, JobRecord] = {}
        self._lock = threading.Lock()

    def add(self, job_id: str, task: str, spec: dict | None = None, *, internal: bool = False) -> JobRecord:
        with self._lock:
            record = self._jobs[job_id] = JobRecord(job_id, task, dict(spec or {}), internal=internal)
            return replace(record)

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            record = self._jobs.get(job_id)
            return replace(record) if record else None

    def all(self) -> list[JobRecord]:
        with self._lock:
            return [replace(r) for r in self._jobs.values()]

    def active(self) -> list[JobRecord]:
        return [r for r in self.all() if r.active]

    def apply(self, msg: Message) -> JobRecord | None:
        """Fold one message into its job's record; returns the updated record, or None if not a job's."""
        with self._lock:
            record = self._jobs.get(msg.parent_id or "")
            if record is None or not record.active:
                return None  # late events of a finished (or failed-by-crash) job change nothing
            content = msg.content
            if msg.msg_type == "status":
                state = content.get("state")
                if state in ("queued", "running"):
                    record.state = state
                record.run_dir = content.get("run_dir", record.run_dir)
            elif msg.msg_type == "progress":
                record.state = "running"
                record.fraction = content.get("fraction")
                record.text = content.get("text", "")
            elif msg.msg_type == "job_reply":
                self._finish(record, content.get("status", "failed"), content.get("error"), content)
                if record.internal:  # nobody lists internal queries; keeping them would only grow memory
                    del self._jobs[record.job_id]
            else:
                return None
            return replace(record)

    def fail_active(
        self, message: str, error_type: str = "WorkerDied", *, cancelled: dict[str, str] | None = None
    ) -> list[JobRecord]:
        """Mark every unfinished job failed, e.g. 'worker exited: SIGKILL'.

        `cancelled` maps job ids to a message: those jobs were stopped on purpose (a force stop), so they
        end cancelled, not failed.
        """
        cancelled = cancelled or {}
        with self._lock:
            ended = [r for r in self._jobs.values() if r.active]
            for record in ended:
                if record.job_id in cancelled:
                    self._finish(
                        record,
                        "cancelled",
                        {"type": "JobCancelled", "message": cancelled[record.job_id]},
                        None,
                    )
                else:
                    self._finish(record, "failed", {"type": error_type, "message": message}, None)
            return [replace(r) for r in ended]

    @staticmethod
    def _finish(record: JobRecord, state: str, error: dict | None, result: dict | None) -> None:
        record.state = state if state in ("done", "failed", "cancelled") else "failed"
        record.error = error
        record.result = result
        if result:
            record.run_dir = result.get("run_dir") or record.run_dir
        if record.state == "done":
            record.fraction = 1.0
        record.finished = time.time()
