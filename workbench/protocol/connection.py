"""Connection files: where a worker listens and the session's HMAC key, readable by the owner only.

The launcher writes the key with ports 0; the worker binds free ports and rewrites the file, so no
port is ever picked by one process and bound by another (no race).
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

CHANNELS = ("shell", "control", "iopub")


@dataclass
class ConnectionInfo:
    key: str
    ip: str = "127.0.0.1"
    transport: str = "tcp"
    shell_port: int = 0
    control_port: int = 0
    iopub_port: int = 0
    pid: int = 0

    @classmethod
    def new(cls, ip: str = "127.0.0.1") -> ConnectionInfo:
        return cls(key=secrets.token_hex(32), ip=ip)

    @property
    def bound(self) -> bool:
        return all(getattr(self, f"{c}_port") > 0 for c in CHANNELS)

    def url(self, channel: str) -> str:
        return f"{self.transport}://{self.ip}:{getattr(self, f'{channel}_port')}"

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
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            return cls(**{k: data[k] for k in asdict(cls(key="")) if k in data})
        except FileNotFoundError:
            raise ValueError(f"{path}: no such connection file") from None
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: not a worker connection file ({exc})") from None
