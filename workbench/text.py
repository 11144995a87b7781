"""Text that reaches a user: terminal colour codes taken out (torch's exporter colours its own messages, and a
table cell or a log pane would show them raw). Stdlib only: every process imports it."""

from __future__ import annotations

import re
from typing import Any

# CSI sequences (colours, cursor moves), OSC sequences (titles, links) and any lone escape.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]?")


def strip_ansi(text: str) -> str:
    """`text` without terminal escape sequences."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def strip_ansi_deep(value: Any) -> Any:
    """`value` (a result: dicts, lists and scalars) with every string in it passed through strip_ansi."""
    if isinstance(value, str):
        return strip_ansi(value)
    if isinstance(value, dict):
        return {key: strip_ansi_deep(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(strip_ansi_deep(item) for item in value)
    return value
