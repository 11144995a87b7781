"""What a run folder is called and holds, and the statuses a run can have: the names every part of the run
store shares. No torch, no Qt.
"""

from __future__ import annotations

import re
from datetime import datetime

STATUSES = ("created", "running", "done", "failed", "cancelled")
# What a reader may see besides STATUSES: derived from a free owner lock, never stored.
INTERRUPTED = "interrupted"
LIVE_STATUSES = ("created", "running")
SCHEMA_VERSION = 1
DB_NAME = "metrics.db"
LOCK_NAME = ".owner.lock"
_RUN_ID = re.compile(r"^(\d{8}-\d{6})-(.+)-([0-9a-f]{6})$")
_GIVEN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")


def _now() -> str:
    return datetime.now().astimezone().isoformat()
