"""WorkerClient: sends requests to one worker and hands every reply and event to a callback.

One I/O thread owns all sockets (zmq sockets are not thread-safe); callers on any thread queue what
they send. Callbacks run on that I/O thread: a GUI adapter must hop to its own thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

import zmq

from workbench.protocol import (
    ConnectionInfo,
    Message,
    ProtocolError,
    RejectionLog,
    Signer,
    decode,
    encode,
    new_message,
)
from workbench.protocol.sockets import connect_curve, connect_plain, curve_available, limit_incoming, use_ipv6
from workbench.protocol.wire import MAX_FRAME, MAX_REQUEST_FRAME

log = logging.getLogger(__name__)
OnMessage = Callable[[str, Message], None]  # (channel, message)


class WorkerClient:
    def __init__(
        self,
        conn: ConnectionInfo,
        on_message: OnMessage | None = None,
        *,
        heartbeat_interval: float = 1.0,
        context: zmq.Context | None = None,
    ):
        self.conn = conn
        if conn.curve_public_key and not curve_available():
            raise ValueError(
                f"the worker at {conn.ip} speaks CurveZMQ, and this pyzmq was built without it; "
                f"install a pyzmq wheel from PyPI (they bundle libsodium)"
            )
        self.session = uuid.uuid4().hex
        self.signer = Signer(conn.key)
        self.on_message = on_message
        self.heartbeat_interval = heartbeat_interval
        self.ctx = context or zmq.Context.instance()
        self.last_seen = time.monotonic()  # any message from the worker counts as a sign of life
        self._rejections = {
            channel: RejectionLog(
                log, f"{channel} message from the worker", f"{channel} messages from the worker"
            )
            for channel in ("shell", "control", "iopub")
        }
        self._outgoing: queue.Queue = queue.Queue()
        # Encoded, not yet taken by zmq, by channel: the I/O thread never blocks on a send (see _flush).
        self._unsent: dict[str, deque] = {channel: deque() for channel in ("shell", "control")}
        self._waiters: dict[str, Future] = {}
        self._waiters_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake_addr = f"inproc://client-wake-{self.session}"
        self._wake_lock = threading.Lock()
        self._wake_pull = self.ctx.socket(zmq.PULL)
        self._wake_pull.bind(self._wake_addr)
        self._wake_push = self.ctx.socket(zmq.PUSH)
        self._wake_push.connect(self._wake_addr)
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._io_loop, name="worker-client-io", daemon=True)
        self._thread.start()

    # -- sending (any thread) --------------------------------------------------------------------
    def send(
        self,
        msg_type: str,
        content: dict | None = None,
        *,
        channel: str = "shell",
        buffers: list[bytes] | None = None,
    ) -> Message:
        return self.send_message(self.new(msg_type, content, buffers=buffers), channel=channel)

    def new(
        self, msg_type: str, content: dict | None = None, *, buffers: list[bytes] | None = None
    ) -> Message:
        """A message of this session, not yet sent (so a caller can register its id first)."""
        return new_message(msg_type, content or {}, session=self.session, buffers=buffers)

    def send_message(self, msg: Message, *, channel: str = "shell") -> Message:
        self._outgoing.put((channel, msg))
        with self._wake_lock:
            self._wake_push.send(b"", zmq.NOBLOCK)
        return msg

    def request(self, msg_type: str, content: dict | None = None, *, channel: str = "shell") -> Future:
        """Send a request; the Future resolves to its one reply."""
        future: Future = Future()
        msg = new_message(msg_type, content or {}, session=self.session)
        with self._waiters_lock:
            self._waiters[msg.msg_id] = future
        self._outgoing.put((channel, msg))
        with self._wake_lock:
            self._wake_push.send(b"", zmq.NOBLOCK)
        future.msg_id = msg.msg_id  # type: ignore[attr-defined]
        return future

    def call(
        self,
        msg_type: str,
        content: dict | None = None,
        *,
        channel: str = "shell",
        timeout: float | None = 10.0,
    ) -> Message:
        """Blocking request for scripts and tests; the GUI uses send() and waits for the event."""
        return self.request(msg_type, content, channel=channel).result(timeout)

    def job_request(
        self, task: str, spec: dict | None = None, workspace: str | None = None, resume: str | None = None
    ) -> Message:
        """Build (not send) a job request; its msg_id is the job id every event about it carries."""
        content = {"task": task, "spec": spec or {}}
        if workspace:
            content["workspace"] = str(workspace)
        if resume:
            content["resume"] = str(resume)
        return self.new("job_request", content)

    def submit_job(
        self, task: str, spec: dict | None = None, workspace: str | None = None, resume: str | None = None
    ) -> Message:
        return self.send_message(self.job_request(task, spec, workspace, resume))

    def cancel(self, job_id: str) -> Message:
        return self.send("cancel_request", {"job_id": job_id}, channel="control")

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Ping until a ping's own status event arrives: then replies *and* events are flowing."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.send("ping_request", channel="control")
            if self._ready.wait(min(0.2, max(0.0, deadline - time.monotonic()))):
                return True
        return False

    @property
    def rejected_frames(self) -> int:
        """Frames from the worker's address that were refused (unsigned, wrongly signed, malformed)."""
        return sum(r.count for r in self._rejections.values())

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def close(self) -> None:
        self._stop.set()
        with self._wake_lock:
            try:
                self._wake_push.send(b"", zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        self._thread.join(timeout=2)
        with self._waiters_lock:
            for future in self._waiters.values():
                future.cancel()
            self._waiters.clear()
        for sock in (self._wake_push, self._wake_pull):
            sock.close(linger=0)

    # -- the I/O thread --------------------------------------------------------------------------
    def _io_loop(self) -> None:
        sockets = {
            "shell": self.ctx.socket(zmq.DEALER),
            "control": self.ctx.socket(zmq.DEALER),
            "iopub": self.ctx.socket(zmq.SUB),
        }
        sockets["iopub"].setsockopt(zmq.SUBSCRIBE, b"")
        # The connection file says how the worker admits peers: its Curve server key off loopback, its
        # connection password on loopback (an older file, or a test's bare server, has neither).
        if self.conn.curve_public_key:
            connect_curve(list(sockets.values()), self.conn.curve_public_key)
        elif self.conn.plain_password:
            connect_plain(list(sockets.values()), self.conn.plain_password)
        use_ipv6(list(sockets.values()), self.conn.ip)
        for name, sock in sockets.items():
            sock.setsockopt(zmq.LINGER, 0)
            # Replies and events carry array buffers: capped at the largest frame the worker will send.
            limit_incoming(sock, MAX_FRAME)
            sock.connect(self.conn.url(name))
        poller = zmq.Poller()
        for sock in (*sockets.values(), self._wake_pull):
            poller.register(sock, zmq.POLLIN)
        by_socket = {sock: name for name, sock in sockets.items()}
        next_heartbeat = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if self.heartbeat_interval and now >= next_heartbeat:
                    self._outgoing.put(("control", new_message("ping_request", {}, session=self.session)))
                    next_heartbeat = now + self.heartbeat_interval
                for sock, _ in poller.poll(100):
                    if sock is self._wake_pull:
                        while self._wake_pull.poll(0):
                            self._wake_pull.recv()
                    else:
                        self._receive(by_socket[sock], sock.recv_multipart())
                self._flush(sockets)
                for rejections in self._rejections.values():
                    rejections.flush()
        finally:
            for rejections in self._rejections.values():
                rejections.close()
            for sock in sockets.values():
                sock.close(linger=0)

    def _flush(self, sockets: dict) -> None:
        while True:
            try:
                channel, msg = self._outgoing.get_nowait()
            except queue.Empty:
                break
            try:
                frames = encode(msg, self.signer, max_frame=MAX_REQUEST_FRAME)
            except ProtocolError as exc:  # unencodable or too big: fail that request, keep the I/O thread
                log.error("not sent: %s", exc)
                with self._waiters_lock:
                    future = self._waiters.pop(msg.msg_id, None)
                if future is not None and not future.done():
                    future.set_exception(exc)
                continue
            self._unsent[channel].append(frames)
        for channel, waiting in self._unsent.items():
            while waiting:
                try:
                    sockets[channel].send_multipart(waiting[0], flags=zmq.NOBLOCK)
                except zmq.Again:
                    # No connection admitted (the worker is not up yet, or refused our handshake: a stale
                    # file), or its queue is full. A blocking send would freeze this thread, replies, events
                    # and close() included; the loop comes back within 100 ms and tries again, in order.
                    break
                waiting.popleft()

    def _receive(self, channel: str, frames: list[bytes]) -> None:
        try:
            _, msg = decode(frames, self.signer)
        except ProtocolError as exc:
            self._rejections[channel].reject(str(exc))
            return
        self.last_seen = time.monotonic()
        if (
            channel == "iopub"
            and msg.msg_type == "status"
            and msg.parent_header.get("session") == self.session
        ):
            self._ready.set()
        if msg.msg_type.endswith("_reply"):
            with self._waiters_lock:
                future = self._waiters.pop(msg.parent_id or "", None)
            if future is not None and not future.done():
                future.set_result(msg)
        if self.on_message is not None:
            try:
                self.on_message(channel, msg)
            except Exception:  # a listener bug must not stop the I/O thread
                log.exception("message listener failed on %s", msg.msg_type)
