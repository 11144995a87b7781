"""A hostile peer that speaks just enough ZMTP 3.0 (NULL mechanism) over a plain TCP socket to send frames.

libzmq would build a whole frame in memory before sending it; here a frame's length prefix can announce
a gigabyte while the bytes are streamed lazily, which is what an attacker does.
"""

from __future__ import annotations

import socket
import struct

CHUNK = 1 << 20
_ZEROS = bytes(CHUNK)


def _greeting() -> bytes:
    # signature, version 3.0, mechanism NULL, as-server 0, filler
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def _ready(socket_type: bytes) -> bytes:
    body = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", len(socket_type)) + socket_type
    return b"\x04" + bytes([len(body)]) + body


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection during the handshake")
        data += chunk
    return data


def _handshake(sock: socket.socket, socket_type: bytes) -> socket.socket:
    sock.settimeout(10)
    sock.sendall(_greeting())
    _recv_exactly(sock, 64)
    sock.sendall(_ready(socket_type))
    flags, size = _recv_exactly(sock, 2)  # the peer's READY: a short command frame
    _recv_exactly(sock, size)
    return sock


def connect(port: int, socket_type: bytes = b"DEALER", host: str = "127.0.0.1") -> socket.socket:
    """A handshaken connection to a zmq socket listening on host:port, as a peer of `socket_type`."""
    return _handshake(socket.create_connection((host, port), timeout=10), socket_type)


def listen(host: str = "127.0.0.1") -> socket.socket:
    server = socket.socket()
    server.bind((host, 0))
    server.listen()
    server.settimeout(10)
    return server


def accept(server: socket.socket, socket_type: bytes) -> socket.socket:
    """The next zmq peer that connects to `server`, handshaken, with us acting as a `socket_type`."""
    conn, _ = server.accept()
    return _handshake(conn, socket_type)


def stream_frame(sock: socket.socket, announced: int, limit: int) -> tuple[int, bool]:
    """Announce a frame of `announced` bytes and stream zeros until the peer drops us or `limit` bytes are sent.

    Returns (bytes of payload sent, whether the peer closed the connection).
    """
    sent = 0
    try:
        sock.sendall(b"\x02" + struct.pack(">Q", announced))  # a long frame, no MORE flag
        while sent < min(announced, limit):
            n = min(CHUNK, announced - sent, limit - sent)
            sock.sendall(_ZEROS[:n])
            sent += n
    except (ConnectionResetError, BrokenPipeError):
        return sent, True
    return sent, closed_by_peer(sock, timeout=2.0)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the peer closes the connection within `timeout` seconds (whatever else it sends is read and dropped)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True
