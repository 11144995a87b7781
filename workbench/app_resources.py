"""Finds the files the package carries (app icon, desktop entry, sample specs) through importlib.resources.

They live in workbench/resources/ (the repository's top-level `resources` is a link to it), so an installed
wheel, an editable install and a clone all find them the same way, never through a path relative to a
checkout. No torch, no Qt: the GUI, the command line and `workbench desktop install` all import this.
"""

from __future__ import annotations

import atexit
import contextlib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

__all__ = [
    "APP_ID",
    "ICON_SIZES",
    "JOB_VERBS",
    "SAMPLE_SPECS",
    "desktop_entry_text",
    "example_specs",
    "icon_path",
    "resource_path",
    "sample_spec",
    "sample_specs",
    "spec_summary",
    "spec_verb",
]

APP_ID = "torch-workbench"  # the desktop entry's and the icon's name in the XDG folders
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# The sample specs in the order a menu lists them: the job verb each one is for, and its file.
SAMPLE_SPECS = {
    "train-digits.toml": "train",
    "train-cifar10-resnet18.toml": "train",
    "quantize-w8a8.toml": "quantize",
    "quantize-w4a8.toml": "quantize",
    "export-onnx.toml": "export",
    "bench-cpu.toml": "bench",
}

_extracted = contextlib.ExitStack()  # files unpacked from a zipped install, removed when the process exits
atexit.register(_extracted.close)


def _root() -> Traversable:
    return resources.files("workbench") / "resources"


def resource_path(*parts: str) -> Path:
    """A real file for workbench/resources/<parts>: the file itself for any ordinary install (a zipped one
    gets a temporary copy that lives as long as the process). FileNotFoundError names what is missing."""
    item = _root()
    for part in parts:  # Python 3.10's joinpath takes one part at a time
        item = item / part
    if not item.is_file():
        raise FileNotFoundError(
            f"workbench/resources/{'/'.join(parts)}: not in this installation of the workbench"
        )
    if isinstance(item, Path):
        return item
    return _extracted.enter_context(resources.as_file(item))


def icon_path(size: int | None = None) -> Path:
    """The app icon: the SVG when size is None, else the PNG of that many pixels (one of ICON_SIZES)."""
    if size is None:
        return resource_path("icons", f"{APP_ID}.svg")
    if size not in ICON_SIZES:
        raise ValueError(
            f"icon size {size!r}: choose one of {', '.join(map(str, ICON_SIZES))} or None for the SVG"
        )
    return resource_path("icons", f"{APP_ID}-{size}.png")


def sample_specs(verb: str | None = None) -> list[Path]:
    """The commented sample specs (train, quantize, export, bench), in menu order; only `verb`'s when
    given."""
    return [
        resource_path("specs", name) for name, for_verb in SAMPLE_SPECS.items() if verb in (None, for_verb)
    ]


def example_specs() -> list[Path]:
    """The bundled examples' train specs (resources/examples/<name>/train.toml), by example name; each names
    its Dataset and model beside it with relative `file:` or `lightning:` paths."""
    folder = _root() / "examples"
    if not folder.is_dir():
        return []
    names = sorted(
        item.name for item in folder.iterdir() if item.is_dir() and (item / "train.toml").is_file()
    )
    return [resource_path("examples", name, "train.toml") for name in names]


def sample_spec(name: str) -> Path:
    """One sample spec by file name, with or without .toml: `sample_spec("train-digits")`."""
    name = name if name.endswith(".toml") else f"{name}.toml"
    if name not in SAMPLE_SPECS:
        raise FileNotFoundError(f"sample spec {name!r}: choose one of {', '.join(SAMPLE_SPECS)}")
    return resource_path("specs", name)


def spec_summary(path: str | Path) -> str:
    """A spec file's opening comment line (what it does), for a menu's tooltip; "" when it has none."""
    try:
        with open(path, encoding="utf-8-sig") as file:
            first = file.readline().strip()
    except (OSError, UnicodeDecodeError):
        return ""
    return first.lstrip("#").strip() if first.startswith("#") else ""


def desktop_entry_text() -> str:
    """The desktop entry as shipped (Exec=workbench gui); `workbench.desktop.install` points Exec at this
    install."""
    return resource_path(f"{APP_ID}.desktop").read_text(encoding="utf-8")


JOB_VERBS = ("train", "quantize", "export", "bench")  # the jobs a spec file can open a wizard for
_PREFIXES = {"train": "train", "quant": "quantize", "export": "export", "bench": "bench"}


def spec_verb(path: str | Path) -> str:
    """Which job a spec file is for (train, quantize, export or bench), so File ▸ Open spec… knows its wizard.

    A sample spec's is known; otherwise a file name starting with the verb (quantize-…, bench_…) decides;
    otherwise the one job whose spec the file parses as (a run's spec.toml holds every field, so only its own
    job fits). SpecError when the file is unreadable or fits several jobs or none.
    """
    from workbench.errors import SpecError
    from workbench.specs import spec_for

    path = Path(path)
    if path.name in SAMPLE_SPECS and path.parent.name == "specs":
        return SAMPLE_SPECS[path.name]
    stem = path.stem.lower()
    for prefix, verb in _PREFIXES.items():
        if stem.startswith(prefix):
            return verb
    fits, errors = [], []
    for verb in JOB_VERBS:
        try:
            spec_for(verb).load(path)
        except SpecError as exc:
            errors.append(str(exc))
        else:
            fits.append(verb)
    if len(fits) == 1:
        return fits[0]
    if fits:
        raise SpecError(
            f"{path}: fits several jobs ({', '.join(fits)}); start its file name with the one you mean, "
            f"e.g. {fits[0]}-{path.name}"
        )
    raise SpecError(
        errors[0]
        if all("invalid TOML" in e or "no such file" in e for e in errors)
        else f"{path}: not a train, quantize, export or bench spec ({errors[0]})"
    )
