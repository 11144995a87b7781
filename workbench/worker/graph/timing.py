"""Forward time per module, measured with torch.profiler: each module's call is a record_function range. The
overlay splits these inclusive times into self-times (a range minus its child modules' ranges, its own ops
included), as it does FLOPs. Worker side; never Qt.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

PREFIX = "module::"
WARMUP = 1
REPEATS = 3


def self_times_ms(
    model: nn.Module, inputs: Sequence[torch.Tensor], kwargs: dict | None = None
) -> dict[str, float]:
    """Mean inclusive CPU time in ms per named module over a few forwards of `inputs` (and `kwargs`, inputs
    taken by name), after a warm-up."""
    kwargs = kwargs or {}
    named = list(model.named_modules())
    ranges: dict[int, object] = {}

    def enter(name: str):
        def pre(module, args):
            ranges[id(module)] = record_function(PREFIX + name).__enter__()

        return pre

    def leave(module, args, output):
        scope = ranges.pop(id(module), None)
        if scope is not None:
            scope.__exit__(None, None, None)

    handles = []
    for name, module in named:
        handles.append(module.register_forward_pre_hook(enter(name)))
        handles.append(module.register_forward_hook(leave))
    try:
        with torch.no_grad():
            for _ in range(WARMUP):
                model(*inputs, **kwargs)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(REPEATS):
                    model(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    totals = {
        event.key[len(PREFIX) :]: event.cpu_time_total / 1000.0 / REPEATS
        for event in prof.key_averages()
        if event.key.startswith(PREFIX)
    }
    return totals
