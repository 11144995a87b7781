"""The schema library under every job spec: `option` declares a field in one line, `Spec` validates and
round-trips through TOML/JSON with messages that name the field, and `apply_overrides` reads `--set
key=value`. No torch, no Qt, no numpy.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import json
import math
import re
import reprlib
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import tomli_w

from workbench.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

S = TypeVar("S", bound="Spec")

SUFFIXES = (".toml", ".json")
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})
_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table"}


def option(default: Any, help: str, **meta: Any) -> Any:
    """Declare a spec field in one line: its default, its tooltip and its checks.

    Metadata keys: help, min, max, min_exclusive, max_exclusive, choices, pattern, pattern_help (what the
    pattern allows, in words), min_items, max_items (for lists) and str_key (a plain string stands for
    the table {str_key: string}). Bounds, choices and patterns of a list field apply to each item.
    """
    metadata = {"help": help, **meta}
    if isinstance(default, (list, dict, Spec)):
        # Mutable defaults need a factory; deepcopy so two specs never share a list or a nested spec.
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# --- coercion and field checks ---------------------------------------------------------------------


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _is_spec(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Spec)


def _describe(hint: Any) -> str:
    if get_origin(hint) is list:
        return "a list"
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(map(str, get_args(hint)))
    if _is_spec(hint):
        return "a table"
    return _TYPE_NAMES.get(get_origin(hint) or hint, str(hint))


def _suggest(word: str, allowed: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(word, allowed, n=1)
    if close:
        return f"did you mean {_join(prefix, close[0])!r}?"
    return "allowed fields: " + ", ".join(_join(prefix, name) for name in allowed)


def _to_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise SpecError(f"{path}: {value!r} is not a boolean; use true or false")


def _to_int(value: Any, path: str) -> int:
    # bool is an int subclass, but `epochs = true` is a mistake, not 1.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    number = value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                number = None
    if isinstance(number, float) and number.is_integer():
        return int(number)
    raise SpecError(f"{path}: {value!r} is not an integer")


def _to_float(value: Any, path: str) -> float:
    number: float | None = None
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            number = float(value)
        except (ValueError, OverflowError):
            pass
    if number is None:
        raise SpecError(f"{path}: {value!r} is not a number")
    # TOML allows nan and inf, but JSON cannot write them back and no bound check catches nan.
    if not math.isfinite(number):
        raise SpecError(f"{path}: {value!r} is not a finite number")
    return number


def _range_text(meta: Mapping[str, Any]) -> str:
    parts = []
    if meta.get("min") is not None:
        parts.append(f"{'>' if meta.get('min_exclusive') else '>='} {meta['min']}")
    if meta.get("max") is not None:
        parts.append(f"{'<' if meta.get('max_exclusive') else '<='} {meta['max']}")
    return " and ".join(parts)


class _OutOfRange(SpecError):
    """A value of the field's type but outside its bounds: a union keeps this message over "is not X or Y"."""


def _check_value(value: Any, path: str, meta: Mapping[str, Any]) -> None:
    low, high = meta.get("min"), meta.get("max")
    too_low = low is not None and (value < low or (meta.get("min_exclusive") and value == low))
    too_high = high is not None and (value > high or (meta.get("max_exclusive") and value == high))
    if too_low or too_high:
        raise _OutOfRange(f"{path}: {value!r} is out of range; must be {_range_text(meta)}")
    choices = meta.get("choices")
    pattern = meta.get("pattern")
    if choices is not None:
        # A named choice, or (where the field also takes one) a value of the open form, e.g.
        # file:<path.py>:<Name>.
        if value not in choices and not (pattern is not None and re.fullmatch(pattern, value)):
            also = f", or {meta['pattern_help']}" if pattern is not None and meta.get("pattern_help") else ""
            raise SpecError(f"{path}: {value!r} is not allowed; choose one of: {', '.join(choices)}{also}")
        return
    if pattern is not None and not re.fullmatch(pattern, value):
        allowed = meta.get("pattern_help") or f"of the form {pattern}"
        raise SpecError(f"{path}: {value!r} is not allowed; must be {allowed}")


