"""Typed job specs: plain dataclasses that validate with clear messages and round-trip through TOML/JSON.

No torch, no Qt, no numpy: the GUI, the worker and the command line all import this module.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import tomli_w

from workbench.errors import SpecError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

__all__ = [
    "SPEC_TYPES",
    "BenchSpec",
    "DataInfoSpec",
    "DataSpec",
    "ExportSpec",
    "GraphSpec",
    "LrFindSpec",
    "ModelSpec",
    "PredictSpec",
    "QuantSpec",
    "SourceSpec",
    "Spec",
    "TrainSpec",
    "apply_overrides",
    "dump",
    "option",
    "spec_for",
]

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
        # A named choice, or (where the field also takes one) a value of the open form, e.g. file:<path.py>:<Name>.
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
            raise SpecError(f"{path}: {text!r} is not a table: write a TOML inline table such as {{n = 3}} or a JSON "
                            f"object such as {{\"n\": 3}} ({toml_error})") from None
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
            raise SpecError(f"{source}: tables or lists are nested more than {MAX_NESTING} deep; a spec "
                            "needs only a few levels (e.g. dataset.name)")
        children = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (Mapping, list)))


def _parse(text: str, suffix: str, source: str) -> dict:
    try:
        data = _parse_text(text, suffix, source)
    except RecursionError:  # the parsers recurse per level: a file of 100,000 "[" ends here
        raise SpecError(f"{source}: tables or lists are nested too deeply to read; a spec needs only a few "
                        "levels (e.g. dataset.name)") from None
    _check_nesting(data, source)
    return data


# A TOML key: bare, or quoted; dotted keys are several of these joined by dots.
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
_KEY_LINE = re.compile(rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")
_HEADER_LINE = re.compile(rf"\s*\[\[?\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]")


def _key_name(raw: str) -> str:
    return ".".join(part.strip("\"'") for part in re.findall(_KEY_PART, raw))


def _table_above(lines: list[str], number: int) -> str:
    """The [table] a key on line `number` (1-based) belongs to: the nearest header above it ("" for the top)."""
    for previous in reversed(lines[: number - 1]):
        header = _HEADER_LINE.match(previous)
        if header:
            return _key_name(header[1])
    return ""


def _repeated_key(text: str, line: int) -> tuple[int, str] | None:
    """(line, dotted key) of the key tomllib refused to set twice. tomllib says only where it stopped, which is
    after the value: a list written over several lines puts that below the key, so look upwards for it."""
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
        return SpecError(f"{source}: line {line}: invalid TOML ({message[: found.start()]} at column {found[2]})")
    if ended:
        return SpecError(f"{source}: line {line}: invalid TOML ({message[: ended.start()]} at the end of the file)")
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
    """`file:<path.py>:<Name>` (and `lightning:`) values with a relative path that exists beside the spec file (and not in the
    working folder) made absolute, so a project's spec runs from anywhere: `workbench train examples/x/train.toml`."""
    if isinstance(data, dict):
        return {key: _anchor_user_files(value, folder) for key, value in data.items()}
    if isinstance(data, list):
        return [_anchor_user_files(value, folder) for value in data]
    prefix = next((p for p in ("file:", "lightning:") if isinstance(data, str) and data.startswith(p)), None)
    if prefix is not None:
        path_text, colon, attr = data[len(prefix):].rpartition(":")
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
            return all(parts[i + 1:])
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
                f"normalize: {value!r} is not allowed; choose one of: auto, none, or a table {{mean=[...], std=[...]}}"
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
            f"normalize.std: {std!r} has {len(std)} values but mean has {len(mean)}; they must have the same length"
        )
    return {"mean": mean, "std": std}


# --- the specs -------------------------------------------------------------------------------------
# One line per field keeps each spec readable as a table, so the formatter is told to leave them alone.
# fmt: off

DATASETS = ("digits", "mnist", "fashion_mnist", "kmnist", "cifar10", "cifar100", "svhn", "imagefolder", "fake")
AUGMENTATIONS = ("random_crop", "hflip", "vflip", "rotation", "color_jitter", "random_erasing")
BENCH_BACKENDS = ("eager", "compile", "torchscript", "exported_program", "onnxruntime", "onnxruntime_int8", "tensorrt")
DEVICE_PATTERN = r"auto|cpu|mps|cuda(:\d+)?"
MODEL_PATTERN = (r"mlp|cnn|torchvision:[A-Za-z_][A-Za-z0-9_]*|file:.+\.py:[A-Za-z_][A-Za-z0-9_]*"
                 r"|hf:.+|timm:[A-Za-z0-9_][A-Za-z0-9_.\-]*")  # hf: a folder or hub id; timm: a name, maybe .tag
USER_DATASET_PATTERN = r"file:.+\.py:[A-Za-z_][A-Za-z0-9_]*"  # a torch Dataset class, or a function returning one
USER_FUNCTION_PATTERN = USER_DATASET_PATTERN  # loss=, metrics= (task=custom): a function in the user's file
LIGHTNING_PATTERN = r"lightning:.+\.py:[A-Za-z_][A-Za-z0-9_]*"  # a LightningModule or LightningDataModule class
TASKS = ("auto", "classification", "multilabel", "regression", "segmentation", "custom")
Task = Literal["auto", "classification", "multilabel", "regression", "segmentation", "custom"]
LOSSES = ("auto", "cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce")

