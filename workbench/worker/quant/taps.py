"""Reading tensors out of the simulation model: a layer's inputs or outputs over the calibration batches (the
pass stops at that layer), per-channel means, and a layer's tail (its BatchNorm and activation) as a function.
Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx as fx
from torch import nn

from workbench.worker.models.build import call_model
from workbench.worker.quant.channels import channel_dim
from workbench.worker.quant.graph import Layer


class _Stop(Exception):
    """Raised by a hook once it has what it came for: the rest of the forward pass is not needed."""


def channel_mean(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Mean over every dimension except `dim`, in float64 (sums of many values)."""
    t = t.detach().double().movedim(dim, 0)
    return t.reshape(t.shape[0], -1).mean(dim=1)


@torch.no_grad()
def collect(
    run: Callable[[torch.Tensor], object],
    module: nn.Module,
    batches,
    *,
    inputs: bool,
    stop: bool = True,
    check_stop: Callable[[], None] | None = None,
) -> list[torch.Tensor]:
    """The module's input (or output) tensor for each batch, running `run` on each; stops the pass at the
    module."""
    found: list[torch.Tensor] = []

    def pre_hook(mod, args):
        found.append(args[0].detach().clone())
        if stop:
            raise _Stop

    def hook(mod, args, output):
        found.append(output.detach().clone())
        if stop:
            raise _Stop

    handle = module.register_forward_pre_hook(pre_hook) if inputs else module.register_forward_hook(hook)
    try:
        for x, _ in batches:
            if check_stop is not None:
                check_stop()
            try:
                call_model(run, x)
            except _Stop:
                pass
    finally:
        handle.remove()
    return found


@torch.no_grad()
def means(
    run: Callable[[torch.Tensor], object],
    modules: dict[str, nn.Module],
    batches,
    *,
    inputs: bool,
    check_stop: Callable[[], None] | None = None,
) -> dict[str, torch.Tensor]:
    """Per-channel means of every module's input (or output) over all batches, in one pass."""
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    handles = []

    def make(name, module):
        dim = channel_dim(module)

        def record(t):
            # Weighted by the number of values, so batches of different sizes average correctly.
            n = t.numel() // t.shape[dim]
            sums[name] = sums.get(name, 0) + channel_mean(t, dim) * n
            counts[name] = counts.get(name, 0) + n

        if inputs:
            return module.register_forward_pre_hook(lambda mod, args: record(args[0]))
        return module.register_forward_hook(lambda mod, args, out: record(out))

    for name, module in modules.items():
        handles.append(make(name, module))
    try:
        for x, _ in batches:
            if check_stop is not None:
                check_stop()
            call_model(run, x)
    finally:
        for handle in handles:
            handle.remove()
    return {name: (sums[name] / counts[name]).float() for name in sums}


def tail_function(gm: fx.GraphModule, layer: Layer) -> Callable[[torch.Tensor], torch.Tensor]:
    """What the graph does to a layer's output before its activation point (BatchNorm, activation), as a
    function."""
    steps = []
    for node in layer.tail:
        rest, kwargs = node.args[1:], dict(node.kwargs)
        if node.op == "call_module":
            module = gm.get_submodule(node.target)
            steps.append(lambda x, m=module, r=rest, k=kwargs: m(x, *r, **k))
        elif node.op == "call_function":
            steps.append(lambda x, f=node.target, r=rest, k=kwargs: f(x, *r, **k))
        else:
            steps.append(lambda x, name=node.target, r=rest, k=kwargs: getattr(x, name)(*r, **k))

    def tail(x: torch.Tensor) -> torch.Tensor:
        for step in steps:
            x = step(x)
        return x

    return tail