def _check_count(items: list, path: str, meta: Mapping[str, Any]) -> None:
    least, most = meta.get("min_items"), meta.get("max_items")
    if least is not None and len(items) < least:
        raise SpecError(f"{path}: {items!r} has too few items; must have at least {least}")
    if most is not None and len(items) > most:
        raise SpecError(f"{path}: {items!r} has too many items; must have at most {most}")


def _table_text(text: str, path: str) -> dict:
    """A table written on the command line: a TOML inline table ({n = 3, name = "x"}) or a JSON object."""
    try:
        return tomllib.loads(f"value = {text.strip()}")["value"]
    except tomllib.TOMLDecodeError as toml_error:
        try:
            found = json.loads(text)
        except ValueError:
            raise SpecError(
                f"{path}: {text!r} is not a table: write a TOML inline table such as {{n = 3}} or a JSON "
                f'object such as {{"n": 3}} ({toml_error})'
            ) from None
        if not isinstance(found, dict):
            raise SpecError(f"{path}: {text!r} is not a table") from None
        return found


def _coerce(value: Any, hint: Any, path: str, meta: Mapping[str, Any]) -> Any:
    """Turn plain data (TOML, JSON or a command-line string) into a value of type `hint`, checked."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        options = [candidate for candidate in options if candidate is not type(None)]
        if len(options) == 1:
            return _coerce(value, options[0], path, meta)
        out_of_range = None
        for candidate in options:  # the first type that takes the value wins
            try:
                return _coerce(value, candidate, path, meta)
            except _OutOfRange as error:  # "5000 is out of range" says more than "not an integer or auto"
                out_of_range = out_of_range or error
            except SpecError:
                continue
        if out_of_range is not None:
            raise out_of_range
        raise SpecError(f"{path}: {value!r} is not {' or '.join(_describe(o) for o in options)}")
    if origin is Literal:
        choices = get_args(hint)
        if any(type(value) is type(choice) and value == choice for choice in choices):
            return value
        raise SpecError(f"{path}: {value!r} is not allowed; choose one of: {', '.join(map(str, choices))}")
    if origin is list:
        item_hint = (get_args(hint) or (Any,))[0]
        if isinstance(value, str):  # the command line's "1,28,28"
            value = [part.strip() for part in value.split(",")] if value.strip() else []
        if not isinstance(value, (list, tuple)):
            raise SpecError(f"{path}: {value!r} is not a list")
        items = [_coerce(item, item_hint, f"{path}[{i}]", meta) for i, item in enumerate(value)]
        _check_count(items, path, meta)
        return items
    if hint is dict or origin is dict:
        if isinstance(value, str) and value.strip().startswith("{"):
            value = _table_text(value, path)  # --set model.args={n_classes=3}: a TOML inline table, or JSON
        elif isinstance(value, str) and meta.get("str_key"):
            return {meta["str_key"]: value}
        if not isinstance(value, Mapping):
            raise SpecError(f"{path}: {value!r} is not a table")
        return copy.deepcopy(dict(value))
    if _is_spec(hint):
        return hint.from_dict(value.to_dict() if isinstance(value, Spec) else value, path=path)
    if hint is Any:
        return value
    if hint is bool:
        return _to_bool(value, path)
    if hint is int:
        result = _to_int(value, path)
    elif hint is float:
        result = _to_float(value, path)
    elif hint is str:
        if not isinstance(value, str):
            raise SpecError(f"{path}: {value!r} is not a string")
        result = value
    else:  # a programming error in a spec declaration, not a user mistake
        raise TypeError(f"{path}: unsupported field type {hint!r}")
    _check_value(result, path, meta)
    return result


@functools.cache
def _fields(cls: type) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """Field name -> (resolved type hint, metadata), in declaration order."""
    hints = get_type_hints(cls)
    return {f.name: (hints[f.name], f.metadata) for f in dataclasses.fields(cls)}


def _lookup(cls: type, dotted: str) -> tuple[Any, Mapping[str, Any]]:
    """The type hint and metadata of a dotted field such as `dataset.name`."""
    parts = dotted.split(".")
    walked = ""
    for i, part in enumerate(parts):
        fields = _fields(cls)
        if part not in fields:
            raise SpecError(f"unknown field {dotted!r}; {_suggest(part, list(fields), walked)}")
        hint, meta = fields[part]
        walked = _join(walked, part)
        if i < len(parts) - 1:
            if not _is_spec(hint):
                raise SpecError(f"unknown field {dotted!r}; {walked!r} has no fields")
            cls = hint
    return hint, meta


def _plain(value: Any) -> Any:
    if isinstance(value, Spec):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items() if item is not None}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


# --- files -----------------------------------------------------------------------------------------


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise SpecError(f"{path}: unsupported file type {suffix or '(none)'!r}; use one of: .toml, .json")
    return suffix


MAX_NESTING = 16  # tables and lists inside each other; a spec needs 3, a hostile file may hold thousands


def _check_nesting(data: Any, source: str) -> None:
    """Refuse data nested deeper than any spec can be, without recursing (so no RecursionError can escape)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_NESTING:
            raise SpecError(
                f"{source}: tables or lists are nested more than {MAX_NESTING} deep; a spec "
                "needs only a few levels (e.g. dataset.name)"
            )
        children = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (Mapping, list)))


