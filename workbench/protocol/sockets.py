"""How the protocol's zmq sockets are set up on both sides: frame size caps, who may connect (a password on
loopback, CurveZMQ off it) and IPv6. The worker binds with these, the client connects with them; the rules
live in wire.py (sizes), connection.py (which addresses count as loopback) and gatekeeper.py (the worker's
door).
"""

from __future__ import annotations

import zmq

from workbench.protocol.connection import is_ipv6_literal

# zmq checks MAXMSGSIZE against a frame as it travels; under Curve that is the frame inside an encrypted
# MESSAGE command, 33 bytes longer (name, nonce, MAC, flags). Without room for it, a frame of exactly the
# cap would pass encode() and be dropped on arrival.
_FRAMING_ROOM = 64


class InsecureAddressError(ValueError):
    """A worker was asked to listen beyond loopback without the encryption that would make it safe."""


def limit_incoming(sock: zmq.Socket, max_frame: int, hwm: int | None = None) -> None:
    """Cap the frame size a socket reads (and, with `hwm`, the messages it queues per peer); before
    bind/connect.

    A frame over `max_frame` is never read: zmq drops the connection of the peer that announced it.
    """
    sock.setsockopt(zmq.MAXMSGSIZE, max_frame + _FRAMING_ROOM)
    if hwm is not None:
        sock.setsockopt(zmq.RCVHWM, hwm)


# The user name zmq's PLAIN mechanism carries; the gatekeeper checks only the password.
PLAIN_USERNAME = b"workbench"
# A handshake that has not finished by then is dropped. A real one takes milliseconds on loopback and a few
# round trips across a network; a peer that stalls in it holds at most one partial frame (under the cap)
# until then.
HANDSHAKE_TIMEOUT_MS = 10_000


def use_ipv6(sockets: list[zmq.Socket], ip: str) -> None:
    """Let the sockets speak IPv6 when the address is an IPv6 literal (zmq refuses `[::1]` otherwise)."""
    if is_ipv6_literal(ip):
        for sock in sockets:
            sock.setsockopt(zmq.IPV6, 1)


def serve_plain(sockets: list[zmq.Socket]) -> None:
    """Make the sockets ask every peer for the connection password before reading a byte of its messages.

    zmq's PLAIN mechanism: the password travels unencrypted, which on loopback only root could read (and root
    can read the connection file anyway). A ZAP handler must answer for the context (gatekeeper.Gatekeeper);
    without one, zmq refuses every peer.
    """
    for sock in sockets:
        sock.plain_server = True
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_TIMEOUT_MS)


def connect_plain(sockets: list[zmq.Socket], password: str) -> None:
    """Present the connection password from the connection file when connecting (a loopback worker asks for
    it)."""
    for sock in sockets:
        sock.plain_username = PLAIN_USERNAME
        sock.plain_password = password.encode("ascii")


def curve_available() -> bool:
    return bool(zmq.has("curve"))


def require_curve(ip: str) -> None:
    """Refuse, with the way out, to serve a non-loopback address when this pyzmq cannot encrypt."""
    if curve_available():
        return
    raise InsecureAddressError(
        f"refusing to listen on {ip}: it is not a loopback address, and this pyzmq was built without "
        f"CurveZMQ (libsodium), so the channels could not be encrypted and anyone on the network could read "
        f"the worker's events. Keep the worker on 127.0.0.1 and reach it through an SSH tunnel instead: "
        f"for each of the shell, control and iopub ports in the connection file, run "
        f"`ssh -N -L PORT:127.0.0.1:PORT user@this-host` on the GUI's machine, then connect with the same "
        f"connection file. Or install a pyzmq wheel from PyPI (they bundle libsodium)."
    )


def serve_curve(sockets: list[zmq.Socket]) -> str:
    """Make the sockets CurveZMQ servers with a fresh keypair; returns the public key (Z85 text) for clients.

    No authenticator (ZAP) thread: a CURVE server with no ZAP handler accepts any client that completes
    the handshake, and completing it needs the server's public key, which lives only in the 0600 connection
    file next to the HMAC key and never crosses the wire in clear. So holding the file is what admits a
    peer, as on loopback; Curve adds confidentiality and keeps everyone else out before a byte of a message
    is read. HMAC signing stays on top and is still what authorises every request. The secret key lives in
    this process only and dies with it: a restarted worker gets a new keypair and rewrites the file.
    """
    public, secret = zmq.curve_keypair()
    for sock in sockets:
        sock.curve_secretkey = secret
        sock.curve_publickey = public
        sock.curve_server = True
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_TIMEOUT_MS)
    return public.decode("ascii")


def connect_curve(sockets: list[zmq.Socket], server_public_key: str) -> None:
    """Make the sockets CurveZMQ clients of the server with that public key, under a throwaway keypair of
    ours."""
    public, secret = zmq.curve_keypair()
    for sock in sockets:
        sock.curve_serverkey = server_public_key.encode("ascii")
        sock.curve_publickey = public
        sock.curve_secretkey = secret
