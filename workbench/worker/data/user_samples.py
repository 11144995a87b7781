"""Samples of a user's own Dataset (`file:<path.py>:<Name>`): converting one, collating a batch, and the
one-line errors a bad sample gives.

Everything here runs inside DataLoader worker processes too, so it is picklable module-level code, and a
failure raises `SampleError`, whose text is already the line the user reads: the DataLoader re-raises it in
the main process wrapped in a traceback, and `clean_message` takes that line back out.
"""

from __future__ import annotations

import pickle
import re
import sys
import traceback
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, Subset, default_collate


class SampleError(Exception):
    """A sample (or a batch of them) of the user's dataset is bad; str() is the message for the user."""


_MARK = f"{SampleError.__module__}.{SampleError.__qualname__}: "


def clean_message(exc: BaseException) -> str | None:
    """The one-line text of a SampleError, raised here or re-raised by a DataLoader from a worker; else
    None."""
    if not isinstance(exc, SampleError):
        return None
    text = str(exc)
    # "Caught SampleError in DataLoader worker process 0.\nOriginal Traceback ...\n<mark>line"
    if _MARK in text:
        text = text.rsplit(_MARK, 1)[1]
    return text.strip().splitlines()[0] if text.strip() else "a sample failed"


def where(exc: BaseException, path: Path) -> str:
    """'file, line N' of the deepest frame of the traceback inside the user's file (else its folder, else the
    deepest frame that is not torch's or ours)."""
    frames = traceback.extract_tb(exc.__traceback__)
    exact = [f for f in frames if Path(f.filename) == path]
    folder = [f for f in frames if f.filename.startswith(str(path.parent))]
    outside = [f for f in frames if "/torch/" not in f.filename and "/workbench/" not in f.filename]
    frame = (exact or folder or outside or frames or [None])[-1]
    return f"{frame.filename}, line {frame.lineno}" if frame is not None else str(path)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def _float32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32) if t.dtype == torch.float64 else t


def _pil_to_tensor(image) -> torch.Tensor:
    """As torchvision's to_tensor (without importing torchvision, seconds of a worker's start): C×H×W, 8-bit
    modes as float32 in 0..1, mode "1" as 0/1, 16/32-bit integer and float modes as they are."""
    array = np.array(image)
    if array.dtype == np.bool_:
        tensor = torch.from_numpy(array.astype(np.float32))
    elif array.dtype == np.uint8:
        tensor = torch.from_numpy(array).to(torch.float32).div_(255)
    else:
        tensor = _float32(torch.as_tensor(array))
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(-1)
    return tensor.permute(2, 0, 1).contiguous()


def _is_pil(value) -> bool:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        return False
    return isinstance(value, Image.Image)


def convert_input(value, what: str):
    """A tensor (numpy: as_tensor; PIL: float32 C×H×W in 0..1 like torchvision's to_tensor; float64: float32),
    or a tuple / dict of them for a model with several inputs."""
    if isinstance(value, torch.Tensor):
        return _float32(value)
    if isinstance(value, np.ndarray | np.generic):
        return _float32(torch.as_tensor(value))
    if _is_pil(value):
        return _pil_to_tensor(value)
    if isinstance(value, tuple | list) and value:
        return tuple(convert_input(v, what) for v in value)
    if isinstance(value, dict) and value:
        return {k: convert_input(v, what) for k, v in value.items()}
    raise SampleError(
        f"{what}: its input is a {type(value).__name__}; an input must be a tensor, a numpy array, "
        "a PIL image, or a tuple or dict of them"
    )


def convert_target(value, what: str) -> torch.Tensor:
    """A tensor of the target: tensor, numpy array or scalar, Python number or bool, or a list of numbers."""
    if isinstance(value, torch.Tensor):
        return _float32(value)
    try:
        if isinstance(value, np.ndarray | np.generic | int | float | bool | list | tuple):
            return _float32(torch.as_tensor(value))
    except (TypeError, ValueError, RuntimeError) as exc:
        raise SampleError(f"{what}: its target cannot become a tensor ({one_line(exc)})") from None
    raise SampleError(
        f"{what}: its target is a {type(value).__name__}; a target must be a tensor, a numpy array, "
        "a number or a list of numbers"
    )


def unpack(sample, what: str) -> tuple:
    """(input, target) of a sample that is a pair or a dict with "input" and "target"."""
    if isinstance(sample, dict):
        missing = [key for key in ("input", "target") if key not in sample]
        if missing:
            keys = ", ".join(repr(k) for k in list(sample)[:8]) or "none"
            raise SampleError(
                f"{what} is a dict without {' and '.join(repr(m) for m in missing)} (its keys: {keys}); "
                "a sample must be (input, target) or a dict with 'input' and 'target'"
            )
        return sample["input"], sample["target"]
    if isinstance(sample, tuple | list) and len(sample) == 2:
        return sample[0], sample[1]
    if isinstance(sample, tuple | list):
        kind = f"a {type(sample).__name__} of {len(sample)} items"
    elif isinstance(sample, torch.Tensor):
        kind = f"a tensor of shape {shape_text(sample.shape)}"
    else:
        kind = f"a {type(sample).__name__}"
    raise SampleError(
        f"{what} is {kind}; a sample must be (input, target) or a dict with 'input' and 'target'"
    )


def shape_text(shape) -> str:
    return "×".join(str(int(n)) for n in shape) if len(shape) else "scalar"


