"""The worker's kernel loop: shell requests, the event stream, and a control path that never queues.

Threads: the main thread owns the shell (ROUTER) and event (PUB) sockets; a control thread owns the
control socket, so ping, cancel and shutdown are answered while a job runs; a job thread runs "job"
tasks one at a time and a small pool runs "query" tasks beside them; a gatekeeper thread decides who may
connect. Sockets never cross threads: other threads hand outgoing messages to the main thread through a
queue and an inproc wake-up.
"""

from __future__ import annotations

import logging
import os
import queue
import secrets
import signal
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import zmq

from workbench import __version__
from workbench.errors import UsageError, WorkbenchError
from workbench.protocol import (
    ConnectionInfo,
    Message,
    ProtocolError,
    RejectionLog,
    ReplayGuard,
    Signer,
    array_to_buffer,
    decode,
    encode,
    new_message,
)
from workbench.protocol.gatekeeper import Gatekeeper
from workbench.protocol.sockets import limit_incoming, require_curve, serve_curve, serve_plain, use_ipv6
from workbench.protocol.wire import MAX_REQUEST_FRAME, MAX_SUBSCRIPTION_FRAME, RECEIVE_HWM
from workbench.task_ids import canonical_name
from workbench.worker.host_memory import release_freed_memory
from workbench.worker.registry import TaskInfo, get_task, list_tasks
from workbench.worker.runner import build_spec, run_task

log = logging.getLogger(__name__)

# The content fields each request may carry, and the JSON types each may have (None: null is allowed). A field
# of another type is answered with a one-line error here, before any handler or task sees it.
REQUEST_FIELDS: dict[str, dict[str, tuple]] = {
    "job_request": {"task": (str,), "spec": (dict, None), "workspace": (str, None), "resume": (str, None)},
    "cancel_request": {"job_id": (str, None)},
}
_JSON_NAMES = {
    str: "a string",
    dict: "an object",
    list: "a list",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
    None: "null",
}


def content_problem(msg: Message) -> str:
    """What is wrongly typed in a request's content, in one line, or ''; absent fields are the handler's
    business."""
    for name, allowed in REQUEST_FIELDS.get(msg.msg_type, {}).items():
        if name not in msg.content:
            continue
        value = msg.content[name]
        if value is None and None in allowed:
            continue
        if isinstance(value, tuple(t for t in allowed if t is not None)) and not isinstance(value, bool):
            continue
        wanted = " or ".join(_JSON_NAMES[t] for t in allowed)
        got = _JSON_NAMES.get(type(value), type(value).__name__)
        return f"{msg.msg_type}: {name!r} must be {wanted}, not {got}"
    return ""


@dataclass
class Job:
    request: Message
    identities: list[bytes]
    task_name: str
    stop: threading.Event = field(default_factory=threading.Event)
    state: str = "queued"


