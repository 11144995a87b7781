"""The user's LightningModule and LightningDataModule classes: `lightning:<path.py>:<Class>` names parsed, the
file imported the way `file:` models are (announced: it runs with the user's permissions), each class checked
and instantiated with one-line JobErrors naming the file, the class and what is wrong. Worker side; never
imports Qt.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from workbench.errors import JobError
from workbench.worker.lightning import PREFIX, require_lightning
from workbench.worker.models.user_code import _describe, _where, import_user_file

REQUIRED_HOOKS = ("training_step", "configure_optimizers")


def parse_name(name: str, field: str, what: str) -> tuple[Path, str]:
    """lightning:<path.py>:<Class> -> (absolute path, Class); a JobError naming `field` when malformed or
    missing."""
    text = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    path_text, _, attr = text.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if not path_text or not attr.isidentifier():
        raise JobError(f"{field}: {name!r} must be lightning:<path.py>:<{what}>")
    path = Path(path_text).expanduser().absolute()
    if not path.is_file():
        raise JobError(f"{field}: the {what} file {path} does not exist")
    return path, attr


def _load_class(name: str, field: str, what: str, base: type, log, announced: set):
    path, attr = parse_name(name, field, what)
    if str(path) not in announced:  # once per file and job: a module and its DataModule often share one
        announced.add(str(path))
        log(f"running user code from {path} (it runs with your permissions)")
    try:
        module = import_user_file(path)
    except JobError as exc:
        raise JobError(
            str(exc).replace("while importing the model file", f"while importing the {what} file")
        ) from None
    target = getattr(module, attr, None)
    if not (inspect.isclass(target) and issubclass(target, base)):
        found = sorted(
            n
            for n, v in vars(module).items()
            if inspect.isclass(v) and issubclass(v, base) and v is not base and not n.startswith("_")
        )
        if target is None:
            why = "is not defined there"
        else:
            why = (
                f"is a {type(target).__name__ if not inspect.isclass(target) else 'class'}, not a "
                f"{base.__name__}"
            )
        raise JobError(
            f"{field}: {attr!r} in {path} {why}; the {base.__name__} classes it defines: "
            f"{', '.join(found) or 'none'}"
        )
    return target, path


def _instantiate(cls, args: dict, path: Path, field: str):
    try:
        return cls(**args)
    except TypeError as exc:
        # the call itself: wrong arguments
        if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
            raise JobError(
                f"{field}: {cls.__name__}({', '.join(f'{k}=' for k in args)}) from {path} cannot be called "
                f"so ({exc}); check its arguments"
            ) from None
        raise JobError(
            f"{_where(exc, path)}: {_describe(exc)} (while creating {cls.__name__} from {path})"
        ) from None
    except Exception as exc:
        raise JobError(
            f"{_where(exc, path)}: {_describe(exc)} (while creating {cls.__name__} from {path})"
        ) from None


def overrides(obj, hook: str, base: type) -> bool:
    """Whether `obj`'s class defines `hook` itself rather than inheriting Lightning's placeholder."""
    return getattr(type(obj), hook, None) is not getattr(base, hook, None)


def load_module(name: str, log, *, args: dict | None = None, announced: set | None = None):
    """An instance of the user's LightningModule class, checked for the hooks training needs."""
    lightning = require_lightning()
    base = lightning.LightningModule
    cls, path = _load_class(
        name, "model.name", "LightningModule", base, log, announced if announced is not None else set()
    )
    missing = [hook for hook in REQUIRED_HOOKS if getattr(cls, hook, None) is getattr(base, hook, None)]
    if missing:
        raise JobError(
            f"model.name: {cls.__name__} in {path} does not define {' or '.join(missing)}; a "
            f"LightningModule needs training_step (returning the loss) and configure_optimizers "
            f"(returning its optimizer) to be trained"
        )
    return _instantiate(cls, dict(args or {}), path, "model.args")


def load_datamodule(name: str, args: dict, log, *, announced: set | None = None):
    """An instance of the user's LightningDataModule class, called with dataset.args."""
    lightning = require_lightning()
    cls, path = _load_class(
        name,
        "dataset.name",
        "LightningDataModule",
        lightning.LightningDataModule,
        log,
        announced if announced is not None else set(),
    )
    return _instantiate(cls, dict(args), path, "dataset.args")
