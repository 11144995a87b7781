"""WorkerManager: launches the worker process, watches its liveness, restarts it, and shuts it down.

No Qt: listeners are plain callbacks (called on background threads), which the GUI's adapter turns
into Qt signals. A job whose worker dies becomes failed with the exit code or signal in its message.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from workbench.client.client import WorkerClient
from workbench.client.jobs import JobRecord, JobTable
from workbench.protocol import ConnectionInfo, Message
from workbench.results import dig
from workbench.runs import mark_run_ended

log = logging.getLogger(__name__)
# ("state", (state, detail)) | ("message", Message) | ("job", JobRecord)
Listener = Callable[[str, object], None]


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


class WorkerManager:
    def __init__(
        self,
        *,
        command: list[str] | None = None,
        connection_file: str | Path | None = None,
        runtime_dir: str | Path | None = None,
        max_restarts: int = 3,
        restart_window: float = 60.0,
        heartbeat_interval: float = 1.0,
        heartbeat_timeout: float = 5.0,
        start_timeout: float = 60.0,
        env: dict | None = None,
    ):
        # With `connection_file` and no command, attach to a worker someone else started (a remote GPU box).
        self.attach_only = connection_file is not None and command is None
        self.command = command or [sys.executable, "-m", "workbench.worker"]
        # Without a runtime_dir, the connection file (it holds the session's keys) and the worker's log go
        # into a temporary folder of our own, made at launch and removed at shutdown.
        self._runtime_dir = Path(runtime_dir) if runtime_dir else None
        self._own_dir: tempfile.TemporaryDirectory | None = None
        self.connection_file = Path(connection_file) if connection_file else None
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.start_timeout = start_timeout
        self.env = env
        self.jobs = JobTable()
        self.state = "stopped"
        self.detail = ""
        self.process: subprocess.Popen | None = None
        self.client: WorkerClient | None = None
        self.stderr_path: Path | None = None
        self._listeners: list[Listener] = []
        self._restarts: deque[float] = deque()
        self._lock = threading.RLock()
        self._generation = 0  # bumps on every (re)start so a stale monitor thread stands down
        self._closing = False

    @property
    def runtime_dir(self) -> Path:
        if self._runtime_dir is not None:
            return self._runtime_dir
        if self._own_dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="workbench-")
        return Path(self._own_dir.name)

    # -- listeners -------------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _notify(self, kind: str, payload) -> None:
        for listener in list(self._listeners):
            try:
                listener(kind, payload)
            except Exception:
                log.exception("worker listener failed")

    def _set_state(self, state: str, detail: str = "") -> None:
        if (state, detail) == (self.state, self.detail):
            return
        self.state, self.detail = state, detail
        self._notify("state", (state, detail))

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, wait: bool = True) -> bool:
        """Start (or attach to) the worker; with wait=False return at once and report through listeners."""
        with self._lock:
            self._closing = False
            self._generation += 1
            generation = self._generation
        self._set_state("starting", "attaching" if self.attach_only else "launching the worker")
        if not wait:
            threading.Thread(target=self._start, args=(generation,), name="worker-start", daemon=True).start()
            return True
        return self._start(generation)

    def _start(self, generation: int) -> bool:
        try:
            conn = self._attach() if self.attach_only else self._launch()
            client = WorkerClient(conn, self._on_client_message, heartbeat_interval=self.heartbeat_interval)
            if not client.wait_ready(self.start_timeout):
                client.close()
                raise RuntimeError(f"the worker did not answer within {self.start_timeout:.0f} s")
        except Exception as exc:
            with self._lock:
                if generation != self._generation:
                    return False
            self._kill_process()
            self._set_state("dead", f"could not start the worker: {exc}")
            return False
        with self._lock:
            if generation != self._generation or self._closing:
                client.close()
                return False
            self.client = client
        self._set_state("ready", f"pid {conn.pid}" if conn.pid else "")
        threading.Thread(target=self._monitor, args=(generation,), name="worker-monitor", daemon=True).start()
        return True

    def _attach(self) -> ConnectionInfo:
        return ConnectionInfo.read(self.connection_file)

    def _launch(self) -> ConnectionInfo:
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        conn_path = self.runtime_dir / f"worker-{os.getpid()}-{self._generation}.json"
        ConnectionInfo.new().write(conn_path)
        self.stderr_path = conn_path.with_suffix(".log")
        argv = [*self.command, "--connection-file", str(conn_path), "--parent-pid", str(os.getpid())]
        with open(self.stderr_path, "wb") as stderr:
            # A session of its own: Ctrl-C in the GUI's terminal must not hit the worker directly.
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"the worker exited during start-up ({describe_exit(self.process.returncode)})"
                    f"{self._stderr_tail()}"
                )
            conn = ConnectionInfo.read(conn_path)
            if conn.bound:
                return conn
            time.sleep(0.02)
        raise RuntimeError(f"the worker did not open its ports within {self.start_timeout:.0f} s")

    def _stderr_tail(self, lines: int = 8) -> str:
        if not self.stderr_path or not self.stderr_path.exists():
            return ""
        tail = self.stderr_path.read_text(errors="replace").strip().splitlines()[-lines:]
        return (":\n" + "\n".join(tail)) if tail else ""

    # -- liveness --------------------------------------------------------------------------------
    def _monitor(self, generation: int) -> None:
        while True:
            time.sleep(0.1)
            with self._lock:
                if generation != self._generation or self._closing:
                    return
                client, process = self.client, self.process
            if process is not None and process.poll() is not None:
                self._on_worker_died(generation, f"worker exited: {describe_exit(process.returncode)}")
                return
            if client is None:
                continue
            silent = time.monotonic() - client.last_seen
            if silent > self.heartbeat_timeout:
                self._set_state("unresponsive", f"no answer for {silent:.0f} s")
                if self.attach_only and silent > 3 * self.heartbeat_timeout:
                    self._on_worker_died(generation, f"worker unreachable for {silent:.0f} s")
                    return
            elif self.state == "unresponsive":
                self._set_state("ready")

    def _on_worker_died(self, generation: int, reason: str) -> None:
        with self._lock:
            if generation != self._generation:
                return
            client, self.client = self.client, None
        if client is not None:
            client.close()
        tail = self._stderr_tail()
        self._end_jobs(self.jobs.fail_active(reason))
        self._set_state("dead", reason + (tail if tail and "Traceback" in tail else ""))
        if self._may_restart():
            self._set_state("restarting", reason)
            self.start(wait=False)

    def _may_restart(self) -> bool:
        now = time.monotonic()
        while self._restarts and now - self._restarts[0] > self.restart_window:
            self._restarts.popleft()
        if self._closing or len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        return True

    def restart(
        self, wait: bool = False, *, cancelled: dict[str, str] | None = None, shutdown_timeout: float = 2.0
    ) -> bool:
        """A user-requested restart: stop whatever runs (failing its jobs, or ending the `cancelled` ones as
        cancelled) and start afresh. Their runs are marked on disk too."""
        self.shutdown(timeout=shutdown_timeout)
        self._restarts.clear()
        self._end_jobs(
            self.jobs.fail_active("worker restarted by the user", "WorkerRestarted", cancelled=cancelled)
        )
        return self.start(wait=wait)

    def force_stop(self, job_id: str, wait: bool = False) -> bool:
        """Stop a job that ignores cancel (a hung forward, say) the only sure way: restart its worker.

        The job ends cancelled, its run marked so on disk and resumable from its last checkpoint; any other
        job of this worker fails with "worker restarted by the user". The window asks before calling this.
        """
        record = self.jobs.get(job_id)
        if record is None or not record.active:
            return False
        message = (
            "force-stopped: it did not respond to cancel, so its worker was restarted; resume it from its "
            "last checkpoint"
        )
        # The user already waited out the cancel; no need for a slow, polite escalation.
        return self.restart(wait=wait, cancelled={job_id: message}, shutdown_timeout=0.5)

    def _end_jobs(self, records: list[JobRecord]) -> None:
        """Tell listeners, and write the end into each job's run: its worker can no longer say it itself."""
        for record in records:
            if record.run_dir:
                try:
                    mark_run_ended(
                        record.run_dir,
                        record.state,
                        record.error_message,
                        error_type=dig(record.error, "type", default="WorkerDied"),
                    )
                except Exception:  # the run folder may be gone or unwritable; the job list still tells
                    log.exception("could not mark run %s %s", record.run_dir, record.state)
            self._notify("job", record)

    # -- jobs ------------------------------------------------------------------------------------
    def submit(
        self,
        task: str,
        spec: dict | None = None,
        workspace: str | Path | None = None,
        *,
        internal: bool = False,
        resume: str | Path | None = None,
    ) -> JobRecord:
        client = self.client
        if client is None or self.state not in ("ready", "unresponsive"):
            raise RuntimeError(f"the worker is {self.state}; wait for it to be ready or restart it")
        msg = client.job_request(
            task, spec, str(workspace) if workspace else None, str(resume) if resume else None
        )
        # Known before it is sent: the worker's first events can arrive before send_message returns.
        record = self.jobs.add(msg.msg_id, task, spec, internal=internal)
        client.send_message(msg)
        self._notify("job", record)
        return record

    def cancel(self, job_id: str) -> None:
        if self.client is not None:
            self.client.cancel(job_id)

    def call(
        self, msg_type: str, content: dict | None = None, timeout: float = 10.0, channel: str = "shell"
    ) -> Message:
        if self.client is None:
            raise RuntimeError(f"the worker is {self.state}")
        return self.client.call(msg_type, content, timeout=timeout, channel=channel)

    def wait_job(self, job_id: str, timeout: float = 60.0) -> JobRecord:
        """Block until the job finishes (scripts and tests; the GUI listens instead)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.jobs.get(job_id)
            if record is not None and not record.active:
                return record
            time.sleep(0.01)
        raise TimeoutError(f"job {job_id} still {self.jobs.get(job_id).state} after {timeout} s")

    def _on_client_message(self, channel: str, msg: Message) -> None:
        record = self.jobs.apply(msg)
        self._notify("message", msg)
        if record is not None:
            self._notify("job", record)

    # -- shutdown --------------------------------------------------------------------------------
    def _stand_down(self):
        """Stop watching the worker (no more reports, no restart) and take its client; returns that client."""
        with self._lock:
            self._closing = True
            self._generation += 1
            client, self.client = self.client, None
        return client

    def detach(self) -> None:
        """Disconnect from an attached worker without asking it to shut down: its jobs go on."""
        client = self._stand_down()
        if client is not None:
            client.close()
        self._set_state("stopped", "detached")

    def shutdown(self, timeout: float = 2.0) -> str:
        """Stop the worker, escalating: shutdown request → SIGINT → SIGTERM → SIGKILL. Returns how it
        ended."""
        client = self._stand_down()
        process = self.process
        how = "stopped"
        if client is not None:
            client.send("shutdown_request", channel="control")
        if process is not None and not self.attach_only:
            how = self._escalate(process, timeout)
        if client is not None:
            client.close()
        if self._own_dir is not None and (process is None or process.poll() is not None):
            self._own_dir.cleanup()  # a worker that would not die may still read its connection file: keep it
            self._own_dir = None
        self._set_state("stopped", how)
        return how

    def _escalate(self, process: subprocess.Popen, timeout: float) -> str:
        steps = [
            ("shutdown request", None),
            ("SIGINT", signal.SIGINT),
            ("SIGTERM", signal.SIGTERM),
            ("SIGKILL", signal.SIGKILL),
        ]
        for name, sig in steps:
            if sig is not None and process.poll() is None:
                try:
                    process.send_signal(sig)
                except ProcessLookupError:
                    pass
            try:
                process.wait(timeout=timeout if sig != signal.SIGKILL else 10)
                return f"exited after {name} ({describe_exit(process.returncode)})"
            except subprocess.TimeoutExpired:
                continue
        return "did not exit even after SIGKILL"

    def _kill_process(self) -> None:
        if self.process is not None and self.process.poll() is None and not self.attach_only:
            self.process.kill()
            self.process.wait(timeout=10)
