"""RejectionLog: counts refused frames and logs them at a bounded rate, so junk cannot flood stderr.

Each rejection is cheap for a peer to cause (200,000 junk frames once wrote 19 MB of warnings); the
first few in a window are logged in full, the rest become one summary line per window with a count.
"""

from __future__ import annotations

import logging
import threading
import time

BURST = 5  # rejections logged in full per window: enough to see what is arriving
INTERVAL = 5.0  # seconds per window; at most BURST + 1 lines each


class RejectionLog:
    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        plural: str | None = None,
        *,
        burst: int = BURST,
        interval: float = INTERVAL,
        clock=time.monotonic,
    ):
        self.logger = logger
        self.what = what  # e.g. "shell message": lines read "rejected a shell message: ..."
        self.plural = plural or f"{what}s"
        self.burst = burst
        self.interval = interval
        self.count = 0  # every rejection ever, logged or not
        self._clock = clock
        self._window_start = clock()
        self._logged = 0
        self._suppressed = 0
        self._last_reason = ""
        self._lock = threading.Lock()

    def reject(self, reason: str) -> None:
        """Count one refused frame; log it if this window still has room, else fold it into the summary."""
        with self._lock:
            self.count += 1
            now = self._clock()
            if now - self._window_start >= self.interval:
                self._summarise(now)
            if self._logged < self.burst:
                self._logged += 1
                more = (
                    f" (further rejections are counted and summarised every {self.interval:g} s)"
                    if self._logged == self.burst
                    else ""
                )
                self.logger.warning("rejected a %s: %s%s", self.what, reason, more)
            else:
                self._suppressed += 1
                self._last_reason = reason

    def flush(self) -> None:
        """Write the summary of a finished window; the owner's loop calls this every so often, cheaply."""
        if not self._suppressed:  # read without the lock: a stale zero only delays the line by one call
            return
        with self._lock:
            now = self._clock()
            if now - self._window_start >= self.interval:
                self._summarise(now)

    def close(self) -> None:
        """Write whatever summary is pending, however young its window (on shutdown)."""
        with self._lock:
            self._summarise(self._clock())

    def _summarise(self, now: float) -> None:
        if self._suppressed:
            self.logger.warning(
                "rejected %d more %s in the last %.0f s (the last: %s)",
                self._suppressed,
                self.plural,
                now - self._window_start,
                self._last_reason,
            )
        self._window_start = now
        self._logged = 0
        self._suppressed = 0
