"""The model registry: `register_model` / `list_models` / `get_model`, in the style of torchvision's models/_api.py.

A builder is `fn(arg, *, num_classes, input_shape, weights, log) -> nn.Module`; `arg` is what follows the
family prefix (`torchvision:<arch>` -> "<arch>"), "" for plain names. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from workbench.errors import JobError
from workbench.registry import Registry

BUILTIN_MODULES = (
    "workbench.worker.models.builtin",
    "workbench.worker.models.torchvision_models",
    "workbench.worker.models.user_code",
    "workbench.worker.models.hf",
    "workbench.worker.models.timm_models",
)


@dataclass(frozen=True)
class ModelEntry:
    name: str
    builder: Callable
    family: bool  # True: the name is a prefix, `name:<arg>`
    usage: str  # how the name is written, e.g. "torchvision:<arch>"
    description: str


MODELS: Registry[ModelEntry] = Registry("model", BUILTIN_MODULES, error=JobError)


def register_model(name: str, *, family: bool = False, usage: str = "", description: str = "") -> Callable:
    """Register a builder under `name`; with `family=True`, `name:<arg>` names reach it with `arg`."""

    def decorator(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        MODELS.add(name, ModelEntry(name, fn, family, usage or (f"{name}:<arg>" if family else name), doc))
        return fn

    return decorator


def list_models() -> list[str]:
    """Every way to name a model, e.g. ["cnn", "file:<path.py>:<ClassOrFactory>", "mlp", "torchvision:<arch>"]."""
    return sorted(entry.usage for entry in MODELS.entries())


def get_model_builder(name: str) -> tuple[ModelEntry, str]:
    """The registry entry for a model name and the argument after its family prefix."""
    prefix, sep, arg = name.partition(":")
    entry = MODELS.lookup(prefix)
    if entry is not None and entry.family == bool(sep) and (arg or not sep):
        return entry, arg
    usages = list_models()
    hint = MODELS.hint(name)
    hint = f"{hint} " if hint.startswith("did you mean") else ""
    raise JobError(f"model.name: {name!r} is not a known model; {hint}use one of: {', '.join(usages)}")


def get_model(name: str, *, num_classes: int, input_shape: Sequence[int], weights: str = "",
              log: Callable[[str], None] | None = None, args: dict | None = None):
    """Build the bare network `name` names (no checkpoint, head or freezing; see build_model for those). `args`
    (model.args) reach the builders that take them: the user's own file, hf: and timm:."""
    entry, arg = get_model_builder(name)
    extra = {"args": dict(args)} if args else {}
    return entry.builder(arg, num_classes=num_classes, input_shape=tuple(input_shape), weights=weights,
                         log=log or (lambda text: None), **extra)
