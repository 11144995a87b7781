"""`file:<path.py>:<ClassOrFactory>`: a network from the user's own Python file, imported with importlib.

Running that file is running the user's code: it is announced once in the job's log. Syntax and import errors
come back as JobErrors with the file and line, never a traceback. Worker side; never imports Qt.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
import traceback
from pathlib import Path

from torch import nn

from workbench.errors import JobError
from workbench.worker.models.registry import register_model


def _where(exc: BaseException, path: Path) -> str:
    """'file, line N' of the deepest frame of the traceback inside the user's files (else the deepest)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}, line {exc.lineno}"
    frames = traceback.extract_tb(exc.__traceback__)
    folder = str(path.parent)
    mine = [f for f in frames if f.filename.startswith(folder)] or [
        f for f in frames if "importlib" not in f.filename
    ]
    frame = (mine or frames or [None])[-1]
    return f"{frame.filename}, line {frame.lineno}" if frame is not None else str(path)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        text = (exc.text or "").strip()
        return f"syntax error: {exc.msg}" + (f" in `{text}`" if text else "")
    return f"{type(exc).__name__}: {exc}"


def import_user_file(path: Path):
    """Import `path` as a fresh module (edits to the file count on every build)."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"workbench_user_model_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise JobError(f"model.name: {path} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look their module up here
    # The file's own folder first on sys.path, so `import helpers` next to it works as it would in a script.
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise JobError(
            f"{_where(exc, path)}: {_describe(exc)} (while importing the model file {path})"
        ) from None
    finally:
        try:
            sys.path.remove(str(path.parent))
        except ValueError:
            pass
    return module


def _rejects_arguments(target, args: dict) -> str:
    """The first of `args` that `target` has no parameter for ("" when it takes them all, or has **kwargs)."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return ""
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return ""
    return next((repr(name) for name in args if name not in params), "")


def _parameters(target) -> str:
    try:
        return ", ".join(inspect.signature(target).parameters) or "none"
    except (TypeError, ValueError):
        return "unknown"


def _accepts_num_classes(target) -> bool:
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == "num_classes" or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def num_classes_parameter(arg: str) -> tuple[bool, int | None, str]:
    """(whether the file's class or factory takes num_classes, its int default or None, the target's name):
    what a segmentation model says of its class count when the data does not. Imports the file (user code,
    trusted by the job that asks). A file that cannot be read says nothing here; building the model words its
    error."""
    path_text, _, attr = arg.rpartition(":")
    path = Path(path_text).expanduser().absolute()
    if not path_text or not attr or not path.is_file():
        return False, None, attr
    target = getattr(import_user_file(path), attr, None)
    try:
        param = inspect.signature(target).parameters.get("num_classes") if callable(target) else None
    except (TypeError, ValueError):
        param = None
    if param is None:
        return False, None, attr
    default = param.default
    takes_int = isinstance(default, int) and not isinstance(default, bool) and default > 0
    return True, default if takes_int else None, attr


@register_model(
    "file",
    family=True,
    usage="file:<path.py>:<ClassOrFactory>",
    user_code=True,
    description=(
        "A class or factory from your own Python file; it is called with num_classes= if it takes it."
    ),
)
def build_from_file(
    arg: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log, args: dict | None = None
) -> nn.Module:
    path_text, _, attr = arg.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if not path_text or not attr:
        raise JobError(f"model.name: 'file:{arg}' must be file:<path.py>:<ClassOrFactory>")
    if weights:
        raise JobError(
            "model.weights: a file: model has no pretrained weights to download; pass a trained "
            "state_dict as model.checkpoint instead"
        )
    path = Path(path_text).expanduser().absolute()
    if not path.is_file():
        raise JobError(f"model.name: the model file {path} does not exist")
    log(f"running user code from {path}")
    module = import_user_file(path)
    target = getattr(module, attr, None)
    if target is None or not callable(target):
        found = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        )
        what = "is not callable" if target is not None else "is not defined there"
        raise JobError(
            f"model.name: {attr!r} in {path} {what}; it defines: {', '.join(found) or 'nothing callable'}"
        )
    kwargs = dict(args or {})  # model.args; num_classes comes from the spec unless the user's args set it
    if _accepts_num_classes(target):
        kwargs.setdefault("num_classes", num_classes)
    try:
        model = target(**kwargs)
    except Exception as exc:
        rejected = _rejects_arguments(target, args) if args and isinstance(exc, TypeError) else ""
        if rejected:
            raise JobError(
                f"model.args: {attr} in {path} takes no argument {rejected}; its parameters are: "
                f"{_parameters(target)}"
            ) from None
        raise JobError(f"{_where(exc, path)}: {_describe(exc)} (while calling {attr} from {path})") from None
    if not isinstance(model, nn.Module):
        raise JobError(
            f"model.name: {attr} from {path} returned a {type(model).__name__}, not a torch.nn.Module"
        )
    return model
