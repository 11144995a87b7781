"""The model registry: `register_model` / `list_models` / `get_model`, in the style of torchvision's
models/_api.py.

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
    "workbench.worker.lightning.build",
)

WORKBENCH = "workbench"  # trained by this package's own loop (training/session.py)
LIGHTNING = "lightning"  # trained by PyTorch Lightning's Trainer (lightning/route.py)


@dataclass(frozen=True)
class ModelEntry:
    name: str
    builder: Callable
    family: bool  # True: the name is a prefix, `name:<arg>`
    usage: str  # how the name is written, e.g. "torchvision:<arch>"
    description: str
    trainer: str = WORKBENCH  # which training route runs it: WORKBENCH or LIGHTNING
    # The model decides its own outputs: build_model does no num_classes, head or trial forward pass for it.
    owns_outputs: bool = False
    user_code: bool = False  # the name names a user's Python file: it is code, run only where trusted


MODELS: Registry[ModelEntry] = Registry("model", BUILTIN_MODULES, error=JobError)


def register_model(
    name: str,
    *,
    family: bool = False,
    usage: str = "",
    description: str = "",
    trainer: str = WORKBENCH,
    owns_outputs: bool = False,
    user_code: bool = False,
) -> Callable:
    """Register a builder under `name`; with `family=True`, `name:<arg>` names reach it with `arg`. `trainer`,
    `owns_outputs` and `user_code` are what callers ask of a name (see ModelEntry)."""
    if trainer not in (WORKBENCH, LIGHTNING):
        raise ValueError(f"model {name!r}: trainer must be {WORKBENCH!r} or {LIGHTNING!r}, not {trainer!r}")

    def decorator(fn: Callable) -> Callable:
        doc = description or (fn.__doc__ or "").strip().split("\n")[0]
        MODELS.add(
            name,
            ModelEntry(
                name,
                fn,
                family,
                usage or (f"{name}:<arg>" if family else name),
                doc,
                trainer=trainer,
                owns_outputs=owns_outputs,
                user_code=user_code,
            ),
        )
        return fn

    return decorator


def list_models() -> list[str]:
    """Every way to name a model, e.g. ["cnn", "file:<path.py>:<ClassOrFactory>", "mlp",
    "torchvision:<arch>"]."""
    return sorted(entry.usage for entry in MODELS.entries())


def find_model(name: str) -> tuple[ModelEntry, str] | None:
    """The registry entry for a model name and the argument after its family prefix, or None (no error)."""
    prefix, sep, arg = name.partition(":")
    entry = MODELS.lookup(prefix)
    if entry is not None and entry.family == bool(sep) and (arg or not sep):
        return entry, arg
    return None


def model_trainer(name: str) -> str:
    """The training route of a model name: its entry's trainer; WORKBENCH for a name no entry knows, whose
    error build_model words once the job's data and settings have been checked."""
    found = find_model(name)
    return found[0].trainer if found is not None else WORKBENCH


def is_user_code(name: str) -> bool:
    """Whether a model name names a user's own Python file (file:, lightning:)."""
    found = find_model(name)
    return found is not None and found[0].user_code


def get_model_builder(name: str) -> tuple[ModelEntry, str]:
    """The registry entry for a model name and the argument after its family prefix."""
    found = find_model(name)
    if found is not None:
        return found
    usages = list_models()
    hint = MODELS.hint(name)
    hint = f"{hint} " if hint.startswith("did you mean") else ""
    raise JobError(f"model.name: {name!r} is not a known model; {hint}use one of: {', '.join(usages)}")


def get_model(
    name: str,
    *,
    num_classes: int,
    input_shape: Sequence[int],
    weights: str = "",
    log: Callable[[str], None] | None = None,
    args: dict | None = None,
):
    """Build the bare network `name` names (no checkpoint, head or freezing; see build_model for those).
    `args` (model.args) reach the builders that take them: the user's own file, hf: and timm:."""
    entry, arg = get_model_builder(name)
    extra = {"args": dict(args)} if args else {}
    return entry.builder(
        arg,
        num_classes=num_classes,
        input_shape=tuple(input_shape),
        weights=weights,
        log=log or (lambda text: None),
        **extra,
    )
