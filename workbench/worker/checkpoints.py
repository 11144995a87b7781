"""Saving and loading checkpoints: state_dicts written atomically, read back with weights_only=True only.

Worker side (torch allowed); never imports Qt.
"""

from __future__ import annotations

import pickle
import pickletools
import re
import zipfile
from pathlib import Path
from typing import IO

import torch

from workbench.errors import CheckpointError
from workbench.runs import atomic_writer

_IMPORT_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX"}
_RESAVE = "re-save it with `torch.save(model.state_dict(), path)`"


def save_state_dict(obj: dict, path: str | Path) -> None:
    """Write `obj` to `path` so that a crash mid-write leaves the previous file (or none), never half a file."""
    if not isinstance(obj, dict):
        raise TypeError(f"save_state_dict expects a dict (a state_dict), not {type(obj).__name__}")
    path = Path(path)
    try:
        with atomic_writer(path) as f:
            torch.save(obj, f)
    except OSError as exc:
        raise CheckpointError(f"Cannot write checkpoint {path}: {exc.strerror or exc}.") from exc


def load_state_dict(path: str | Path, *, map_location: str | torch.device = "cpu") -> dict:
    """Load a state_dict (or a dict of them); anything that would need arbitrary unpickling is refused."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"Checkpoint {path} does not exist; check the path.")
    try:
        f = open(path, "rb")  # opened here so that only this OSError means "cannot read"
    except OSError as exc:
        raise CheckpointError(f"Cannot read checkpoint {path}: {exc.strerror or exc}.") from exc
    with f:
        try:
            obj = torch.load(f, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as exc:
            needs = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(exc))
            if not needs and not _imports_names(path):
                # Refused because the bytes are garbage, not code; torch's own text would suggest
                # weights_only=False, which is exactly the wrong advice here.
                raise _corrupt(path, "its pickle data is not valid") from exc
            detail = f" (it needs {needs[1]})" if needs else ""
            raise CheckpointError(
                f"Checkpoint {path} holds more than plain weights{detail}, such as a whole model object or "
                f"code. It was NOT loaded, because unpickling it could run code. If you trust it, {_RESAVE} "
                f"and load that file."
            ) from exc
        except Exception as exc:  # damaged files surface as RuntimeError, EOFError, OSError, KeyError, ...
            first_line = (str(exc).splitlines() or [""])[0][:200]
            raise _corrupt(path, f"{type(exc).__name__}: {first_line}".rstrip(": ")) from exc
    if not isinstance(obj, dict):
        raise CheckpointError(
            f"Checkpoint {path} is not a state_dict: it holds a {type(obj).__name__}, not a dict of "
            f"tensors; {_RESAVE}."
        )
    return obj


def _imports_names(path: Path) -> bool:
    """Whether the file's pickle imports classes or functions; walks opcodes, executes nothing."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                member = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
                if member is None:
                    return False
                with archive.open(member) as stream:
                    return _has_import_opcode(stream)
        with open(path, "rb") as stream:
            return _has_import_opcode(stream)
    except Exception:  # not a well-formed pickle: then it is damaged, not code
        return False


def _has_import_opcode(stream: IO[bytes]) -> bool:
    return any(op.name in _IMPORT_OPCODES for op, _, _ in pickletools.genops(stream))


def _corrupt(path: Path, reason: str) -> CheckpointError:
    return CheckpointError(
        f"Checkpoint {path} is truncated or not a PyTorch checkpoint ({reason}). "
        f"Pick another file, or re-save it from the model that made it."
    )
