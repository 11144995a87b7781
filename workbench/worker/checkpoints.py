"""Saving and loading checkpoints: state_dicts written atomically, read back with weights_only=True only.

Worker side (torch allowed); never imports Qt.
"""

from __future__ import annotations

import errno
import pickle
import pickletools
import re
import shutil
import zipfile
from pathlib import Path
from typing import IO

import torch

from workbench.errors import CheckpointError
from workbench.runs import atomic_writer

_IMPORT_OPCODES = {"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX"}
_RESAVE = "re-save it with `torch.save(model.state_dict(), path)`"


def save_state_dict(obj: dict, path: str | Path, *, name: str | None = None) -> None:
    """Write `obj` to `path` so that a crash mid-write leaves the previous file (or none), never half a file.

    `name` is how error messages call the file (e.g. checkpoints/last.pt, relative to its run); default:
    `path`. A full disk is a CheckpointError that says so, whichever way torch reports it.
    """
    if not isinstance(obj, dict):
        raise TypeError(f"save_state_dict expects a dict (a state_dict), not {type(obj).__name__}")
    path = Path(path)
    name = name or str(path)
    try:
        with atomic_writer(path) as f:
            try:
                torch.save(obj, f)
            except Exception as exc:
                # Classified here, while the partial temp file still fills the disk: once atomic_writer has
                # removed it, the free space is back and a full disk no longer looks full.
                if _disk_full(exc, path.parent, _payload_bytes(obj)):
                    raise _DiskFull from exc
                raise
            _check_written(f, name)
    except _DiskFull as marker:  # the temp file is removed by now, so the message reports the real free space
        raise _disk_full_error(path, name, obj) from marker.__cause__
    except (OSError, RuntimeError) as exc:  # flush, fsync, rename, or torch's wrapping of a failed write
        if _disk_full(exc, None, 0):
            raise _disk_full_error(path, name, obj) from exc
        cause = _chained_os_error(exc)
        if cause is None:
            raise  # not an I/O failure: a bug, left with its traceback
        raise CheckpointError(f"Cannot write checkpoint {name}: {cause.strerror or cause}.") from exc


def _check_written(f: IO[bytes], name: str) -> None:
    """A CheckpointError when torch.save left the file empty: a replaced torch.save (a user's module can patch
    it) returns without a word, and the run would read done with a checkpoint that holds nothing."""
    f.flush()
    if f.tell() == 0:
        raise CheckpointError(
            f"Cannot write checkpoint {name}: torch.save wrote 0 bytes (is torch.save "
            "replaced by the job's own code, "
            f"{getattr(torch.save, '__module__', '?')}.{getattr(torch.save, '__name__', '?')}?)."
        )  # noqa: E501


class _DiskFull(Exception):
    """Carries a disk-full verdict out of atomic_writer, which removes the temp file on the way."""


_DISK_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_MIN_FREE = 1 << 20  # below a MiB free, even a small checkpoint's zip records and fsync can fail
# What torch's zip writer says when the file object under it stopped taking bytes: it counts what it meant to
# write, finds the stream shorter, and fails with this instead of the OSError (which it chains, at best).
_TORCH_SHORT_WRITE = re.compile(
    r"unexpected pos|inline_container|PytorchStreamWriter failed|file write failed"
)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the errors it was raised from or while handling, innermost last."""
    chain: list[BaseException] = []
    error: BaseException | None = exc
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _chained_os_error(exc: BaseException) -> OSError | None:
    return next((error for error in _chain(exc) if isinstance(error, OSError)), None)


def _disk_full(exc: BaseException, directory: Path | None, needed: int) -> bool:
    """Whether `exc` (or an error it chains) means the disk or the quota is full; `directory` allows the
    free-space check that torch's bare RuntimeError needs."""
    chain = _chain(exc)
    if any(isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS for error in chain):
        return True
    short_write = any(
        isinstance(error, RuntimeError) and _TORCH_SHORT_WRITE.search(str(error)) for error in chain
    )
    if not short_write or directory is None:
        return False
    # torch's text alone also fits other write failures (a network file system dropping out, say), so ask the
    # disk: with the partial file still on it, a full disk has less room left than the checkpoint needs.
    try:
        free = shutil.disk_usage(directory).free
    except OSError:
        return False
    return free < max(needed, _MIN_FREE)


