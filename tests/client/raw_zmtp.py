"""A hostile peer that speaks just enough ZMTP 3.0 (NULL or PLAIN) over a plain TCP socket to send frames.

libzmq would build a whole frame in memory before sending it; here a frame's length prefix can announce
a gigabyte while the bytes are streamed lazily, which is what an attacker does.
"""

from __future__ import annotations

import socket
import struct

CHUNK = 1 << 20
_ZEROS = bytes(CHUNK)


def _greeting(mechanism: bytes = b"NULL") -> bytes:
    # signature, version 3.0, mechanism, as-server 0, filler
    return (
        b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + mechanism.ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
    )


def _command(name: bytes, body: bytes) -> bytes:
    data = bytes([len(name)]) + name + body
    return (
        b"\x04" + bytes([len(data)]) if len(data) < 256 else b"\x06" + struct.pack(">Q", len(data))
    ) + data


def _ready(socket_type: bytes, name: bytes = b"READY") -> bytes:
    return _command(name, b"\x0bSocket-Type" + struct.pack(">I", len(socket_type)) + socket_type)


def _read_command(sock: socket.socket) -> bytes:
    """The next command's name (its body is read and dropped)."""
    flags = _recv_exactly(sock, 1)[0]
    size = struct.unpack(">Q", _recv_exactly(sock, 8))[0] if flags & 0x02 else _recv_exactly(sock, 1)[0]
    data = _recv_exactly(sock, size)
    return data[1 : 1 + data[0]]


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection during the handshake")
        data += chunk
    return data


def _handshake(sock: socket.socket, socket_type: bytes, password: str = "") -> socket.socket:
    sock.settimeout(10)
    if not password:
        sock.sendall(_greeting())
        _recv_exactly(sock, 64)
        sock.sendall(_ready(socket_type))
        _read_command(sock)  # the peer's READY
        return sock
    # PLAIN (ZMTP RFC 24): HELLO with the credentials, WELCOME, INITIATE with our metadata, READY.
    sock.sendall(_greeting(b"PLAIN"))
    _recv_exactly(sock, 64)
    user, secret = b"workbench", password.encode("ascii")
    sock.sendall(_command(b"HELLO", bytes([len(user)]) + user + bytes([len(secret)]) + secret))
    for expected, reply in ((b"WELCOME", _ready(socket_type, b"INITIATE")), (b"READY", None)):
        name = _read_command(sock)
        if name != expected:
            raise ConnectionError(f"the peer answered {name!r} to our PLAIN handshake, not {expected!r}")
        if reply is not None:
            sock.sendall(reply)
    return sock


def connect(
    port: int, socket_type: bytes = b"DEALER", host: str = "127.0.0.1", password: str = ""
) -> socket.socket:
    """A handshaken connection to a zmq socket listening on host:port, as a peer of `socket_type`.

    With `password`, by the PLAIN mechanism (a loopback worker's connection password); without, by NULL.
    """
    return _handshake(socket.create_connection((host, port), timeout=10), socket_type, password)


def greet(port: int, mechanism: bytes = b"PLAIN", host: str = "127.0.0.1") -> socket.socket:
    """A connection that has only exchanged greetings: the peer now waits for the first handshake command."""
    sock = socket.create_connection((host, port), timeout=10)
    sock.sendall(_greeting(mechanism))
    _recv_exactly(sock, 64)
    return sock


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


def stream_frame(
    sock: socket.socket, announced: int, limit: int, *, command: bool = False, wait_for_close: float = 2.0
) -> tuple[int, bool]:
    """Announce a frame of `announced` bytes and stream zeros until the peer drops us or `limit` bytes are
    sent.

    With `command`, the frame is a command (as a handshake's are). Returns (bytes of payload sent, whether the
    peer closed the connection within `wait_for_close` seconds of the last byte; 0 does not wait).
    """
    sent = 0
    try:
        sock.sendall((b"\x06" if command else b"\x02") + struct.pack(">Q", announced))  # long, no MORE flag
        while sent < min(announced, limit):
            n = min(CHUNK, announced - sent, limit - sent)
            sock.sendall(_ZEROS[:n])
            sent += n
    except (ConnectionResetError, BrokenPipeError):
        return sent, True
    return sent, bool(wait_for_close) and closed_by_peer(sock, timeout=wait_for_close)


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """Whether the peer closes the connection within `timeout` seconds (whatever else it sends is read and
    dropped)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def send_frame(sock: socket.socket, data: bytes, more: bool = False) -> None:
    """One message frame, sent whole (a SUB's subscription is the one-frame message b"\\x01" + prefix)."""
    flags = 0x01 if more else 0x00
    if len(data) < 256:
        sock.sendall(bytes([flags, len(data)]) + data)
    else:
        sock.sendall(bytes([flags | 0x02]) + struct.pack(">Q", len(data)) + data)


def read_message(sock: socket.socket) -> list[bytes]:
    """The frames of the next message the peer sends, exactly as they crossed the wire (commands skipped)."""
    frames = []
    while True:
        flags = _recv_exactly(sock, 1)[0]
        size = struct.unpack(">Q", _recv_exactly(sock, 8))[0] if flags & 0x02 else _recv_exactly(sock, 1)[0]
        data = _recv_exactly(sock, size)
        if flags & 0x04:  # a command (a heartbeat PING, say): not part of any message
            continue
        frames.append(data)
        if not flags & 0x01:
            return frames