Amp = Literal["none", "bf16", "fp16"]

# Upper bounds for values that can only be typos (an extra 0, 1e308 for 1e-3): past them a job does not run
# slowly, it fails deep inside torch (dataset.image_size=100000 asked for 17 TB; lr=1e308 overflowed). Each sits
# far above any real use on one machine, and all ints fit the GUI's spin boxes (at most 2**31 - 1).
MAX_IMAGE_SIDE = 4096  # pixels; a 4096x4096 RGB image is already 50 MB as uint8
MAX_SAMPLE_VALUES = 2**28  # values in one input sample (1 GiB as float32): model.input_shape multiplied out
MAX_CLASSES = 1_000_000
MAX_SAMPLES = 100_000_000
MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy take a signed 64-bit seed; more overflows deep in torch
MAX_BATCH = 2**20
MAX_ACCUM = 65_536
MAX_EPOCHS = 100_000
MAX_STEPS = 10_000_000
MAX_PROFILE_STEPS = 10_000  # a profiler trace grows with every step; thousands already make one hard to open
MAX_PROCESSES = 1024  # loader workers, DDP processes or threads on one machine
MAX_LR = 10  # also bounds gamma: no optimiser here trains at a rate above 10, and 1e308 overflows
MAX_WEIGHT_DECAY = 1  # decay above 1 shrinks the weights faster than any gradient can move them


def _device(default: str, help: str) -> Any:
    return option(default, help, pattern=DEVICE_PATTERN, pattern_help="auto, cpu, mps, cuda or cuda:N")


@dataclass
class DataSpec(Spec):
    """Which dataset to load and how to split, resize, normalise and augment it."""

    name: str = option("digits", "Dataset to load; 'fake' makes random images, 'imagefolder' reads class folders under root, file:<path.py>:<Name> is your own torch Dataset class (or a function returning one), run with your permissions.", choices=DATASETS, pattern=USER_DATASET_PATTERN + "|" + LIGHTNING_PATTERN, pattern_help="file:<path.py>:<DatasetClassOrFunction> or lightning:<path.py>:<LightningDataModule>")
    root: str = option("", "Folder holding the dataset files; empty means the workspace's data folder.")
    download: bool = option(False, "Download the dataset when it is not already under root.")
    val_fraction: float = option(0.1, "Fraction of the training split held out for validation.", min=0, max=1, max_exclusive=True)
    test_fraction: float = option(0.1, "Fraction held out for testing, used only where the dataset has no test split of its own.", min=0, max=1, max_exclusive=True)
    seed: int = option(0, "Seed of the random train/validation/test split.", min=0, max=MAX_SEED)
    image_size: list[int] = option([], "Resize images: empty keeps their size, one value makes a square, two values are height,width.", min=1, max=MAX_IMAGE_SIDE, max_items=2)
    normalize: str | dict = option("auto", "Normalisation: 'auto' uses the dataset's statistics, 'none' skips it, or a table {mean=[...], std=[...]}.")
    augment: list[dict] = option([], "Training augmentations, each a table with a name and its parameters, e.g. {name='rotation', degrees=15}.", str_key="name")
    num_workers: int | Literal["auto"] = option("auto", "Background workers that load batches ahead of the step; 0 loads them in the job's own process. auto: the machine's cores (up to 8) where data streams from files, 0 where it is held in memory.", min=0, max=MAX_PROCESSES)
    pin_memory: bool = option(False, "Pin host memory so batches copy to a CUDA device faster.")
    on_device: bool | Literal["auto"] = option("auto", "Keep the whole dataset (uint8) on the training device and gather, augment and normalise batches there: auto does so on CUDA when it fits in a quarter of the free device memory; false stages each batch through host memory.")
    size: int = option(1000, "Number of samples the 'fake' dataset generates.", min=1, max=MAX_SAMPLES)
    num_classes: int = option(10, "Number of classes the 'fake' dataset generates.", min=2, max=MAX_CLASSES)
    args: dict = option({}, "Keyword arguments for a file: dataset's class or function, e.g. {size=500}.")
    stratify: bool = option(True, "Split by class: every class is cut into train, validation and test in the same proportions, so a small test split keeps every class (a registered or image-folder dataset; a file: dataset is split plainly). false: the plain seeded split, which runs made before this option keep.")

    def validate(self) -> None:
        total = self.val_fraction + self.test_fraction
        if total >= 1:
            raise SpecError(
                f"val_fraction: {self.val_fraction!r} plus test_fraction {self.test_fraction!r} is {total:g}; "
                "the sum must be < 1"
            )
        self.normalize = _check_normalize(self.normalize)
        for i, item in enumerate(self.augment):
            name = item.get("name")
            if name not in AUGMENTATIONS:
                what = f"{name!r} is not allowed" if "name" in item else f"{item!r} has no name"
                raise SpecError(f"augment[{i}].name: {what}; choose one of: {', '.join(AUGMENTATIONS)}")


INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def _check_input_spec(input_spec: dict) -> None:
    """model.input_spec: {name: {shape: [batch, ...], dtype, low, high}}, each entry checked with its path."""
    for name, entry in input_spec.items():
        where = f"input_spec.{name}"
        if not isinstance(entry, dict):
            raise SpecError(f"{where}: {entry!r} is not a table; write {{shape = [1, 48], dtype = \"int64\"}}")
        unknown = sorted(set(entry) - {"shape", "dtype", "low", "high"})
        if unknown:
            raise SpecError(f"{where}: unknown key {unknown[0]!r}; allowed: shape, dtype, low, high")
        shape = entry.get("shape")
        if (not isinstance(shape, list) or not shape or len(shape) > 8
                or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise SpecError(f"{where}.shape: {shape!r} must be a list of 1 to 8 positive integers, the batch first, "
                            "e.g. [1, 48]")
        if math.prod(shape) > MAX_SAMPLE_VALUES:
            raise SpecError(f"{where}.shape: {shape!r} is {math.prod(shape):,} values; at most {MAX_SAMPLE_VALUES:,}")
        dtype = entry.get("dtype", "float32")
        if dtype not in INPUT_DTYPES:
            raise SpecError(f"{where}.dtype: {dtype!r} is not allowed; choose one of: {', '.join(INPUT_DTYPES)}")
        for key in ("low", "high"):
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise SpecError(f"{where}.{key}: {value!r} is not a finite number")
        if entry.get("low") is not None and entry.get("high") is not None and entry["low"] > entry["high"]:
            raise SpecError(f"{where}: low {entry['low']} is above high {entry['high']}")


@dataclass
class ModelSpec(Spec):
    """Which model to build and which weights to start from."""

    name: str = option("cnn", "Model to build: mlp, cnn, torchvision:<arch>, file:<path.py>:<ClassOrFactory>, hf:<folder or hub id> (a Hugging Face transformers classifier, loaded offline from a local folder or the cache; pip install 'torch-workbench[hf]') or timm:<name> (untrained unless model.weights names a local file; pip install 'torch-workbench[timm]'); lightning:<path.py>:<LightningModule> is trained by Lightning's own Trainer.", pattern=MODEL_PATTERN + "|" + LIGHTNING_PATTERN, pattern_help="mlp, cnn, torchvision:<arch>, file:<path.py>:<ClassOrFactory>, hf:<folder or hub id>, timm:<name> or lightning:<path.py>:<LightningModule>")
    num_classes: int = option(0, "Number of outputs of the classifier; 0 (auto) takes the dataset's class count.", min=0, max=MAX_CLASSES)
    input_shape: list[int] = option([], "Shape of one input without the batch dimension, e.g. 1,28,28; empty takes it from the dataset.", min=1, max_items=3)
    input_spec: dict = option({}, "The model's inputs by name, for a job with no dataset to take real samples from: {name = {shape = [batch, ...], dtype = \"int64\", low = 0, high = 200}}; e.g. {ids = {shape = [1, 48], dtype = \"int64\", low = 0, high = 200}}. Empty: inputs come from the dataset, else model.input_shape.")
    checkpoint: str = option("", "Weights file to load before the job starts; empty loads none.")
    weights: str = option("", "Pretrained weights to start from, e.g. DEFAULT for a torchvision model; empty means none.")
    replace_head: bool = option(False, "Replace the classifier head so it has num_classes outputs, e.g. to fine-tune pretrained weights.")
    freeze: list[str] = option([], "Module-name prefixes whose parameters are not trained, or the word 'backbone' for all but the head.")
    args: dict = option({}, "Keyword arguments for a file: model's class or factory (num_classes is passed apart, where it takes one), a lightning: module's class, timm.create_model for a timm: model, or from_pretrained for an hf: model (plus task = \"sequence-classification\", \"token-classification\" or \"image-classification\", and local_files_only = false to allow downloads), e.g. {hidden=64, lr=0.01}.")

    def validate(self) -> None:
        if self.args and not self.name.startswith(("file:", "lightning:", "hf:", "timm:")):
            raise SpecError(f"args: {self.name} is a built-in model and takes no arguments; only file:, "
                            "lightning:, hf: and timm: models do")
        _check_input_spec(self.input_spec)
        values = math.prod(self.input_shape)
        if values > MAX_SAMPLE_VALUES:
            # Each side may be plausible alone (a 1-D input of 150,528 features is); their product is what
            # the dry forward pass would allocate.
            raise SpecError(
                f"input_shape: {','.join(map(str, self.input_shape))} is {values:,} values per sample; "
                f"must be at most {MAX_SAMPLE_VALUES:,}"
            )


@dataclass
class TrainSpec(Spec):
    """A training run: data, model, optimiser, schedule, precision and where it runs."""

    dataset: DataSpec = option(DataSpec(), "The data to train and validate on.")
    model: ModelSpec = option(ModelSpec(), "The model to train.")
    epochs: int = option(10, "Number of passes over the training split.", min=1, max=MAX_EPOCHS)
    batch_size: int = option(64, "Samples per optimiser step (before gradient accumulation).", min=1, max=MAX_BATCH)
    lr: float = option(1e-3, "Learning rate (the peak rate for onecycle).", min=0, min_exclusive=True, max=MAX_LR)
    optimizer: Literal["sgd", "adam", "adamw", "rmsprop"] = option("adam", "Optimisation algorithm.")
    momentum: float = option(0.9, "Momentum for sgd and rmsprop.", min=0, max=1)
    weight_decay: float = option(0.0, "L2 weight decay (decoupled for adamw); 0 turns it off.", min=0, max=MAX_WEIGHT_DECAY)
    no_decay_bias_norm: bool = option(True, "Exempt biases and normalisation weights from weight decay.")
    scheduler: Literal["none", "step", "cosine", "onecycle"] = option("none", "Learning-rate schedule.")
    step_size: int = option(5, "Epochs between learning-rate drops for the step schedule.", min=1, max=MAX_EPOCHS)
    gamma: float = option(0.1, "Factor the step schedule multiplies the learning rate by.", min=0, min_exclusive=True, max=MAX_LR)
    task: Task = option("auto", "What the model learns: auto decides from the first sample (integer labels: classification; float targets: regression; an integer map the input's size: segmentation; a 0/1 vector: multilabel).")
    loss: str = option("auto", "Loss function; auto is the task's own (cross_entropy for classification and segmentation, mse for regression, bce for multilabel). file:<path.py>:<fn> is your own fn(outputs, target) -> scalar tensor, run with your permissions (task=custom; task=auto with a file: loss means custom).", choices=LOSSES, pattern=USER_FUNCTION_PATTERN, pattern_help="file:<path.py>:<function> (your own loss, task=custom)")
    metrics: str = option("", "task=custom: file:<path.py>:<fn>, your fn(outputs, target) -> {name: number} per batch; each is averaged over the epoch weighted by batch size and logged as train_<name> and val_<name>. Empty: the loss only.", pattern=r"|" + USER_FUNCTION_PATTERN, pattern_help="empty, or file:<path.py>:<function> returning {name: number}")
    monitor: str = option("", "task=custom: the validation metric that picks the best checkpoint and early stopping: a name the metrics function returns, or loss. Empty: loss.")
    monitor_mode: Literal["auto", "max", "min"] = option("auto", "task=custom: whether a higher (max) or lower (min) monitor is better; auto is min for monitor=loss and must be set for any other monitor.")
    label_smoothing: float = option(0.0, "Label smoothing for cross_entropy; 0 turns it off.", min=0, max=1, max_exclusive=True)
    amp: Amp = option("none", "Mixed precision: autocast to bf16 or fp16, or none for full precision.")
    grad_accum_steps: int = option(1, "Batches whose gradients add up before each optimiser step.", min=1, max=MAX_ACCUM)
    clip_grad_norm: float = option(0.0, "Clip the gradient norm to this value; 0 turns it off.", min=0)
    clip_grad_value: float = option(0.0, "Clip each gradient element to plus or minus this value; 0 turns it off.", min=0)
    seed: int = option(0, "Seed for weight initialisation and data shuffling.", min=0, max=MAX_SEED)
    deterministic: bool = option(False, "Use deterministic algorithms so reruns match exactly, at some cost in speed.")
    compile: Literal["off", "default", "reduce-overhead", "max-autotune"] = option("off", "torch.compile mode, or off to run eagerly.")
    channels_last: bool | Literal["auto"] = option("auto", "Memory layout of image tensors: true is channels-last, false contiguous; auto times both once per model and device (remembered in the workspace) and keeps the faster. Same precision either way.")
    checkpoint_every: int = option(1, "Save a checkpoint every this many epochs; 0 saves only at the end.", min=0, max=MAX_EPOCHS)
    keep_best: bool = option(True, "Also keep the checkpoint with the best validation score.")
    early_stop_patience: int = option(0, "Stop after this many epochs without validation improvement; 0 turns it off.", min=0, max=MAX_EPOCHS)
    device: str = _device("auto", "Where to train: auto, cpu, mps, cuda or cuda:N.")
    distributed: Literal["none", "ddp"] = option("none", "Distributed training across processes: none or ddp.")
    nproc: int = option(1, "Number of processes for ddp; must be 1 without it.", min=1, max=MAX_PROCESSES)
    profile_steps: int = option(0, "Record a torch profiler trace of this many steps; 0 turns it off.", min=0, max=MAX_PROFILE_STEPS)
    log_every_steps: int = option(20, "How often, in steps, the loop reads losses back from the device.", min=1, max=MAX_STEPS)
    layer_stats_every: int = option(50, "How often, in steps, to record each layer's weight, gradient and activation statistics and histograms (the Training tab's Layers view); the first step is always recorded. 0 turns it off.", min=0, max=MAX_STEPS)
    tensorboard: bool = option(False, "Also write TensorBoard event files into the run's tensorboard/ folder as it trains: every metric at every step, the spec and the model graph. Needs the tensorboard package (pip install 'torch-workbench[tensorboard]').")

    def validate(self) -> None:
        if self.distributed == "none" and self.nproc != 1:
            raise SpecError(f"nproc: {self.nproc} needs distributed=ddp; with distributed=none nproc must be 1")
        self._check_custom()

    def _check_custom(self) -> None:
        """task=custom and its fields (loss=file:, metrics, monitor, monitor_mode) go together; task=auto with a
        file: loss becomes custom, since no other task takes the user's loss."""
        user_loss = self.loss.startswith("file:")
        if self.model.name.startswith("lightning:"):
            # A LightningModule computes its own loss in training_step and logs its own metrics; its callbacks name
            # the monitor. Whatever task it records, these fields would be silently ignored: say so.
            for name, unset in (("metrics", ""), ("monitor", ""), ("monitor_mode", "auto")):
                if getattr(self, name) != unset:
                    raise SpecError(f"{name}: {getattr(self, name)!r} is not used by a LightningModule (model.name="
                                    "lightning:...): it logs its own metrics and its ModelCheckpoint names the monitor")
            if user_loss:
                raise SpecError(f"loss: {self.loss!r} is not used by a LightningModule: its training_step computes "
                                "the loss")
            return
        if user_loss and self.task == "auto":
            self.task = "custom"
        self.monitor = self.monitor.strip()
        if self.task != "custom":
            if user_loss:
                raise SpecError(f"loss: {self.loss!r} is a custom loss; set task=custom (or auto), or choose one of: "
                                f"{', '.join(LOSSES)}")
            for name, unset in (("metrics", ""), ("monitor", ""), ("monitor_mode", "auto")):
                if getattr(self, name) != unset:
                    raise SpecError(f"{name}: {getattr(self, name)!r} is for task=custom (with loss=file:<path.py>:<fn>); "
                                    f"task={self.task} has its own metrics and monitor")
            return
        if not user_loss:
            raise SpecError(f"loss: task=custom needs loss=file:<path.py>:<fn> (your fn(outputs, target) -> scalar "
                            f"tensor), not {self.loss!r}; for a built-in loss choose its task (or auto)")
        if self.monitor in ("", "loss"):
            if self.monitor_mode == "max":
                raise SpecError("monitor_mode: max would keep the epoch with the highest validation loss; use min (or "
                                "auto), or set monitor to a metric that is better when higher")
        else:
            if not self.metrics:
                raise SpecError(f"monitor: {self.monitor!r} names a metric, but there is no metrics function; set "
                                "metrics=file:<path.py>:<fn> returning it, or monitor=loss")
            if self.monitor_mode == "auto":
                raise SpecError(f"monitor_mode: auto cannot tell whether a higher or a lower {self.monitor} is better; "
                                "set monitor_mode=max or monitor_mode=min")


MAX_LR_FIND_STEPS = 10_000  # each step is one training step on one batch; a sweep needs about a hundred


@dataclass
class LrFindSpec(TrainSpec):
    """The learning-rate range test (`workbench lr-find`): a training spec (its data, model, batch size, optimiser,
    loss, precision and device) swept from min_lr to max_lr over `steps` optimiser steps. A TrainSpec subclass, so a
    training spec plus these three fields is one; lr, epochs, the schedule and the checkpoint fields go unused."""

    min_lr: float = option(1e-7, "Learning rate of the sweep's first step.", min=0, min_exclusive=True, max=MAX_LR)
    max_lr: float = option(10.0, "Learning rate of the sweep's last step; the rate grows exponentially from min_lr to it.", min=0, min_exclusive=True, max=MAX_LR)
    steps: int = option(100, "Optimiser steps of the sweep (one batch each); it stops early once the loss diverges.", min=5, max=MAX_LR_FIND_STEPS)

    def validate(self) -> None:
        super().validate()
        if self.min_lr >= self.max_lr:
            raise SpecError(f"min_lr: {self.min_lr:g} must be below max_lr ({self.max_lr:g}); the sweep raises the "
                            "learning rate from min_lr to max_lr, e.g. min_lr=1e-7 and max_lr=10")
        if self.model.name.startswith("lightning:"):
            raise SpecError("model.name: a LightningModule's configure_optimizers sets its own learning rate, so "
                            "lr-find cannot sweep it; use Lightning's own Tuner.lr_find")


@dataclass
class SourceSpec(Spec):
    """Where a job's model comes from: a run of the workspace, or an exported model file (one spec part, shared by
    quantize, graph, export and bench)."""

    run: str = option("", "A run (its id, a unique id prefix or its folder): a training run gives its model spec, its best (else last) checkpoint and its dataset; a quantize run also its scales. Empty: no run.")
    file: str = option("", "An exported model file (.onnx, .pt2 or TorchScript .pt) to read instead of a run. Empty: no file.")

    def validate(self) -> None:
        self.run, self.file = self.run.strip(), self.file.strip()
        if self.run and self.file:
            raise SpecError(f"run: {self.run!r} and file {self.file!r} are both given; name the model one way, not both")


WEIGHT_RANGES = ("minmax", "mse", "percentile")
ACTIVATION_RANGES = ("minmax", "mse", "percentile", "cross_entropy", "bn")
MIXED_BITS = (8, 16)


@dataclass
class WeightQuantSpec(Spec):
    """How weights are quantized: bit width, one scale per tensor or per output channel, grid and range."""

    bits: int = option(8, "Bit width of the weights, 2 to 16.", min=2, max=16)
    granularity: Literal["per_tensor", "per_channel"] = option("per_channel", "One scale for the whole tensor (per_tensor) or one per output channel (per_channel).")
    symmetric: bool = option(True, "Symmetric signed grid with zero point 0; false: an asymmetric unsigned grid 0..2^bits-1 with a fitted zero point.")
    restricted: bool = option(True, "For symmetric weights: the restricted grid +-(2^(bits-1)-1) that ONNX and TensorRT use; false adds -2^(bits-1).")
    range: str = option("mse", "How the clipping range is chosen: minmax (no clipping), mse (the range with the least squared error, by grid search) or percentile.", choices=WEIGHT_RANGES)
    percentile: float = option(99.99, "For range=percentile: the percentile of the values that bounds the range.", min=50, min_exclusive=True, max=100)


@dataclass
class ActivationQuantSpec(Spec):
    """How activations (the input and each layer's output) are quantized: bit width, grid and range."""

    bits: int = option(8, "Bit width of the activations, 2 to 16.", min=2, max=16)
    symmetric: bool = option(False, "Symmetric grid with zero point 0 (unsigned for a tensor with no negative values, as after a ReLU); false: asymmetric with a fitted zero point.")
    range: str = option("mse", "How clipping ranges are set on the calibration data: minmax, mse, percentile, cross_entropy (mse, and for the logits the range that best keeps their softmax, paper section 3.4) or bn (from the BatchNorm before each activation, section 3.5; mse where there is none).", choices=ACTIVATION_RANGES)
    percentile: float = option(99.99, "For range=percentile: the percentile of the values that bounds the range.", min=50, min_exclusive=True, max=100)


@dataclass
class AdaRoundSpec(Spec):
    """AdaRound (Nagel et al. 2020): learn, layer by layer on the calibration set, whether each weight rounds up or down."""

    enabled: bool = option(False, "Learn the rounding of each weight instead of rounding to nearest: Adam at learning rate 1e-2 on batches of 32 calibration samples (the paper and AIMET use 1e-3 over 10,000 steps; our budgets are hundreds to a thousand steps a layer, so each step moves further), on the weights' own grid: with weights.restricted (the default) [-127, 127] at 8 bits and [-7, 7] at 4, symmetric as ONNX and TensorRT int8 kernels take it, where AIMET uses [-8, 7].")
    iterations: int = option(1000, "Optimisation steps per layer.", min=1, max=MAX_STEPS)


@dataclass
class CalibrationSpec(Spec):
    """The calibration subset: training samples that ranges, AdaRound and bias correction are fitted on."""

    samples: int = option(256, "Training samples to calibrate on (the Data tab's calibration count).", min=1, max=MAX_SAMPLES)
    seed: int = option(0, "Seed that picks the calibration samples (the Data tab's calibration seed).", min=0, max=MAX_SEED)


@dataclass
class QatSpec(Spec):
    """Quantization-aware training after the post-training steps."""

    epochs: int = option(0, "Epochs of fine-tuning with fake quantization (straight-through gradients); 0 skips it.", min=0, max=MAX_EPOCHS)
    lr: float = option(1e-4, "Learning rate of the fine-tuning.", min=0, min_exclusive=True, max=MAX_LR)


@dataclass
class MixedPrecisionSpec(Spec):
    """Mixed precision: ask for a proposal of layers to keep at a higher bit width, or apply one."""

    target_drop: float = option(0.0, "Accuracy drop from FP32 that a proposal may leave, as a fraction (0.01 is one percentage point); for another task it is the drop of its monitor (mIoU, mean AP), or the rise of one where lower is better (MAE), in the monitor's own units; 0 asks for no proposal.", min=0, max=1)
    layers: list[dict] = option([], "Layers kept at a higher bit width (a proposal, applied): tables {name=..., bits=8 or 16}; the layer's weights and its output activation use those bits.")

    def validate(self) -> None:
        seen = set()
        for i, item in enumerate(self.layers):
            extra = sorted(set(item) - {"name", "bits"})
            if extra:
                raise SpecError(f"layers[{i}].{extra[0]}: unknown field; a layer is a table {{name=..., bits=...}}")
            name = item.get("name")
            if not isinstance(name, str) or not name.strip():
                raise SpecError(f"layers[{i}].name: {name!r} is not a layer name; use the name the report lists")
            if name in seen:
                raise SpecError(f"layers[{i}].name: {name!r} is listed twice")
            seen.add(name)
            bits = _coerce(item.get("bits"), int, f"layers[{i}].bits", {})
            if bits not in MIXED_BITS:
                raise SpecError(f"layers[{i}].bits: {bits!r} is not allowed; choose one of: 8, 16")
            item["bits"] = bits


@dataclass
class QuantSpec(Spec):
    """Post-training quantization (Nagel et al., arXiv 2106.08295): BN folding, cross-layer equalisation, weight
    ranges, AdaRound, bias correction and activation ranges, then per-layer analysis."""

    source: SourceSpec = option(SourceSpec(), "The model to quantize: source.run takes a training run's model, its best (else last) checkpoint and its dataset.")
    model: ModelSpec = option(ModelSpec(), "The model to quantize when there is no source.run; model.checkpoint names its trained weights.")
    dataset: DataSpec = option(DataSpec(), "Calibration and evaluation data; with source.run, fields left at their defaults take the run's values.")
    weights: WeightQuantSpec = option(WeightQuantSpec(), "How weights are quantized.")
    activations: ActivationQuantSpec = option(ActivationQuantSpec(), "How activations are quantized.")
    fold_bn: bool = option(True, "Fold each BatchNorm into the convolution or linear layer before it.")
    cle: bool = option(False, "Cross-layer equalisation with bias absorption: rescale layers joined by ReLUs so their per-channel weight ranges match (the FP32 function is kept).")
    bias_correction: Literal["none", "empirical", "analytical"] = option("none", "Correct the shift quantized weights cause in each layer's mean output: empirical (measured on the calibration set) or analytical (from BatchNorm statistics, measured where there are none).")
    adaround: AdaRoundSpec = option(AdaRoundSpec(), "Learned rounding of the weights.")
    calibration: CalibrationSpec = option(CalibrationSpec(), "The calibration subset.")
    qat: QatSpec = option(QatSpec(), "Quantization-aware training after the post-training steps.")
    sensitivity: bool = option(False, "Measure each layer's accuracy with only it quantized and with all but it quantized.")
    mixed_precision: MixedPrecisionSpec = option(MixedPrecisionSpec(), "Mixed-precision proposal (target_drop) or per-layer bit widths to apply (layers).")
    eval_samples: int = option(0, "Held-out (test split) samples that accuracy is measured on; 0 uses the whole test split.", min=0, max=MAX_SAMPLES)
    batch_size: int = option(128, "Samples per forward pass when calibrating and evaluating.", min=1, max=MAX_BATCH)
    device: str = _device("auto", "Where to calibrate and evaluate: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.file:
            raise SpecError(f"source.file: {self.source.file!r}: quantize works on a PyTorch model; give source.run, "
                            "or model with model.checkpoint")
        if self.source.run and self.model.checkpoint:
            raise SpecError(f"model.checkpoint: {self.model.checkpoint!r} and source.run {self.source.run!r} are both "
                            "given; the run gives the weights (its best, else last checkpoint), so set only one")
        if self.source.run and self.model != ModelSpec():
            raise SpecError(f"model: source.run {self.source.run!r} gives the model spec, so leave model unset, or drop "
                            "source.run and set model with model.checkpoint")


@dataclass
class ExportSpec(Spec):
    """Export a model to one deployment format and check its outputs against eager PyTorch (parity)."""

    source: SourceSpec = option(SourceSpec(), "The model to export: source.run takes a training run's model and its best (else last) checkpoint (for onnx_qdq, a quantize run: its scales and zero points). Empty: model.* describes it.")
    model: ModelSpec = option(ModelSpec(), "The model to export when there is no source.run (model.checkpoint names its weights, model.input_shape its input).")
    dataset: DataSpec = option(DataSpec(), "Real samples for the parity check (and accuracy for onnx_qdq); with source.run, fields left at their defaults take the run's values.")
    format: Literal["torchscript", "exported_program", "onnx", "onnx_qdq", "tensorrt"] = option("onnx", "What to write: torchscript (.pt), exported_program (torch.export, .pt2), onnx, onnx_qdq (QuantizeLinear/DequantizeLinear from a quantize run) or tensorrt (torch_tensorrt).")
    script: bool = option(False, "For torchscript: torch.jit.script instead of tracing (keeps data-dependent control flow).")
    opset: int = option(18, "ONNX opset version (onnx, onnx_qdq).", min=7, max=25)
    precision: Literal["fp32", "fp16", "int8"] = option("fp32", "For tensorrt: the engine's precision.")
    output: str = option("", "Where to write the exported file; empty writes it into the run's artifacts.")
    dynamic_batch: bool = option(True, "Let the exported model take any batch size.")
    dynamic_axes: list[str] = option([], "Which input dimensions the exported model lets vary: batch (the first) and, for token sequences, sequence (the second dimension of every integer input). Empty: batch where dynamic_batch is true.", choices=["batch", "sequence"], max_items=2)
    verify: bool = option(True, "Check the export against eager PyTorch on random inputs and, where there is a dataset, real samples; when it fails, find the first layer whose output diverges.")
    parity_samples: int = option(32, "Real samples (and random inputs) the parity check runs.", min=1, max=MAX_SAMPLES)
    device: str = _device("cpu", "Where to trace, export and check: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.run and self.model.checkpoint:
            raise SpecError(f"model.checkpoint: {self.model.checkpoint!r} and source.run {self.source.run!r} are both "
                            "given; the run gives the weights, so set only one")
        if self.format == "onnx_qdq" and not self.source.run:
            raise SpecError("source.run: onnx_qdq takes its scales and zero points from a quantize run; name one")


@dataclass
class BenchSpec(Spec):
    """Measure latency percentiles, throughput and peak memory of a model on one or more backends."""

    source: SourceSpec = option(SourceSpec(), "The model to measure: source.run takes a training run's model and checkpoint (a quantize run also gives the QDQ model for onnxruntime_int8); source.file an exported file. Empty: model.* describes it.")
    model: ModelSpec = option(ModelSpec(), "The model to measure when there is no source (model.input_shape gives its input).")
    artifact: str = option("", "An exported file to measure (.onnx, .pt2 or TorchScript .pt) beside or instead of the PyTorch model.")
    backends: list[str] = option(["eager"], "Backends to measure: eager, compile, torchscript, exported_program, onnxruntime, onnxruntime_int8 (QDQ) and/or tensorrt. One that cannot run here is reported as unavailable, with the reason.", choices=BENCH_BACKENDS, min_items=1)
    batch_sizes: list[int] = option([1], "Batch sizes to measure, e.g. 1,8,64.", min=1, max=MAX_BATCH, min_items=1)
    dtype: Literal["float32", "float16", "bfloat16"] = option("float32", "Input and weight dtype (float16 and bfloat16 change the numerics).")
    warmup: int = option(10, "Untimed iterations before measuring.", min=0, max=MAX_STEPS)
    iters: int = option(100, "Timed iterations per backend and batch size (at least; see min_time_s).", min=1, max=MAX_STEPS)
    min_time_s: float = option(0.0, "Keep timing until this many seconds have passed as well; 0 times exactly iters.", min=0, max=86_400)
    threads: int = option(0, "CPU threads for inference (torch and onnxruntime); 0 keeps their defaults.", min=0, max=MAX_PROCESSES)
    dataset: DataSpec = option(DataSpec(), "Data whose sample shape the inputs take when model.input_shape is empty.")
    device: str = _device("cpu", "Where to run: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.file and self.artifact:
            raise SpecError(f"artifact: {self.artifact!r} and source.file {self.source.file!r} are both given; name the file once")


@dataclass
class GraphSpec(Spec):
    """Show a model's graph in Model Explorer."""

    source: SourceSpec = option(SourceSpec(), "Where the model comes from: source.run takes a training run's model and its best (else last) checkpoint; source.file reads a saved ExportedProgram (.pt2) or an ONNX file. Empty: model.* describes it.")
    model: ModelSpec = option(ModelSpec(), "The model whose graph to show when there is no source; with source.run, a non-empty model.input_shape overrides the run's.")
    dataset: DataSpec = option(DataSpec(), "Data whose sample shape the graph is traced at when model.input_shape is empty and there is no source.run.")
    const_element_count_limit: int = option(16, "Constants with more elements than this are shown without their values.", min=0)
    port: int = option(0, "On the command line: serve the built graph in Model Explorer on this port of 127.0.0.1 until Ctrl+C; 0 serves only with open_browser, on a free port.", min=0, max=65535)
    open_browser: bool = option(False, "On the command line: serve the built graph (see port) and open it in the system web browser.")
    quant_run: str = option("", "A quantize run (its id or folder) whose per-layer SQNR to paint on the graph; source.run defaults to that run's training run.")

    def validate(self) -> None:
        self.quant_run = self.quant_run.strip()


@dataclass
class DataInfoSpec(Spec):
    """Describe a dataset: sizes, classes, shapes and statistics (`workbench data info`)."""

    dataset: DataSpec = option(DataSpec(), "The dataset to describe.")


MAX_TOP_K = 1000  # rows of a top-k table; a longer list is the whole output, which nobody reads one by one


@dataclass
class PredictSampleSpec(Spec):
    """A sample of the run's own dataset to predict instead of an image file (what the Data tab shows)."""

    split: str = option("", "The split the sample comes from: train, val or test. Empty: no sample (input names an image file).")
    index: int = option(0, "The sample's index within its split (the Data tab shows it as #index).", min=0, max=MAX_SAMPLES)

    def validate(self) -> None:
        self.split = self.split.strip()
        if self.split not in ("", "train", "val", "test"):
            raise SpecError(f"split: {self.split!r} is not a split; choose train, val or test (or leave it empty and "
                            "name an image file with input)")


@dataclass
class PredictSpec(Spec):
    """Try a run's model on one image (`workbench predict`): the top-k classes with their probabilities, and for a
    quantize run the FP32 model's beside the quantized model's."""

    source: SourceSpec = option(SourceSpec(), "The model to try: source.run names a training run (its best, else last checkpoint) or a quantize run (its quantized model, beside the FP32 model it came from).")
    input: str = option("", "An image file (PNG, JPEG, BMP, ...) to predict; it is converted to the model's channels, resized to its input size and normalised as the run's dataset was. Empty: use sample.")
    sample: PredictSampleSpec = option(PredictSampleSpec(), "A sample of the run's dataset to predict instead of an image file (sample.split and sample.index).")
    top_k: int = option(5, "How many of the most likely classes (or labels) to list.", min=1, max=MAX_TOP_K)
    preview: bool = option(False, "Also return the image as the model saw it (resized, channels converted, before normalisation) as a uint8 array: for the window, not the command line.")
    device: str = _device("cpu", "Where to run the model: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        self.input = self.input.strip()
        if self.source.file:
            raise SpecError(f"source.file: Try it runs a run's model; name a training or quantize run with source.run "
                            f"instead of {self.source.file!r}")
        # A missing run or input is the job's error (the default spec must validate, so a form can start from it).
        if self.input and self.sample.split:
            raise SpecError(f"input: {self.input!r} and sample.split {self.sample.split!r} are both given; predict an "
                            "image file or a sample of the dataset, not both")

# fmt: on

SPEC_TYPES: dict[str, type[Spec]] = {
    "train": TrainSpec,
    "quantize": QuantSpec,
    "export": ExportSpec,
    "bench": BenchSpec,
    "graph": GraphSpec,
    "data": DataInfoSpec,
    "lr-find": LrFindSpec,
    "predict": PredictSpec,
}


def spec_for(verb: str) -> type[Spec]:
    """The spec class of a job verb such as `train`."""
    try:
        return SPEC_TYPES[verb]
    except KeyError:
        raise SpecError(f"job: {verb!r} is not allowed; choose one of: {', '.join(SPEC_TYPES)}") from None
