"""Atomic file writes: a temporary file, fsync, rename, and the folder fsynced, so a crash leaves the old file
or the new one, never half of one. No torch, no Qt.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# --- atomic writes -----------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), hence best effort.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces `path` only if the body finishes; otherwise `path` is untouched."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        # Same directory as the target so os.replace is a rename, never a copy across file systems.
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # 0o666 so the umask applies, as for an ordinary file
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")
