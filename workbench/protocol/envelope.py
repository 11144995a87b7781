"""The message envelope: header, parent header, content, metadata and raw buffers.

Requests are `<verb>_request` and get exactly one `<verb>_reply`; events are nouns (status, progress,
metrics, histogram, artifact, log, error) whose parent header is the request that caused them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone

PROTOCOL_VERSION = "1.0"

# Event types the worker publishes; anything else on the event channel is a protocol error.
EVENT_TYPES = frozenset({"status", "progress", "metrics", "histogram", "array", "artifact", "log", "error"})


@dataclass
class Message:
    header: dict
    parent_header: dict = field(default_factory=dict)
    content: dict = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)
    buffers: list[bytes] = field(default_factory=list)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]

    @property
    def parent_id(self) -> str | None:
        """The msg_id of the request this message answers or reports on (the job id)."""
        return self.parent_header.get("msg_id")


def new_header(msg_type: str, session: str) -> dict:
    return {
        "msg_id": uuid.uuid4().hex,
        "msg_type": msg_type,
        "session": session,
        "date": datetime.now(timezone.utc).isoformat(),
        "version": PROTOCOL_VERSION,
    }


def new_message(
    msg_type: str,
    content: dict | None = None,
    *,
    session: str,
    parent: Message | dict | None = None,
    buffers: list[bytes] | None = None,
    metadata: dict | None = None,
) -> Message:
    parent_header = parent.header if isinstance(parent, Message) else (parent or {})
    return Message(
        header=new_header(msg_type, session),
        parent_header=dict(parent_header),
        content=content or {},
        metadata=metadata or {},
        buffers=list(buffers or []),
    )
