"""ReplayGuard: refuse a correctly signed message seen before, or dated too far from now to tell.

A signature proves who signed, not that it is fresh: a captured job_request sent again would run again
(Jupyter documents this gap and leaves it open). The worker checks here after the HMAC, before acting.
"""

from __future__ import annotations

import heapq
import threading
import time
from datetime import datetime

from workbench.protocol.envelope import Message
from workbench.protocol.wire import ProtocolError

WINDOW = 300.0  # seconds a header date may be from this machine's clock, either way
MAX_REMEMBERED = 100_000  # about 20 MB of ids; a GUI sends a few messages a second


class ReplayGuard:
    """Remembers msg_ids for as long as their date keeps them acceptable, in bounded memory.

    A message dated d is accepted only while |now - d| <= window, so its id must be remembered until
    d + window; after that the date check alone refuses a replay. If more than `capacity` ids are live
    at once, the oldest-dated is forgotten and its date becomes a floor: nothing dated at or before it
    is accepted any more. Memory stays bounded and no forgotten id can come back.
    """

    def __init__(self, window: float = WINDOW, capacity: int = MAX_REMEMBERED, clock=time.time):
        self.window = window
        self.capacity = capacity
        self._clock = clock
        self._seen: set[str] = set()
        self._by_date: list[tuple[float, str]] = []  # heap: the oldest-dated id first
        self._floor = float("-inf")
        self._lock = threading.Lock()  # the shell loop and the control thread share one guard

    def __len__(self) -> int:
        return len(self._seen)

    def check(self, msg: Message) -> None:
        """Accept (and remember) a fresh message, or raise ProtocolError saying why it is refused."""
        date = _timestamp(msg.header.get("date"))
        msg_id = msg.msg_id
        with self._lock:
            now = self._clock()
            self._forget_expired(now)
            skew = date - now
            if abs(skew) > self.window:
                raise ProtocolError(
                    f"message {msg_id} is dated {msg.header['date']}, {abs(skew):.0f} s "
                    f"{'ahead of' if skew > 0 else 'behind'} this machine's clock, outside the "
                    f"±{self.window:.0f} s window: a replay, or clocks that need synchronising (NTP)"
                )
            if date <= self._floor:
                raise ProtocolError(
                    f"message {msg_id} is dated before the oldest id still remembered "
                    f"(over {self.capacity} messages in the window): refused as a possible replay"
                )
            if msg_id in self._seen:
                raise ProtocolError(f"replayed message: msg_id {msg_id} was already received")
            self._seen.add(msg_id)
            heapq.heappush(self._by_date, (date, msg_id))
            while len(self._seen) > self.capacity:
                oldest, forgotten = heapq.heappop(self._by_date)
                self._seen.discard(forgotten)
                self._floor = max(self._floor, oldest)

    def _forget_expired(self, now: float) -> None:
        while self._by_date and self._by_date[0][0] < now - self.window:
            _, msg_id = heapq.heappop(self._by_date)
            self._seen.discard(msg_id)


def _timestamp(date) -> float:
    """Seconds since the epoch of a header date (ISO 8601 with a time zone, as new_header writes it)."""
    if not isinstance(date, str):
        raise ProtocolError(f"header date {date!r} is not an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(date)
    except ValueError:
        raise ProtocolError(f"header date {date!r} is not an ISO 8601 date") from None
    if parsed.tzinfo is None:  # a naive date means a different instant on every machine
        raise ProtocolError(f"header date {date!r} has no time zone")
    return parsed.timestamp()
