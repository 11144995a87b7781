"""The metrics event's payload: one column of steps, values and times per metric, as raw buffers.

Columns, not rows: a batch of thousands of points costs a few array copies to send and to plot, never a
JSON number per point, and NaN or infinite values travel as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.protocol.arrays import array_from_buffer, array_to_buffer

if TYPE_CHECKING:  # numpy loads on the first array, not at start-up: the window paints sooner
    import numpy as np

Columns = dict[str, tuple["np.ndarray", "np.ndarray", "np.ndarray"]]  # name -> (steps, values, times)


def encode_metrics(columns: dict[str, tuple[list, list, list]]) -> tuple[dict, list[bytes]]:
    """Content and buffers of a metrics event from per-metric lists of steps, values and times."""
    import numpy as np

    buffers: list[bytes] = []
    series = []
    count = 0
    for name, (steps, values, times) in columns.items():
        series.append(
            {
                "name": name,
                "steps": array_to_buffer(np.asarray(steps, dtype=np.int64), buffers),
                "values": array_to_buffer(np.asarray(values, dtype=np.float64), buffers),
                "times": array_to_buffer(np.asarray(times, dtype=np.float64), buffers),
            }
        )
        count += len(steps)
    return {"series": series, "count": count}, buffers


def decode_metrics(content: dict, buffers: list[bytes]) -> Columns:
    """The columns of a metrics event (raises ProtocolError on a malformed one)."""
    columns: Columns = {}
    for item in content.get("series", []):
        columns[str(item["name"])] = (
            array_from_buffer(item["steps"], buffers),
            array_from_buffer(item["values"], buffers),
            array_from_buffer(item["times"], buffers),
        )
    return columns


def metric_rows(content: dict, buffers: list[bytes]) -> list[tuple[int, str, float, float]]:
    """The same event as (step, name, value, time) rows, in step order within each metric."""
    rows = []
    for name, (steps, values, times) in decode_metrics(content, buffers).items():
        rows.extend(zip(steps.tolist(), [name] * len(steps), values.tolist(), times.tolist()))
    return rows
