"""Connection files: where a worker listens, the session's HMAC key, and what admits a peer to its sockets
(on loopback the worker's connection password, off loopback its Curve public key).

The launcher writes the key with ports 0; the worker binds free ports and rewrites the file, so no
port is ever picked by one process and bound by another (no race). The file is readable by the owner only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

CHANNELS = ("shell", "control", "iopub")
# HMAC-SHA256 keys shorter than this are guessable or typos; ConnectionInfo.new makes 64 hex characters.
MIN_KEY_CHARS = 32
_CURVE_KEY_CHARS = 40  # a 32-byte Curve25519 key in Z85 text
_LOCAL_TRANSPORTS = ("ipc", "inproc")  # never leave the machine: file permissions guard ipc


def bare_host(ip: str) -> str:
    """The address without surrounding spaces or an IPv6 literal's brackets: ' [::1]' -> '::1'."""
    host = ip.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1].strip()
    return host


def is_ipv6_literal(ip: str) -> bool:
    """Whether the address is written as an IPv6 one (zmq needs its IPV6 option and the address in
    brackets)."""
    return ":" in bare_host(ip)


def clean_address(ip: str) -> str:
    """An address typed by hand, as a worker binds it and writes it to the file; ValueError says what is
    wrong."""
    host = bare_host(ip)
    if not host:
        raise ValueError(
            "the address to listen on is empty; give one such as 127.0.0.1 (the default), ::1 or 0.0.0.0"
        )
    if any(c.isspace() for c in host) or not host.isprintable():
        raise ValueError(f"{ip!r} is not an address: it has spaces or control characters in it")
    if host.count(":") == 1:  # IPv6 literals have at least two; one colon is a host:port
        raise ValueError(
            f"{ip!r} looks like host:port; give the address alone (the worker picks free ports and "
            f"writes them to the connection file)"
        )
    return host


def is_loopback(ip: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost; anything else (0.0.0.0, *, a name, an interface) is not."""
    host = bare_host(ip)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ConnectionInfo:
    key: str
    ip: str = "127.0.0.1"
    transport: str = "tcp"
    shell_port: int = 0
    control_port: int = 0
    iopub_port: int = 0
    pid: int = 0
    # Set by a worker that listens beyond loopback: clients must speak CurveZMQ to this server key. The
    # secret half never enters a connection file; it stays in the worker's memory.
    curve_public_key: str = ""
    # Set by a worker on loopback: the password (zmq's PLAIN mechanism) a peer must present before the worker
    # reads any message from it. Fresh at every start; it lives only in this 0600 file and the worker's
    # memory.
    plain_password: str = ""

    @classmethod
    def new(cls, ip: str = "127.0.0.1") -> ConnectionInfo:
        return cls(key=secrets.token_hex(32), ip=ip)

    @property
    def bound(self) -> bool:
        return all(getattr(self, f"{c}_port") > 0 for c in CHANNELS)

    @property
    def needs_curve(self) -> bool:
        """Whether serving this address must be encrypted: any network address that is not loopback."""
        return self.transport not in _LOCAL_TRANSPORTS and not is_loopback(self.ip)

    @property
    def address(self) -> str:
        """The endpoint without its port, as zmq wants it: `tcp://[::1]` for an IPv6 literal."""
        if self.transport != "tcp":
            return f"{self.transport}://{self.ip}"
        host = bare_host(self.ip)
        return f"tcp://[{host}]" if is_ipv6_literal(host) else f"tcp://{host}"

    def url(self, channel: str) -> str:
        return f"{self.address}:{getattr(self, f'{channel}_port')}"

    def write(self, path: str | Path) -> None:
        """Write atomically with mode 0600: the key must never be readable by other users."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".conn-")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(asdict(self), fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def read(cls, path: str | Path) -> ConnectionInfo:
        """Read and check a connection file; a ValueError names the file, what is wrong and how to fix it."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            info = cls(**{k: data[k] for k in asdict(cls(key="")) if k in data})
        except FileNotFoundError:
            raise ValueError(f"{path}: no such connection file") from None
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: not a worker connection file ({exc})") from None
        problem = info._problem()
        if problem:
            raise ValueError(f"{path}: {problem}")
        return info

    def _problem(self) -> str:
        """What makes this connection unusable or unsafe, in words, or ''."""
        fresh = (
            'put a random key of 64 hex characters in its "key" field, e.g. the output of '
            "python -c 'import secrets; print(secrets.token_hex(32))'"
        )
        if not isinstance(self.key, str):
            return f"the HMAC key must be a string, not {type(self.key).__name__}; {fresh}"
        if not self.key:
            return f"the HMAC key is empty, which would leave every message unauthenticated; {fresh}"
        if len(self.key) < MIN_KEY_CHARS:
            return (
                f"the HMAC key is {len(self.key)} characters long; a session key needs at least "
                f"{MIN_KEY_CHARS} to be hard to guess; {fresh}"
            )
        if not self.key.isascii():
            return f"the HMAC key has non-ASCII characters; {fresh}"
        if not isinstance(self.ip, str) or not isinstance(self.transport, str):
            return '"ip" and "transport" must be strings'
        for channel in CHANNELS:
            port = getattr(self, f"{channel}_port")
            if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
                return f'"{channel}_port" must be a port number (0 to 65535), not {port!r}'
        password = self.plain_password
        if password and (not isinstance(password, str) or not password.isascii() or len(password) > 255):
            return (
                '"plain_password" is not a connection password (ASCII, at most 255 characters); copy the '
                "connection file the worker wrote, unchanged"
            )
        key = self.curve_public_key
        if key and (not isinstance(key, str) or len(key) != _CURVE_KEY_CHARS or not key.isascii()):
            return (
                f'"curve_public_key" is not a Curve public key ({_CURVE_KEY_CHARS} Z85 characters); '
                f"copy the connection file the worker wrote, unchanged"
            )
        return ""
