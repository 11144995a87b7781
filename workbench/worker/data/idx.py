"""The IDX file format of MNIST-style datasets: checking a file's header before torchvision reads it, and
writing one.

Checking first lets a truncated or foreign file be named in a clear message instead of an assertion deep in
torchvision; writing lets tests and benchmarks make small real datasets. numpy only, no torch.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

UINT8_TYPE = 0x08


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array of 1 to 3 dimensions as an (uncompressed) IDX file."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8 or not 1 <= array.ndim <= 3:
        raise ValueError(
            f"IDX files here hold uint8 arrays of 1 to 3 dimensions, not {array.dtype} {array.shape}"
        )
    header = bytes([0, 0, UINT8_TYPE, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + array.tobytes())


def idx_problem(path: str | Path, ndim: int) -> str | None:
    """Why `path` is not a uint8 IDX file of `ndim` dimensions whose size matches its header, or None if it
    is."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(4 + 4 * ndim)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if len(head) < 4:
        return f"is too short to be an IDX file ({size} bytes)"
    if head[0] != 0 or head[1] != 0:
        return "does not start with an IDX header (it may still be gzip-compressed or be another file)"
    if head[2] != UINT8_TYPE:
        return f"holds IDX data of type 0x{head[2]:02x}; expected unsigned bytes (0x08)"
    if head[3] != ndim:
        return f"has {head[3]} dimensions; expected {ndim}"
    if len(head) < 4 + 4 * ndim:
        return "is truncated inside its header"
    shape = [int.from_bytes(head[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    expected = 4 + 4 * ndim + math.prod(shape)
    if size != expected:
        return (
            f"is {size} bytes but its header ({'x'.join(map(str, shape))}) needs {expected}; it is truncated "
            "or corrupt"
        )
    return None


def idx_length(path: str | Path) -> int:
    """The first dimension (the number of items) of an IDX file whose header has been checked."""
    with open(path, "rb") as f:
        head = f.read(8)
    return int.from_bytes(head[4:8], "big")