def first_tensor(value) -> torch.Tensor:
    if isinstance(value, tuple):
        return first_tensor(value[0])
    if isinstance(value, dict):
        return first_tensor(next(iter(value.values())))
    return value


def _layout(value):
    """The structure and shapes of a converted input or target: comparable with ==, printable."""
    if isinstance(value, tuple):
        return tuple(_layout(v) for v in value)
    if isinstance(value, dict):
        return {k: _layout(v) for k, v in value.items()}
    return tuple(value.shape)


def _layout_text(layout) -> str:
    if isinstance(layout, tuple) and layout and not all(isinstance(n, int) for n in layout):
        return "(" + ", ".join(_layout_text(v) for v in layout) + ")"
    if isinstance(layout, dict):
        return "{" + ", ".join(f"{k}: {_layout_text(v)}" for k, v in layout.items()) + "}"
    return shape_text(layout)


class Origin:
    """Names a sample as the user knows it: its index in the dataset object the user's code returned. A split
    carved out of train (a Subset) maps its positions to the train dataset's indices."""

    def __init__(self, split: str, source):
        self.split = split
        self.origin = split
        self.indices = None
        if isinstance(source, Subset) and not isinstance(source.dataset, Subset):
            self.origin = getattr(source, "workbench_origin", split)
            self.indices = source.indices

    def index(self, position: int) -> int:
        return int(self.indices[position]) if self.indices is not None else int(position)

    def where(self) -> str:
        return f"the {self.origin} split" + (
            f" (read for the {self.split} split)" if self.origin != self.split else ""
        )

    def one(self, position: int) -> str:
        return f"sample {self.index(position)} of {self.where()}"

    def two(self, first: int, second: int) -> str:
        return f"samples {self.index(first)} and {self.index(second)} of {self.where()}"


class IndexedSamples(Dataset):
    """The user's dataset for one split, as (index, input, target) with both converted; a failing sample
    raises a SampleError naming the sample, the split and the user's file and line."""

    def __init__(self, source, split: str, label: str, path: Path):
        self.source = source
        self.split = split
        self.label = label
        self.path = path
        self.origin = Origin(split, source)

    def __len__(self) -> int:
        return len(self.source)

    def __reduce__(self):
        # A worker started by spawn or forkserver (macOS, Windows, Python 3.14) unpickles the user's objects
        # before anything imported their file, whose module name only the workbench knows: pickle them apart,
        # and import the file first in the worker.
        module = getattr(type(self._user_object()), "__module__", None)
        payload = pickle.dumps((self.source, self.split, self.label, self.path))
        return _rebuild, (str(self.path), module, payload)

    def _user_object(self):
        source = self.source
        while isinstance(source, Subset):
            source = source.dataset
        return source

    def what(self, index: int) -> str:
        return f"{self.label}: {self.origin.one(index)}"

    def __getitem__(self, index: int):
        what = self.what(index)
        try:
            sample = self.source[index]
        except Exception as exc:
            raise SampleError(
                f"{what} failed: {type(exc).__name__}: {one_line(exc)} ({where(exc, self.path)})"
            ) from None
        raw_input, raw_target = unpack(sample, what)
        return index, convert_input(raw_input, what), convert_target(raw_target, what)


def _rebuild(path: str, module: str | None, payload: bytes) -> IndexedSamples:
    if module and module not in sys.modules and module.startswith("workbench_user_"):
        from workbench.worker.models.user_code import import_user_file

        import_user_file(Path(path))
    return IndexedSamples(*pickle.loads(payload))


class Collate:
    """Batches (index, input, target) triples with default_collate, after checking that shapes agree."""

    def __init__(self, origin: Origin, label: str):
        self.origin = origin
        self.label = label

    def _check(self, items, position: int, kind: str) -> None:
        first_index, first = items[0][0], _layout(items[0][position])
        for item in items[1:]:
            layout = _layout(item[position])
            if layout != first:
                raise SampleError(
                    f"{self.label}: {self.origin.two(first_index, item[0])} have {kind} of different shapes "
                    f"({_layout_text(first)} and {_layout_text(layout)}): a batch needs equal shapes; resize "
                    "in the dataset or set batch_size=1"
                )

    def __call__(self, items):
        self._check(items, 1, "inputs")
        self._check(items, 2, "targets")
        indices = torch.tensor([item[0] for item in items], dtype=torch.int64)
        try:
            x = default_collate([item[1] for item in items])
            y = default_collate([item[2] for item in items])
        except Exception as exc:  # e.g. mixed dtypes torch cannot stack
            raise SampleError(
                f"{self.label}: {self.origin.two(int(indices[0]), int(indices[-1]))} and those "
                f"between them do not form a batch: {type(exc).__name__}: {one_line(exc)}"
            ) from None
        return indices, x, y


_PIDS = re.compile(
    r"DataLoader worker \(pid\(?s?\)? ?([\d, ]+)\) (is killed by signal: [^.\n]+|exited unexpectedly)"
)


def worker_death(exc: BaseException) -> tuple[str, str] | None:
    """(pids, how) of a RuntimeError torch raises when a DataLoader worker dies; None for anything else."""
    if not isinstance(exc, RuntimeError):
        return None
    match = _PIDS.search(str(exc))
    if match is None:
        return None
    return match.group(1).strip(), match.group(2).strip()
