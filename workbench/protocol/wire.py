"""Encoding messages to signed multipart frames and back, rejecting anything malformed or unsigned.

Frame layout (as Jupyter's): [routing ids..., DELIM, signature, header, parent, metadata, content, buffers...].
The HMAC-SHA256 signature covers the four JSON frames and every buffer.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from workbench.protocol.envelope import Message

DELIM = b"<IDS|MSG>"
MAX_JSON_FRAME = 16 * 1024 * 1024  # a JSON part larger than this is an attack or a bug, never real content
_HEADER_KEYS = ("msg_id", "msg_type", "session", "date", "version")


class ProtocolError(ValueError):
    """A frame that is not a valid, correctly signed message; the message says what was wrong."""


class Signer:
    """HMAC-SHA256 over the message parts with the per-session key from the connection file."""

    def __init__(self, key: bytes | str):
        if isinstance(key, str):
            key = key.encode("ascii")
        if not key:
            raise ValueError("an empty HMAC key would leave messages unauthenticated")
        self._key = key

    def sign(self, parts: list[bytes]) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in parts:
            mac.update(part)
        return mac.hexdigest().encode("ascii")

    def verify(self, signature: bytes, parts: list[bytes]) -> bool:
        return hmac.compare_digest(signature, self.sign(parts))


def _dumps(obj: dict) -> bytes:
    # allow_nan=False: NaN is not JSON; tasks send non-finite values as strings or in buffers.
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_json_default).encode("utf-8")


def _json_default(obj):
    # numpy scalars and paths appear in content often enough to convert them here, once.
    if hasattr(obj, "item") and callable(obj.item):
        return obj.item()
    if hasattr(obj, "__fspath__"):
        return str(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def encode(msg: Message, signer: Signer, identities: list[bytes] | None = None) -> list[bytes]:
    try:
        json_parts = [_dumps(msg.header), _dumps(msg.parent_header), _dumps(msg.metadata), _dumps(msg.content)]
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {msg.header.get('msg_type')!r}: {exc}") from exc
    buffers = [bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in msg.buffers]
    signature = signer.sign(json_parts + buffers)
    return [*(identities or []), DELIM, signature, *json_parts, *buffers]


def _loads(frame: bytes, what: str) -> dict:
    if len(frame) > MAX_JSON_FRAME:
        raise ProtocolError(f"{what} frame is {len(frame)} bytes, over the {MAX_JSON_FRAME} byte limit")
    try:
        obj = json.loads(frame)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{what} frame is not valid JSON: {exc}") from None
    except RecursionError:  # signed but absurdly nested: a hostile or broken peer, never real content
        raise ProtocolError(f"{what} frame nests JSON too deeply") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"{what} frame must be a JSON object, got {type(obj).__name__}")
    return obj


def decode(frames: list[bytes], signer: Signer) -> tuple[list[bytes], Message]:
    """Split routing identities off and return them with the verified message."""
    frames = [bytes(f) for f in frames]
    try:
        split = frames.index(DELIM)
    except ValueError:
        raise ProtocolError("no <IDS|MSG> delimiter in the frames") from None
    identities, rest = frames[:split], frames[split + 1 :]
    if len(rest) < 5:
        raise ProtocolError(f"truncated message: {len(rest)} parts after the delimiter, need at least 5")
    signature, json_parts, buffers = rest[0], rest[1:5], rest[5:]
    if not signer.verify(signature, json_parts + buffers):
        raise ProtocolError("bad signature: the message was not signed with this session's key")
    header, parent, metadata, content = (
        _loads(part, name) for part, name in zip(json_parts, ("header", "parent header", "metadata", "content"))
    )
    missing = [k for k in _HEADER_KEYS if not isinstance(header.get(k), str)]
    if missing:
        raise ProtocolError(f"header lacks string field(s): {', '.join(missing)}")
    return identities, Message(header, parent, content, metadata, buffers)