def pack_arrays(value, buffers: list[bytes]):
    """Replace numpy arrays anywhere in a result with buffer descriptors, so they travel as raw bytes."""
    if isinstance(value, np.ndarray):
        return array_to_buffer(value, buffers)
    if isinstance(value, dict):
        return {k: pack_arrays(v, buffers) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [pack_arrays(v, buffers) for v in value]
    return value


class Kernel:
    def __init__(
        self,
        conn: ConnectionInfo,
        *,
        context: zmq.Context | None = None,
        tasks: dict[str, TaskInfo] | None = None,
    ):
        self.conn = conn
        self._task_overrides = tasks  # a test's fake worker serves its own tasks over the real protocol
        self.session = uuid.uuid4().hex
        self.signer = Signer(conn.key)
        # One guard for both channels: a msg_id is unique across them, so a replay on either is caught.
        self.replay_guard = ReplayGuard()
        self.rejections = {
            channel: RejectionLog(log, f"{channel} message") for channel in ("shell", "control")
        }
        # A context of our own: the gatekeeper's ZAP handler answers for every socket of its context, so
        # two kernels in one process (tests' fake workers) must not share one.
        self._own_context = context is None
        self.ctx = context or zmq.Context()
        self._outgoing: queue.Queue = queue.Queue()
        self._wake_addr = f"inproc://wake-{self.session}"
        self._wake_lock = threading.Lock()
        # set under _wake_lock once the sockets are closed: late senders drop their message
        self._closed = False
        self._shutdown = threading.Event()
        self._jobs: dict[str, Job] = {}
        self._jobs_lock = threading.Lock()
        self._job_queue: queue.Queue = queue.Queue()
        self._queries = ThreadPoolExecutor(max_workers=2, thread_name_prefix="query")
        self._bind()

    # -- setup -----------------------------------------------------------------------------------
    def _bind(self) -> None:
        if self.conn.needs_curve:
            require_curve(self.conn.ip)  # before any socket exists: refusing must not leak one
        try:
            self._open_sockets()
        except BaseException:  # an address zmq cannot bind: leave nothing open behind the error
            if getattr(self, "gatekeeper", None) is not None:
                self.gatekeeper.close()
            for name in ("shell", "control", "iopub", "_wake_pull", "_wake_push"):
                sock = getattr(self, name, None)
                if sock is not None:
                    sock.close(linger=0)
            if self._own_context:
                self.ctx.term()
            raise

    def _open_sockets(self) -> None:
        self.shell = self.ctx.socket(zmq.ROUTER)
        self.control = self.ctx.socket(zmq.ROUTER)
        self.iopub = self.ctx.socket(zmq.PUB)
        channels = {"shell": self.shell, "control": self.control, "iopub": self.iopub}
        sockets = list(channels.values())
        self.iopub.setsockopt(zmq.SNDHWM, 100_000)  # drop events rather than block a job when nobody reads
        for sock in sockets:
            sock.setsockopt(zmq.LINGER, 500)
        # A peer's frames are capped before they are read: requests on shell and control, and on the event
        # socket only subscriptions (a PUB socket reads and buffers whatever a subscriber sends).
        limit_incoming(self.shell, MAX_REQUEST_FRAME, RECEIVE_HWM)
        limit_incoming(self.control, MAX_REQUEST_FRAME, RECEIVE_HWM)
        limit_incoming(self.iopub, MAX_SUBSCRIPTION_FRAME)
        use_ipv6(sockets, self.conn.ip)
        # Nobody's messages are read before the handshake admits them. Beyond loopback every channel is
        # encrypted (the event stream too: it names runs and paths) and the Curve server key admits. On
        # loopback a fresh password does: the caps above bound what a peer can queue, but not how many
        # peers a local process opens, and the HMAC is checked only after a whole message has been held.
        password = "" if self.conn.needs_curve else secrets.token_hex(32)
        self.gatekeeper = Gatekeeper(self.ctx, log, password)
        for name, sock in channels.items():
            self.gatekeeper.guard(name, sock)
        if self.conn.needs_curve:
            self.conn.curve_public_key = serve_curve(sockets)
        else:
            serve_plain(sockets)
            self.conn.curve_public_key = ""
        self.conn.plain_password = password
        base = self.conn.address
        for name, sock in channels.items():
            port = getattr(self.conn, f"{name}_port")
            if port:
                sock.bind(f"{base}:{port}")
            else:
                port = sock.bind_to_random_port(base)
            setattr(self.conn, f"{name}_port", port)
        self.conn.pid = os.getpid()
        self._wake_pull = self.ctx.socket(zmq.PULL)
        self._wake_pull.bind(self._wake_addr)
        self._wake_push = self.ctx.socket(zmq.PUSH)
        self._wake_push.connect(self._wake_addr)
        self.gatekeeper.start()

    # -- sending (any thread) --------------------------------------------------------------------
    def _queue_send(self, channel: str, msg: Message, identities: list[bytes] | None = None) -> None:
        self._outgoing.put((channel, msg, identities or []))
        with self._wake_lock:
            if self._closed:  # a job that outlived the shutdown grace: nobody is left to send its message
                log.debug("worker closed; %s %s not sent", channel, msg.msg_type)
                return
            self._wake_push.send(b"", zmq.NOBLOCK)

    def publish(self, msg_type: str, content: dict, parent: Message | None = None, buffers=None) -> None:
        self._queue_send(
            "iopub", new_message(msg_type, content, session=self.session, parent=parent, buffers=buffers)
        )

    def _reply(
        self, request: Message, identities: list[bytes], content: dict, channel: str = "shell"
    ) -> None:
        reply_type = request.msg_type.replace("_request", "_reply")
        self._queue_send(
            channel, new_message(reply_type, content, session=self.session, parent=request), identities
        )

    def _drain_outgoing(self) -> None:
        while True:
            try:
                channel, msg, identities = self._outgoing.get_nowait()
            except queue.Empty:
                return
            sock = self.iopub if channel == "iopub" else self.shell
            try:
                sock.send_multipart(encode(msg, self.signer, identities), copy=False)
            except ProtocolError as exc:  # a task put something unencodable in content: say so, don't die
                log.error("dropped %s: %s", msg.msg_type, exc)
                if msg.msg_type.endswith("_reply"):
                    fallback = {"status": "failed", "error": {"type": "ProtocolError", "message": str(exc)}}
                    sock.send_multipart(
                        encode(
                            new_message(
                                msg.msg_type, fallback, session=self.session, parent=msg.parent_header
                            ),
                            self.signer,
                            identities,
                        )
                    )

    # -- main loop -------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self._on_interrupt_signal)
            signal.signal(signal.SIGTERM, self._on_term_signal)
        self._control_thread = threading.Thread(target=self._control_loop, name="control", daemon=True)
        self._control_thread.start()
        threading.Thread(target=self._job_loop, name="jobs", daemon=True).start()
        poller = zmq.Poller()
        poller.register(self.shell, zmq.POLLIN)
        poller.register(self._wake_pull, zmq.POLLIN)
        self.publish("status", {"state": "starting", "pid": os.getpid()})
        while not self._shutdown.is_set():
            events = dict(poller.poll(200))
            self.rejections["shell"].flush()
            if self._wake_pull in events:
                while self._wake_pull.poll(0):
                    self._wake_pull.recv()
            if self.shell in events:
                frames = self.shell.recv_multipart(copy=True)
                try:
                    self._handle_frames(frames)
                except Exception:  # nothing a peer sends may stop the loop
                    log.exception("shell message failed")
            self._drain_outgoing()
        self._finish()

    def _accept(self, channel: str, frames: list[bytes]) -> tuple[list[bytes], Message] | None:
        """The verified, fresh message in `frames`, or None after counting (and maybe logging) why not.

        zmq has already refused any frame over the cap (see _bind); here the signature, then freshness.
        """
        try:
            identities, msg = decode(frames, self.signer)
            self.replay_guard.check(msg)  # only after the signature: an unsigned id must not fill the memory
        except ProtocolError as exc:
            self.rejections[channel].reject(str(exc))  # never answer: a replay's sender is not our client
            return None
        return identities, msg

    def _handle_frames(self, frames: list[bytes]) -> None:
        accepted = self._accept("shell", frames)
        if accepted is None:
            return
        identities, msg = accepted
        handler = getattr(self, f"_handle_{msg.msg_type}", None)
        if handler is None:
            self._reply(
                msg,
                identities,
                {
                    "status": "error",
                    "error": {"type": "ProtocolError", "message": f"unknown request type {msg.msg_type!r}"},
                },
            )
            return
        problem = content_problem(msg)
        if problem:
            # A job's reply keeps a job's shape, so the client's job table ends it failed with this message.
            error = {"type": "ProtocolError", "message": problem}
            if msg.msg_type == "job_request":
                self._reply(msg, identities, {"status": "failed", "run_dir": None, "error": error})
            else:
                self._reply(msg, identities, {"status": "error", "error": error})
            return
        try:
            handler(msg, identities)
        except Exception as exc:  # a handler bug must not take the worker down
            log.exception("handler for %s failed", msg.msg_type)
            self._reply(
                msg,
                identities,
                {"status": "error", "error": {"type": type(exc).__name__, "message": str(exc)}},
            )

    # -- shell handlers --------------------------------------------------------------------------
    def _handle_kernel_info_request(self, msg: Message, identities: list[bytes]) -> None:
        self._reply(
            msg,
            identities,
            {
                "status": "ok",
                "pid": os.getpid(),
                "version": __version__,
                "python": sys.version.split()[0],
                "tasks": [
                    {"name": t.name, "kind": t.kind, "description": t.description} for t in self._list_tasks()
                ],
            },
        )

    def _handle_job_request(self, msg: Message, identities: list[bytes]) -> None:
        name = msg.content.get("task", "")
        try:
            task = self._get_task(name)
            build_spec(task, msg.content.get("spec") or {})  # reject a bad spec now, not after the queue
        except WorkbenchError as exc:
            self._reply(msg, identities, {"status": "failed", "run_dir": None, "error": exc.to_dict()})
            return
        job = Job(msg, identities, name)
        with self._jobs_lock:
            self._jobs[msg.msg_id] = job
        if task.kind == "query":
            self._queries.submit(self._run_job, job)
        else:
            self.publish("status", {"state": "queued", "task": name}, parent=msg)
            self._job_queue.put(job)

    def _get_task(self, name: str) -> TaskInfo:
        if self._task_overrides is None:
            return get_task(name)
        name = name if name in self._task_overrides else canonical_name(name)
        if name not in self._task_overrides:
            raise UsageError(
                f"no task named {name!r} in this worker; known tasks: "
                f"{', '.join(sorted(self._task_overrides))}"
            )
        return self._task_overrides[name]

    def _list_tasks(self) -> list[TaskInfo]:
        return list_tasks() if self._task_overrides is None else list(self._task_overrides.values())

    # -- jobs ------------------------------------------------------------------------------------
    def _job_loop(self) -> None:
        while not self._shutdown.is_set():
            try:
                job = self._job_queue.get(timeout=0.2)
            except queue.Empty:
                continue
            self._run_job(job)

    def _run_job(self, job: Job) -> None:
        request = job.request
        with self._jobs_lock:
            if job.state == "cancelled":
                return  # cancelled while queued: already answered and out of the job table
            job.state = "running"  # under the lock, so a cancel sees either queued or running, never both
        if job.stop.is_set():
            result = {
                "status": "cancelled",
                "run_dir": None,
                "error": {"type": "JobCancelled", "message": "cancelled before it started"},
            }
        else:

            def emit(msg_type: str, content: dict, buffers: list) -> None:
                self.publish(msg_type, content, parent=request, buffers=buffers)

            result = run_task(
                self._get_task(job.task_name),
                request.content.get("spec") or {},
                emit=emit,
                stop_event=job.stop,
                workspace=request.content.get("workspace"),
                job_id=request.msg_id,
                resume=request.content.get("resume"),
            )
        with self._jobs_lock:
            self._jobs.pop(request.msg_id, None)
        buffers: list[bytes] = []
        result = pack_arrays(result, buffers)
        reply = new_message("job_reply", result, session=self.session, parent=request, buffers=buffers)
        self._queue_send("shell", reply, job.identities)
        release_freed_memory()  # what the job kept for its next step goes back; an idle worker stays small

    def running_jobs(self) -> list[dict]:
        with self._jobs_lock:
            return [{"job_id": jid, "task": j.task_name, "state": j.state} for jid, j in self._jobs.items()]

    def cancel(self, job_id: str | None = None) -> bool:
        """Stop running jobs at their next step; jobs still queued leave the queue now, answered cancelled."""
        with self._jobs_lock:
            jobs = (
                list(self._jobs.values())
                if job_id is None
                else [self._jobs[job_id]]
                if job_id in self._jobs
                else []
            )
            queued = [job for job in jobs if job.state == "queued"]
            for job in queued:
                job.state = "cancelled"  # the job loop skips it when it comes up
                self._jobs.pop(job.request.msg_id, None)
        for job in jobs:
            job.stop.set()
        for job in queued:
            reply = new_message(
                "job_reply",
                {
                    "status": "cancelled",
                    "run_dir": None,
                    "error": {
                        "type": "JobCancelled",
                        "message": "cancelled before it started (it was still queued)",
                    },
                },
                session=self.session,
                parent=job.request,
            )
            self._queue_send("shell", reply, job.identities)
        return bool(jobs)

    # -- control ---------------------------------------------------------------------------------
    def _control_loop(self) -> None:
        while not self._shutdown.is_set():
            self.rejections["control"].flush()
            if not self.control.poll(100):
                continue
            frames = self.control.recv_multipart()
            try:
                self._handle_control(frames)
            except Exception:  # the control path must outlive any one bad message
                log.exception("control message failed")

    def _handle_control(self, frames: list[bytes]) -> None:
        accepted = self._accept("control", frames)
        if accepted is None:
            return
        identities, msg = accepted
        try:
            content = self._control_content(msg)
        except Exception as exc:  # a bug here must still answer, in one line: the traceback goes to the log
            log.exception("control handler for %s failed", msg.msg_type)
            content = {"status": "error", "error": {"type": type(exc).__name__, "message": str(exc)}}
        reply = new_message(
            msg.msg_type.replace("_request", "_reply"), content, session=self.session, parent=msg
        )
        self.control.send_multipart(encode(reply, self.signer, identities))
        if msg.msg_type == "shutdown_request":
            self._shutdown.set()

    def _control_content(self, msg: Message) -> dict:
        problem = content_problem(msg)
        if problem:
            return {"status": "error", "error": {"type": "ProtocolError", "message": problem}}
        content: dict = {"status": "ok"}
        if msg.msg_type == "ping_request":
            content.update(
                pid=os.getpid(),
                time=time.time(),
                jobs=self.running_jobs(),
                rejected={channel: r.count for channel, r in self.rejections.items()},
                refused_connections=self.gatekeeper.refused(),
            )
            # Published too: seeing it proves the client's event subscription is live.
            self.publish("status", {"state": "busy" if content["jobs"] else "idle"}, parent=msg)
        elif msg.msg_type == "cancel_request":
            content["found"] = self.cancel(msg.content.get("job_id"))
        elif msg.msg_type == "shutdown_request":
            self.cancel()
        else:
            content = {
                "status": "error",
                "error": {"type": "ProtocolError", "message": f"unknown control request {msg.msg_type!r}"},
            }
        return content

    def _on_interrupt_signal(self, signum, frame) -> None:
        # SIGINT interrupts the running jobs (they stop at their next step) but keeps the worker.
        self.cancel()

    def _on_term_signal(self, signum, frame) -> None:
        self.cancel()
        self._shutdown.set()

    def request_shutdown(self) -> None:
        self.cancel()
        self._shutdown.set()

    def _finish(self) -> None:
        # Give running jobs a moment to reach a step boundary and send their replies.
        deadline = time.monotonic() + 2.0
        while self.running_jobs() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.publish("status", {"state": "exiting"})
        self._drain_outgoing()
        self._queries.shutdown(wait=False, cancel_futures=True)
        for rejections in self.rejections.values():
            rejections.close()
        # The control thread owns the control socket: it must be out of its poll/recv before the socket
        # closes, or zmq is used from two threads at once (undefined: an exception, or a crash).
        control = getattr(self, "_control_thread", None)
        if control is not None and control is not threading.current_thread():
            control.join(timeout=2.0)
        self.gatekeeper.close()  # its monitors watch the sockets below: stop them first
        with self._wake_lock:
            self._closed = True
            for sock in (self.shell, self.control, self.iopub, self._wake_pull, self._wake_push):
                sock.close(linger=500)
        if self._own_context:
            self.ctx.term()  # every socket of it is closed above; a lingering event gets its 500 ms, no more
