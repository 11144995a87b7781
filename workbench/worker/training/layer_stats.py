"""Per-layer statistics while training: weight and gradient norms, the update-to-weight ratio, activation
mean, std and dead units, and 64-bin histograms of weights, gradients and activations, every
`layer_stats_every` steps.

Everything is computed on the device and read back in one copy per recorded step; between recorded steps no
hook is installed, so the other steps cost nothing. Each recorded step is one .npz file under the run's
layer_stats/ folder (workbench.layer_records). Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from workbench.layer_records import BINS, findings, record_from_rows

# What counts as a ReLU: nn.ReLU and nn.ReLU6 call these too, so modules and functional calls are seen alike.
_RELUS = {
    torch.relu,
    torch.relu_,
    nn.functional.relu,
    nn.functional.relu6,
    torch.Tensor.relu,
    torch.Tensor.relu_,
}
HISTOGRAM_SAMPLE = 1 << 18  # values counted per histogram at most (see _histogram)
_NORMS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def weighted_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The layers with a matrix or kernel of trainable weights (linear, conv, embedding), in model order."""
    layers = []
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if name and isinstance(weight, nn.Parameter) and weight.dim() >= 2 and weight.requires_grad:
            layers.append((name, module))
    return layers


class _ReluWatch(TorchFunctionMode):
    """During one recorded forward: each ReLU's input, when it is a weighted layer's output (or the output of
    the norm right after one), gives that layer's dead units. Seen before the ReLU runs, so an in-place one
    cannot hide them, and without tracing the model (fx would run the user's forward once more, side effects
    and all)."""

    def __init__(self, on_relu):
        super().__init__()
        self.on_relu = on_relu

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _RELUS and args and isinstance(args[0], torch.Tensor):
            self.on_relu(args[0])
        return func(*args, **(kwargs or {}))


def _histogram(values: torch.Tensor) -> torch.Tensor:
    """[low, high, 64 counts] of a tensor, on its device with no read-back (index_add, not bincount/histc).

    A tensor of more than HISTOGRAM_SAMPLE values is counted on an even stride through it, the counts scaled
    back to its size: the same shape within a fraction of a percent, and a resnet's recorded step costs a
    third less.
    """
    whole = values.detach().reshape(-1)
    total = whole.numel()
    if total == 0:
        return torch.zeros(BINS + 2, device=values.device)
    flat = whole[:: math.ceil(total / HISTOGRAM_SAMPLE)] if total > HISTOGRAM_SAMPLE else whole
    finite = torch.nan_to_num(flat.float(), nan=0.0, posinf=0.0, neginf=0.0)
    low, high = torch.aminmax(finite)
    if flat.numel() != total:  # the range is the whole tensor's (one cheap pass), where it is finite
        whole_low, whole_high = torch.aminmax(whole)
        low = torch.where(torch.isfinite(whole_low), whole_low.float(), low)
        high = torch.where(torch.isfinite(whole_high), whole_high.float(), high)
    width = torch.clamp(high - low, min=1e-30)
    index = ((finite - low) / width * BINS).long().clamp_(0, BINS - 1)
    counts = torch.zeros(BINS, device=values.device).index_add_(0, index, torch.ones_like(finite))
    if finite.numel() != total:
        counts *= total / finite.numel()
    return torch.cat([low.reshape(1), high.reshape(1), counts])


def _dead_fraction(output: torch.Tensor, unit_dim: int) -> torch.Tensor:
    """The share of units (channels, features) that are <= 0 for every sample and position of the batch."""
    moved = output.detach().movedim(unit_dim, 0).reshape(output.shape[unit_dim], -1)
    return (moved.amax(dim=1) <= 0).float().mean()