def _payload_bytes(obj) -> int:
    """About how many bytes torch.save writes for `obj`: its tensors' storage."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_payload_bytes(value) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_payload_bytes(value) for value in obj)
    return 0


def _megabytes(count: int) -> str:
    return f"{count / 2**20:,.1f} MB" if count >= 2**20 else f"{count / 2**10:,.0f} KB"


def _disk_full_error(path: Path, name: str, obj: dict) -> CheckpointError:
    if path.exists():
        kept = "the previous checkpoint is intact"
    else:
        kept = "no earlier copy of it existed, and no partial file is left"
    try:
        free = f"{_megabytes(shutil.disk_usage(path.parent).free)} free"
    except OSError:
        free = "free space unknown"
    return CheckpointError(
        f"disk full while saving {name}; {kept} (it needs about {_megabytes(_payload_bytes(obj))}, {free} on "
        f"{path.parent}). Free some space, then resume the run or start it again."
    )


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


def check_final_checkpoint(
    folder: Path, expected: dict, order: tuple[str, ...] = ("best.pt", "model.pt")
) -> None:
    """Load back, once at the end of a run, the checkpoint its later jobs will load (the first of `order` in
    `folder`), with their loader (weights only, on the CPU), and compare it with `expected`, the state_dict it
    was saved from: a CheckpointError naming the file when it does not load or does not hold those weights. A
    user's module that replaces torch.save can write garbage, or something other than the weights, that is not
    empty."""
    path = next((folder / name for name in order if (folder / name).is_file()), None)
    if path is None:
        return
    name = f"{folder.name}/{path.name}"
    try:
        loaded = load_state_dict(path, map_location="cpu")
    except CheckpointError as exc:
        # Only the loader's finding: its advice (pick another file) is for a file the user chose, not for this
        # one.
        finding = re.split(r"\.\s", str(exc), maxsplit=1)[0].rstrip(".")
        raise CheckpointError(
            f"{name} was saved but does not load back{_replaced_save()}: {finding}. The "
            "run is not done: its later jobs could not load it."
        ) from exc
    problem = _weights_problem(loaded, expected)
    if problem:
        raise CheckpointError(
            f"{name} was saved but does not hold the model's weights{_replaced_save()}: "
            f"{problem}. The run is not done: its later jobs could not load it."
        )


def _weights_problem(loaded: dict, expected: dict) -> str:
    """What differs between a loaded state_dict and the one it was saved from (names, shapes); "" when
    nothing."""
    missing = [key for key in expected if key not in loaded]
    extra = [key for key in loaded if key not in expected]
    if missing or extra:
        parts = [
            f"{len(missing)} of the model's {len(expected)} entries missing ({', '.join(missing[:3])})"
            if missing
            else "",
            f"{len(extra)} unknown ({', '.join(map(str, extra[:3]))})" if extra else "",
        ]
        return "; ".join(part for part in parts if part)
    for key, value in expected.items():
        got = loaded[key]
        if isinstance(value, torch.Tensor) and (
            not isinstance(got, torch.Tensor) or got.shape != value.shape
        ):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            return f"{key} is {shape}, not {tuple(value.shape)}"
    return ""


def _replaced_save() -> str:
    """ " (torch.save is replaced by x.y)" when the job's own code replaced torch.save, else ""."""
    save = torch.save
    if save is torch.serialization.save:
        return ""
    code = getattr(save, "__code__", None)
    where = f" from {code.co_filename}" if code is not None else ""
    return f" (torch.save is replaced by {getattr(save, '__qualname__', type(save).__name__)}{where})"


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