def _parse(text: str, suffix: str, source: str) -> dict:
    try:
        data = _parse_text(text, suffix, source)
    except RecursionError:  # the parsers recurse per level: a file of 100,000 "[" ends here
        raise SpecError(
            f"{source}: tables or lists are nested too deeply to read; a spec needs only a few "
            "levels (e.g. dataset.name)"
        ) from None
    _check_nesting(data, source)
    return data


# A TOML key: bare, or quoted; dotted keys are several of these joined by dots.
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
_KEY_LINE = re.compile(rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")
_HEADER_LINE = re.compile(rf"\s*\[\[?\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]")


def _key_name(raw: str) -> str:
    return ".".join(part.strip("\"'") for part in re.findall(_KEY_PART, raw))


def _table_above(lines: list[str], number: int) -> str:
    """The [table] a key on line `number` (1-based) belongs to: the nearest header above it ("" for the
    top)."""
    for previous in reversed(lines[: number - 1]):
        header = _HEADER_LINE.match(previous)
        if header:
            return _key_name(header[1])
    return ""


def _repeated_key(text: str, line: int) -> tuple[int, str] | None:
    """(line, dotted key) of the key tomllib refused to set twice. tomllib says only where it stopped, which
    is after the value: a list written over several lines puts that below the key, so look upwards for it."""
    lines = text.splitlines()
    for number in range(min(line, len(lines)), 0, -1):
        header = _HEADER_LINE.match(lines[number - 1])
        if header:  # [model.x] after model.x = 1
            return number, _key_name(header[1])
        found = _KEY_LINE.match(lines[number - 1])
        if found:
            table = _table_above(lines, number)
            return number, f"{table}.{_key_name(found[1])}" if table else _key_name(found[1])
    return None


def _toml_error(message: str, text: str, source: str) -> SpecError:
    """tomllib's message in the spec's words: the line, and for a key or table given twice, which one (tomllib
    says only "Cannot overwrite a value", or the table as a Python tuple)."""
    found = re.search(r"\s*\(at line (\d+), column (\d+)\)", message)
    ended = re.search(r"\s*\(at end of document\)", message)
    line = int(found[1]) if found else text.count("\n") + 1 if ended else None
    if line is not None and message.startswith("Cannot overwrite a value"):
        repeated = _repeated_key(text, line)
        if repeated:
            return SpecError(f"{source}: line {repeated[0]}: the key '{repeated[1]}' appears twice")
    table = re.match(r"Cannot declare \((.*)\) twice", message)
    if line is not None and table:
        name = ".".join(re.findall(r"'([^']*)'", table[1]))
        return SpecError(f"{source}: line {line}: the table [{name}] appears twice")
    if found:
        return SpecError(
            f"{source}: line {line}: invalid TOML ({message[: found.start()]} at column {found[2]})"
        )
    if ended:
        return SpecError(
            f"{source}: line {line}: invalid TOML ({message[: ended.start()]} at the end of the file)"
        )
    return SpecError(f"{source}: invalid TOML ({message})")


def _parse_text(text: str, suffix: str, source: str) -> dict:
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _toml_error(str(exc), text, source) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{source}: line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
        ) from None
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the top level must be an object of fields, not {type(data).__name__}")
    return data


