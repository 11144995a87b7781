"""Encoding messages to signed multipart frames and back, rejecting anything malformed or unsigned.

Frame layout (as Jupyter's): [routing ids..., DELIM, signature, header, parent, metadata, content,
buffers...]. The HMAC-SHA256 signature covers the four JSON frames and every buffer. Frame size caps live here
too.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from workbench.protocol.envelope import Message

DELIM = b"<IDS|MSG>"
MAX_JSON_FRAME = 16 * 1024 * 1024  # a JSON part larger than this is an attack or a bug, never real content

# Frame size caps, enforced by zmq itself (MAXMSGSIZE, see sockets.py): a frame whose length prefix is
# over the cap is never read; zmq drops the connection of the peer that sent it. The HMAC is checked only
# after a whole message has arrived, so without a cap an unauthenticated peer could make us hold any
# amount of memory (three 1 GB frames grew a worker from 66 MB to 3.9 GB before it saw a signature).
#
# What reaches the worker is requests: JSON specs and small control messages, no buffers. Their cap is
# the JSON frame limit the decoder applies anyway, so nothing legitimate is lost by refusing more.
MAX_REQUEST_FRAME = MAX_JSON_FRAME
# What reaches the client is replies and events with raw array buffers. The largest today: a page of
# thumbnails (200 at up to 192 px, RGBA: 29 MiB), one full-size sample and its augmented twin (a 4K RGB
# image would be 24 MiB, one buffer each), metrics batches (kilobytes). 256 MiB is ~9x the biggest of
# those and still bounds what a hostile peer makes the client hold per frame; the worker refuses to
# send a larger frame (encode raises), so an oversized result fails with a message instead of a silent
# disconnect.
MAX_FRAME = 256 * 1024 * 1024
# A subscriber sends the event socket only its subscription (one byte here: we subscribe to everything);
# a PUB socket buffers whatever arrives, so it gets a cap as well.
MAX_SUBSCRIPTION_FRAME = 4096
# Complete messages zmq queues per peer before it pauses reading that peer's TCP stream (it drops
# nothing: the sender waits). The worker takes requests off its sockets at once, so a legitimate client
# rarely has more than a few queued; a low mark keeps a flood of frames under the cap from queueing 1000
# of them (zmq's default) per connection. It bounds one peer, not how many a local process opens: that is
# the door's job (gatekeeper.py), which reads nothing from a peer without the connection password. Nor does
# it bound a message of endlessly many frames: see docs/protocol.md.
RECEIVE_HWM = 16
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


def encode(
    msg: Message, signer: Signer, identities: list[bytes] | None = None, *, max_frame: int = MAX_FRAME
) -> list[bytes]:
    """Signed frames of `msg`; refuses a frame the receiver's cap would drop (`max_frame` for buffers)."""
    msg_type = msg.header.get("msg_type")
    try:
        json_parts = [
            _dumps(msg.header),
            _dumps(msg.parent_header),
            _dumps(msg.metadata),
            _dumps(msg.content),
        ]
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"cannot encode {msg_type!r}: {exc}") from exc
    buffers = [bytes(memoryview(b).cast("B")) if not isinstance(b, bytes) else b for b in msg.buffers]
    # Refused here, where the sender can still say why: past the receiver's cap zmq would only disconnect.
    for what, parts, limit in (
        ("JSON part", json_parts, min(MAX_JSON_FRAME, max_frame)),
        ("buffer", buffers, max_frame),
    ):
        for part in parts:
            if len(part) > limit:
                raise ProtocolError(
                    f"cannot send {msg_type!r}: a {what} of {len(part):,} bytes is over the "
                    f"{limit:,} byte frame limit"
                )
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
        _loads(part, name)
        for part, name in zip(json_parts, ("header", "parent header", "metadata", "content"))
    )
    missing = [k for k in _HEADER_KEYS if not isinstance(header.get(k), str)]
    if missing:
        raise ProtocolError(f"header lacks string field(s): {', '.join(missing)}")
    return identities, Message(header, parent, content, metadata, buffers)
