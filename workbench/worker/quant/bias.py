"""Bias correction (the white paper's section 4.2): quantized weights shift each layer's mean output by
E[(W_q - W) x]; subtract that shift from the bias. Empirical: measured on the calibration set, layer by layer
so each layer sees the corrections before it. Analytical: (W_q - W) E[x], with E[x] from the BatchNorm
statistics of the layer before (through a ReLU: E[ReLU(y)] for y ~ N(beta, gamma^2)), or measured where there
are none. An embedding has no bias and takes ids, not values: it is left out. Worker side; never imports Qt.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from workbench.worker.quant.graph import EMBEDDINGS, TRANSPOSED, in_channels, out_channels, producer
from workbench.worker.quant.sim import QuantSim
from workbench.worker.quant.taps import channel_dim, channel_mean, collect, means


def relu_mean(mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """E[ReLU(y)] for y ~ N(mean, std^2): std phi(mean/std) + mean Phi(mean/std)."""
    std = std.clamp(min=1e-12)
    t = mean / std
    pdf = torch.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + torch.erf(t / math.sqrt(2)))
    return std * pdf + mean * cdf


def output_shift(module: nn.Module, delta_w: torch.Tensor, expected_input: torch.Tensor) -> torch.Tensor:
    """(W_q - W) E[x] per output channel; a conv's kernel sums over its window (padding is ignored). A
    transposed conv spreads each input over its whole kernel, one tap per output position of a stride's phase:
    averaged over the output, an output channel gets the kernel's sum divided by the stride's product."""
    groups = getattr(module, "groups", 1)
    if isinstance(module, TRANSPOSED):
        # (in, out / groups, *k) -> (groups, in / groups, out / groups): input i of group g is [g, i].
        d = delta_w.reshape(groups, delta_w.shape[0] // groups, delta_w.shape[1], -1).sum(dim=3).double()
        e = expected_input.double().reshape(groups, -1)
        return (torch.einsum("gio,gi->go", d, e).reshape(-1) / math.prod(module.stride)).float()
    out = delta_w.shape[0]
    d = delta_w.reshape(groups, out // groups, delta_w.shape[1], -1).sum(dim=3).double()
    e = expected_input.double().reshape(groups, -1)
    return torch.einsum("goi,gi->go", d, e).reshape(out).float()


def _bias_of(wq) -> torch.Tensor:
    if wq.b_q is None:
        wq.b_q = torch.zeros(out_channels(wq.module), device=wq.w_fp.device)
    return wq.b_q


def _correctable(sim: QuantSim) -> dict:
    """The weight quantizers whose layer has a bias to correct (every one but embeddings)."""
    return {name: wq for name, wq in sim.weights.items() if not isinstance(wq.module, EMBEDDINGS)}


def empirical(
    sim: QuantSim,
    batches,
    check_stop: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float]:
    """Correct every layer's bias so its mean output on the calibration set matches FP32. Returns the mean
    absolute shift removed per layer."""
    correctable = _correctable(sim)
    modules = {name: wq.module for name, wq in correctable.items()}
    with sim.keeping():
        sim.fp32()
        reference = means(sim, modules, batches, inputs=False, check_stop=check_stop)
        removed = {}
        for k, (name, wq) in enumerate(correctable.items()):
            sim.all(activations=False)  # every layer quantized, the ones before corrected already
            outputs = collect(sim, wq.module, batches, inputs=False, check_stop=check_stop)
            dim = channel_dim(wq.module)
            count = sum(t.numel() // t.shape[dim] for t in outputs)
            measured = sum(channel_mean(t, dim) * (t.numel() // t.shape[dim]) for t in outputs) / count
            shift = (measured.float() - reference[name]).to(wq.w_fp.device)
            wq.b_q = _bias_of(wq) - shift
            removed[name] = float(shift.abs().mean())
            if progress is not None:
                progress(k + 1, len(correctable))
    return removed


def analytical(sim: QuantSim, batches, check_stop: Callable[[], None] | None = None) -> dict[str, str]:
    """Correct every layer's bias by (W_q - W) E[x]. Returns, per layer, where E[x] came from: "bn" or
    "data"."""
    correctable = _correctable(sim)
    modules = {name: wq.module for name, wq in correctable.items()}
    with sim.keeping():
        sim.fp32()
        measured = means(sim, modules, batches, inputs=True, check_stop=check_stop)
    source = {}
    for name, wq in correctable.items():
        layer = sim.structure.layers[name]
        before, relu = producer(sim.gm, sim.structure, layer)
        stats = sim.folded.get(before.name) if before is not None else None
        if stats is not None and in_channels(wq.module) == out_channels(before.module):
            mean, std = stats["mean"], stats["std"]
            expected = relu_mean(mean, std) if relu else mean
            source[name] = "bn"
        else:
            expected = measured[name]
            source[name] = "data"
        shift = output_shift(wq.module, wq.w_q - wq.w_fp, expected.to(wq.w_fp.device))
        wq.b_q = _bias_of(wq) - shift
    sim.refresh()
    return source