# --- the base class --------------------------------------------------------------------------------


class Spec:
    """Base of the job specs: subclasses are dataclasses whose fields are all declared with `option`."""

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any], *, path: str = "") -> S:
        """Build and validate a spec from plain data; `path` is where this spec sits in the top-level one."""
        if not isinstance(data, Mapping):
            raise SpecError(f"{path or cls.__name__}: {reprlib.repr(data)} is not a table")
        if not path:  # data from the wire or a dict, not only from a file: the same bound applies
            _check_nesting(data, cls.__name__)
        fields = _fields(cls)
        values = {}
        for key, raw in data.items():
            if key not in fields:
                raise SpecError(f"{_join(path, str(key))}: unknown field; {_suggest(str(key), list(fields))}")
            hint, meta = fields[key]
            values[key] = _coerce(raw, hint, _join(path, key), meta)
        spec = cls(**values)
        try:
            spec.validate()
        except SpecError as exc:
            # validate() names fields relative to its own spec; prefix where this spec sits.
            if not path:
                raise
            raise SpecError(_join(path, str(exc))) from None
        return spec

    def validate(self) -> None:
        """Cross-field checks, run by from_dict after every field is coerced.

        Raise SpecError whose message starts with the field name relative to this spec (`nproc: ...`);
        from_dict adds the prefix of a nested spec. Overrides may also normalise values in place.
        """

    def to_dict(self) -> dict[str, Any]:
        """Plain data that from_dict turns back into an equal spec; None values are left out."""
        return {
            f.name: _plain(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_toml(cls: type[S], text: str, *, source: str = "<string>") -> S:
        return cls.from_dict(_parse(text, ".toml", source))

    @classmethod
    def from_json(cls: type[S], text: str, *, source: str = "<string>") -> S:
        return cls.from_dict(_parse(text, ".json", source))

    @classmethod
    def load(cls: type[S], path: str | Path) -> S:
        """Read a .toml or .json spec file; every error names the file."""
        path = Path(path)
        suffix = _suffix(path)
        try:
            text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate the BOM some editors write
        except FileNotFoundError:
            raise SpecError(f"{path}: no such file") from None
        except UnicodeDecodeError:
            raise SpecError(f"{path}: is not UTF-8 text") from None
        except OSError as exc:
            raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None
        data = _anchor_user_files(_parse(text, suffix, str(path)), path.parent)
        try:
            return cls.from_dict(data)
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None

    @classmethod
    def iter_fields(cls) -> Iterator[tuple[str, Any, Any, Mapping[str, Any]]]:
        """Yield (dotted_path, type_hint, default, metadata) for every leaf field, nested specs included."""

        def walk(spec_cls: type, defaults: Any, prefix: str) -> Iterator[tuple[str, Any, Any, Mapping]]:
            for name, (hint, meta) in _fields(spec_cls).items():
                default = getattr(defaults, name)
                if _is_spec(hint):
                    yield from walk(hint, default, _join(prefix, name))
                else:
                    yield _join(prefix, name), hint, default, meta

        # Defaults come from an instance so a nested spec's default set by its parent is honoured.
        yield from walk(cls, cls(), "")

    @classmethod
    def field_help(cls, dotted: str) -> str:
        """The tooltip of a dotted field such as `dataset.name`."""
        return _lookup(cls, dotted)[1]["help"]


def _anchor_user_files(data: Any, folder: Path) -> Any:
    """`file:<path.py>:<Name>` (and `lightning:`) values with a relative path that exists beside the spec file
    (and not in the working folder) made absolute, so a project's spec runs from anywhere: `workbench train
    examples/x/train.toml`."""
    if isinstance(data, dict):
        return {key: _anchor_user_files(value, folder) for key, value in data.items()}
    if isinstance(data, list):
        return [_anchor_user_files(value, folder) for value in data]
    prefix = next((p for p in ("file:", "lightning:") if isinstance(data, str) and data.startswith(p)), None)
    if prefix is not None:
        path_text, colon, attr = data[len(prefix) :].rpartition(":")
        relative = Path(path_text).expanduser()
        if colon and path_text and not relative.is_absolute() and not relative.exists():
            beside = folder / relative
            if beside.is_file():
                return f"{prefix}{beside.absolute()}:{attr}"
    return data


def dump(spec: Spec, path: str | Path) -> None:
    """Write a spec as TOML or JSON, chosen by the file's suffix."""
    path = Path(path)
    text = spec.to_toml() if _suffix(path) == ".toml" else spec.to_json()
    path.write_text(text, encoding="utf-8")


def apply_overrides(data: Mapping[str, Any], overrides: Iterable[str], spec_cls: type[Spec]) -> dict:
    """Apply the command line's `--set key=value` items to plain spec data; returns a new dict.

    Each value is coerced with its field's type, so `epochs=3` gives an int and `model.input_shape=1,28,28`
    a list; nested tables missing from `data` are created.
    """
    result = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {item}: expected key=value, e.g. lr=0.01")
        if _in_free_table(spec_cls, key):
            _set_path(result, key.split("."), _free_value(raw.strip()), item)
            continue
        try:
            hint, meta = _lookup(spec_cls, key)
            if _is_spec(hint):
                first = next(iter(_fields(hint)))
                raise SpecError(f"{key!r} is a table; set one of its fields, e.g. {key}.{first}=...")
            value = _coerce(raw.strip(), hint, key, meta)
        except SpecError as exc:
            raise SpecError(f"--set {item}: {exc}") from None
        _set_path(result, key.split("."), value, item)
    return result


def _set_path(result: dict, parts: list[str], value: Any, item: str) -> None:
    """result[a][b]...[leaf] = value, creating the tables on the way (copies: `data` is never changed)."""
    *parents, leaf = parts
    node = result
    for part in parents:
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, Mapping):
            raise SpecError(f"--set {item}: {part!r} in the spec is {child!r}, not a table")
        node[part] = child = dict(child)
        node = child
    node[leaf] = value


def _in_free_table(cls: type, dotted: str) -> bool:
    """Whether `dotted` names a key inside a free-form table field (model.args.n_classes): such a table has no
    fields of its own to look the rest up in, so its keys are whatever the user's code takes."""
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        fields = _fields(cls) if _is_spec(cls) else {}
        if part not in fields:
            return False
        hint = fields[part][0]
        if hint is dict or get_origin(hint) is dict:
            return all(parts[i + 1 :])
        cls = hint
    return False


def _free_value(raw: str) -> Any:
    """A value inside a free-form table, read as TOML (3 is an int, "x" a string, true a bool, [1, 2] a list);
    a bare word TOML cannot read (relu) is taken as the string it reads as."""
    try:
        return tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        return raw


def _check_normalize(value: str | dict) -> str | dict:
    """Check `normalize` and give back its canonical form ({mean: [float], std: [float]} for a table)."""
    if isinstance(value, str):
        if value not in ("auto", "none"):
            raise SpecError(
                f"normalize: {value!r} is not allowed; choose one of: auto, none, or a table {{mean=[...], "
                "std=[...]}"
            )
        return value
    for key in value:
        if key not in ("mean", "std"):
            raise SpecError(f"normalize.{key}: unknown field; {_suggest(str(key), ['mean', 'std'])}")
    for key in ("mean", "std"):
        if key not in value:
            raise SpecError(f"normalize: {value!r} has no {key}; a table needs both mean and std")
    mean = _coerce(value["mean"], list[float], "normalize.mean", {"min_items": 1})
    std = _coerce(
        value["std"], list[float], "normalize.std", {"min_items": 1, "min": 0, "min_exclusive": True}
    )
    if len(mean) != len(std):
        raise SpecError(
            f"normalize.std: {std!r} has {len(std)} values but mean has {len(mean)}; they must have the same "
            "length"
        )
    return {"mean": mean, "std": std}