@dataclass
class _Pending:
    """A recorded step between its forward and its optimiser step."""

    step: int
    activations: dict = field(default_factory=dict)  # layer -> [mean, std, histogram...] device tensor
    dead: dict = field(default_factory=dict)  # layer -> device scalar
    before: dict = field(default_factory=dict)  # layer -> [weight_norm, grad_norm, weight hist, grad hist]
    weights: dict = field(default_factory=dict)  # layer -> the weights before the step (a device copy)
    hooks: list = field(default_factory=list)
    # id(tensor) -> (layer, the tensor, its unit dimension, its version counter): the outputs a ReLU may read,
    # during the first forward.
    produced: dict = field(default_factory=dict)
    watched: bool = False

    def unhook(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()


class LayerStats:
    """Records the layers of `model` every `every` steps (and at step 1): `begin`, `watch` around the step's
    first micro-batch, `after_backward` before the optimiser step, `finish` after it."""

    def __init__(self, model: nn.Module, every: int, *, activations: bool = True):
        self.every = every
        self.layers = weighted_layers(model)
        self.names = [name for name, _ in self.layers]
        self.activations = activations and bool(self.layers)  # off under torch.compile: hooks would recompile
        self.norms = [module for module in model.modules() if isinstance(module, _NORMS)]
        self.pending: _Pending | None = None
        self.warned: set[tuple[str, str]] = set()

    def wants(self, step: int) -> bool:
        return bool(self.every and self.layers) and (step == 1 or step % self.every == 0)

    # -- one recorded step ---------------------------------------------------------------------------
    def begin(self, step: int) -> None:
        """Before the step's first forward: hook the layers and norms (until the step's backward is done)."""
        pending = self.pending = _Pending(step)
        if not self.activations:
            return
        for name, module in self.layers:
            unit_dim = -1 if isinstance(module, (nn.Linear, nn.Embedding)) else 1
            pending.hooks.append(module.register_forward_hook(self._layer_hook(name, unit_dim)))
        for module in self.norms:
            pending.hooks.append(module.register_forward_hook(self._norm_hook))

    def watch(self):
        """Around the recorded step's first micro-batch: a context that sees its ReLUs (else does nothing)."""
        pending = self.pending
        if pending is None or not self.activations or pending.watched:
            return contextlib.nullcontext()
        pending.watched = True
        return _ReluWatch(self._on_relu)

    def _layer_hook(self, name: str, unit_dim: int):
        def hook(module, inputs, output) -> None:
            pending = self.pending
            if pending is None or name in pending.activations or not isinstance(output, torch.Tensor):
                return  # only the step's first micro-batch, and only a plain tensor output
            values = output.detach().float()
            pending.activations[name] = torch.cat(
                [values.mean().reshape(1), values.std().reshape(1), _histogram(values)]
            )
            pending.produced[id(output)] = (name, output, unit_dim, output._version)

        return hook

    def _norm_hook(self, module, inputs, output) -> None:
        # conv -> bn -> relu: the ReLU reads the norm's output, which stands for the conv's units.
        pending = self.pending
        source = pending.produced.get(id(inputs[0])) if pending is not None and inputs else None
        if (
            source is not None
            and source[1] is inputs[0]
            and source[3] == inputs[0]._version
            and isinstance(output, torch.Tensor)
        ):
            pending.produced[id(output)] = (source[0], output, source[2], output._version)

    def _on_relu(self, tensor: torch.Tensor) -> None:
        pending = self.pending
        entry = pending.produced.get(id(tensor)) if pending is not None else None
        # The same tensor changed in place since the layer wrote it (`out += identity` in a residual block) is
        # no longer that layer's output: its ReLU sees a sum, so it tells nothing of the layer's own units.
        if (
            entry is not None
            and entry[1] is tensor
            and entry[3] == tensor._version
            and entry[0] not in pending.dead
            and tensor.dim() >= 2
        ):
            unit_dim = entry[2] if entry[2] >= 0 else tensor.dim() - 1
            pending.dead[entry[0]] = _dead_fraction(tensor, unit_dim)

    def after_backward(self, grad_scale: float = 1.0) -> None:
        """After the step's last backward, before the optimiser: gradients (unscaled) and the weights they
        change."""
        pending = self.pending
        if pending is None:
            return
        pending.unhook()
        pending.produced.clear()  # the activations it held are autograd's to free
        for name, module in self.layers:
            weight = module.weight.detach()
            grad = module.weight.grad
            grad = (
                grad.detach().float() / grad_scale
                if grad is not None
                else torch.zeros_like(weight, dtype=torch.float)
            )
            pending.weights[name] = weight.float().clone()
            pending.before[name] = torch.cat(
                [
                    weight.float().norm().reshape(1),
                    grad.norm().reshape(1),
                    _histogram(weight),
                    _histogram(grad),
                ]
            )

    def discard(self) -> None:
        """Drop a recorded step that will not finish (a cancel between its forward and its optimiser step)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.unhook()

    def finish(self, read, *, lr: float = math.nan, lr_peak: float = math.nan) -> dict | None:
        """After the optimiser step: the update ratios, then one read-back (`read`: device tensor -> host
        tensor). Returns the step's record (workbench.layer_records), or None when no step was pending."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        pending.unhook()  # a step cancelled between forward and backward still has them
        if not pending.before:
            return None
        nan = torch.full((1,), math.nan, device=pending.before[self.names[0]].device)
        empty = torch.cat([nan, nan, torch.full((BINS + 2,), math.nan, device=nan.device)])
        rows = []
        for name, module in self.layers:
            before = pending.before[name]
            update = (module.weight.detach().float() - pending.weights[name]).norm().reshape(1) / before[
                0
            ].clamp(min=1e-30)
            activation = pending.activations.get(name, empty)
            dead = pending.dead.get(name, nan[0]).reshape(1)
            rows.append(torch.cat([before[:2], update, activation[:2], dead, before[2:], activation[2:]]))
        host = read(torch.stack(rows)).double().numpy()
        return record_from_rows(pending.step, self.names, host, lr=lr, lr_peak=lr_peak)

    def new_warnings(self, record: dict) -> list[str]:
        """Sentences for the log, each (layer, kind) once a run."""
        said = []
        for layer, kind, text in findings(record):
            if (layer, kind) not in self.warned:
                self.warned.add((layer, kind))
                said.append(text)
        return said
