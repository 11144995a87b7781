"""Keyword arguments typed for the user's own class or function (a file: or lightning: dataset): read from a
JSON object, a TOML inline table or key=value pairs, and written back in the form that reads back the same."""

from __future__ import annotations

import json
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

ARGS_EXAMPLES = 'a JSON object such as {"size": 500} or key=value pairs such as size=500, name="shapes"'
_BARE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


def _toml_value(text: str):
    return tomllib.loads(f"v = {text}")["v"]


def _split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets, braces and quotes: `sizes=[1, 2], name="a,b"` is two pairs."""
    parts, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def parse_args(text: str, field: str = "dataset.args") -> dict:
    """The keyword arguments typed in the wizard, as a dict; ValueError naming `field` when they are not.

    Accepts a JSON object, a TOML inline table (`{size=500}`, as the spec's help writes it) or key=value pairs
    whose values are read as TOML (numbers, true/false, "strings", [lists]) and otherwise taken as plain text.
    """
    text = text.strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError:
            try:
                value = _toml_value(text)
            except tomllib.TOMLDecodeError:
                raise ValueError(
                    f"{field}: {text!r} is neither a JSON object nor a TOML table; write {ARGS_EXAMPLES}"
                ) from None
        if not isinstance(value, dict):
            raise ValueError(
                f"{field}: {text!r} is not an object of keyword arguments; write {ARGS_EXAMPLES}"
            )
        return value
    args: dict = {}
    for part in _split_top_level(text):
        key, sep, value = part.partition("=")
        key = key.strip().strip("\"'")
        if not sep or not key:
            raise ValueError(f"{field}: {part!r} is not key=value; write {ARGS_EXAMPLES}")
        if not key.isidentifier():
            raise ValueError(f"{field}: {key!r} is not a Python keyword argument name")
        value = value.strip()
        try:
            args[key] = _toml_value(value)
        except tomllib.TOMLDecodeError:
            args[key] = value  # a bare word: the user meant the text
    return args


def _plain(value) -> bool:
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return isinstance(value, (str, int, float, bool))


def format_args(args: dict) -> str:
    """The text form parse_args reads back to `args`: key=value pairs where every value is plain, else
    JSON."""
    if not args:
        return ""
    if all(isinstance(key, str) and _BARE_KEY.match(key) and _plain(value) for key, value in args.items()):
        return ", ".join(f"{key}={json.dumps(value)}" for key, value in args.items())
    return json.dumps(args)


def args_or_message(text: str, field: str) -> tuple[dict, str]:
    """(the parsed arguments, "") or ({}, the message naming `field`): what a wizard field shows as it is
    typed."""
    try:
        return parse_args(text, field), ""
    except ValueError as exc:
        return {}, str(exc)
