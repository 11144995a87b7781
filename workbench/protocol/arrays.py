"""numpy arrays as raw message buffers: content carries {dtype, shape, buffer}, the bytes travel apart.

Only plain numeric dtypes are accepted on the way in, so a hostile peer cannot make us build object arrays.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from workbench.protocol.wire import ProtocolError

if TYPE_CHECKING:  # numpy loads on the first array, not at start-up: the window paints sooner
    import numpy as np

_ALLOWED_KINDS = frozenset("biuf")  # bool, signed, unsigned, float: never object or void


def array_to_buffer(array, buffers: list[bytes]) -> dict:
    """Append the array's bytes to `buffers` and return the descriptor that goes in content."""
    import numpy as np

    arr = np.asarray(array)  # not ascontiguousarray: that turns a 0-d array into a 1-d one
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    if arr.dtype.kind not in _ALLOWED_KINDS:
        raise TypeError(f"arrays of dtype {arr.dtype} cannot travel; use a numeric dtype")
    buffers.append(arr.tobytes())
    return {"dtype": arr.dtype.str, "shape": list(arr.shape), "buffer": len(buffers) - 1}


def array_from_buffer(desc: dict, buffers: list[bytes]) -> np.ndarray:
    """Rebuild an array from its descriptor, checking dtype, shape and size against the buffer."""
    import numpy as np

    try:
        dtype = np.dtype(desc["dtype"])
        shape = tuple(int(n) for n in desc["shape"])
        index = int(desc["buffer"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"bad array descriptor {desc!r}: {exc}") from None
    if dtype.kind not in _ALLOWED_KINDS:
        raise ProtocolError(f"array dtype {dtype} is not allowed")
    if any(n < 0 for n in shape):
        raise ProtocolError(f"array shape {shape} has a negative dimension")
    if not 0 <= index < len(buffers):
        raise ProtocolError(f"array refers to buffer {index}, but the message has {len(buffers)}")
    expected = math.prod(shape) * dtype.itemsize
    data = buffers[index]
    if len(data) != expected:
        raise ProtocolError(
            f"array buffer holds {len(data)} bytes, shape {shape} of {dtype} needs {expected}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def named_array(content: dict | None, buffers: list[bytes]) -> tuple[str, np.ndarray, dict] | None:
    """The parts of an `array` message a job sent with ctx.array: its name, the array and the rest of the
    content (the sender's metadata); None when the message is malformed, which a panel then ignores."""
    content = content or {}
    try:
        array = array_from_buffer(content["array"], buffers)
    except (ProtocolError, KeyError, TypeError):
        return None
    return (
        str(content.get("name", "")),
        array,
        {k: v for k, v in content.items() if k not in ("name", "array")},
    )
