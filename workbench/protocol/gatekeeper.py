"""Gatekeeper: a worker's door. On loopback it admits only peers that present the connection password (zmq's
PLAIN mechanism, answered here through ZAP, RFC 27); on every address it counts and logs refused handshakes.

zmq reads a peer's messages only after its handshake succeeds, so a peer turned away here cannot make the
worker hold any of them: the frame cap and queue limits apply to peers that hold the connection file alone.
"""

from __future__ import annotations

import hmac
import logging
import threading

import zmq
from zmq.utils.monitor import recv_monitor_message

from workbench.protocol.rejections import RejectionLog
from workbench.protocol.sockets import PLAIN_USERNAME

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq asks; one handler per context
_REFUSALS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "it presented the wrong connection password",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "its handshake broke the protocol",
    # Also what a peer with no password at all often causes: it sees our mechanism and hangs up first.
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "its handshake did not finish (a different mechanism, or it left "
    "or timed out)",
}
_MECHANISM_MISMATCH = getattr(zmq, "PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH", 0x11000003)


class Gatekeeper:
    """Answers ZAP requests and watches the sockets' handshakes, on a thread of its own.

    Build it, `guard` each socket before it binds, then `start`; `close` once the sockets are done with
    (from the thread that owns them). With no password it only counts: Curve admits by its server key.
    """

    def __init__(self, ctx: zmq.Context, logger: logging.Logger, password: str = ""):
        self._password = password.encode("ascii")
        self._log = RejectionLog(logger, "connection")  # "rejected a connection: <why> (shell channel)"
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watched: list[tuple[zmq.Socket, zmq.Socket, str]] = []  # (socket, its monitor, channel)
        self._zap = None
        if password:
            self._zap = ctx.socket(zmq.REP)
            self._zap.setsockopt(zmq.LINGER, 0)
            self._zap.bind(ZAP_ENDPOINT)

    def guard(self, channel: str, sock: zmq.Socket) -> None:
        """Count the handshakes `sock` refuses (and, with a password, demand it); call before bind."""
        monitor = sock.get_monitor_socket(
            zmq.EVENT_HANDSHAKE_FAILED_AUTH
            | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
        )
        monitor.setsockopt(zmq.LINGER, 0)
        self._watched.append((sock, monitor, channel))
        self._counts[channel] = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gatekeeper", daemon=True)
        self._thread.start()

    def refused(self) -> dict[str, int]:
        """Handshakes refused so far, by channel."""
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._log.close()
        for sock, monitor, _ in self._watched:
            if not sock.closed:
                sock.disable_monitor()
            monitor.close(linger=0)
        if self._zap is not None:
            self._zap.close(linger=0)

    # -- the gatekeeper's thread ------------------------------------------------------------------
    def _run(self) -> None:
        poller = zmq.Poller()
        if self._zap is not None:
            poller.register(self._zap, zmq.POLLIN)
        channels = {}
        for _, monitor, channel in self._watched:
            poller.register(monitor, zmq.POLLIN)
            channels[monitor] = channel
        while not self._stop.is_set():
            for sock, _ in poller.poll(100):
                if sock is self._zap:
                    self._zap.send_multipart(self._answer(self._zap.recv_multipart()))
                else:
                    self._count(channels[sock], recv_monitor_message(sock))
            self._log.flush()

    def _answer(self, request: list[bytes]) -> list[bytes]:
        """The ZAP reply to one handshake: 200 for the connection password, 400 for anything else."""
        # [version, request id, domain, address, routing id, mechanism, credentials...]
        request_id = request[1] if len(request) > 1 else b""
        if (
            len(request) == 8
            and request[0] == b"1.0"
            and request[5] == b"PLAIN"
            and hmac.compare_digest(request[7], self._password)
        ):
            return [b"1.0", request_id, b"200", b"OK", PLAIN_USERNAME, b""]
        return [b"1.0", request_id, b"400", b"wrong connection password", b"", b""]

    def _count(self, channel: str, event: dict) -> None:
        with self._lock:
            self._counts[channel] += 1
        why = _REFUSALS.get(event["event"], "its handshake failed")
        if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and event["value"] == _MECHANISM_MISMATCH:
            why = (
                "it did not present a connection password"
                if self._zap is not None
                else "it did not speak CurveZMQ"
            )
        self._log.reject(f"{why} ({channel} channel)")
