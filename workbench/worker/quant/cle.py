"""Cross-layer equalisation and bias absorption (Nagel et al. 2019, "Data-Free Quantization"; the white
paper's section 4.1): rescale consecutive layers so that their per-channel weight ranges match, then move what
a ReLU never lets through from one layer's bias into the next one's. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from workbench.worker.quant.graph import EMBEDDINGS, Pair, out_channels

# at most this many sweeps over all pairs; a layer between two pairs (a triplet) needs several
ITERATIONS = 200
CONVERGED = 1e-6  # a sweep that moves no scale by more than this ends them
ABSORB_SIGMAS = 3.0  # c = max(0, beta - 3 gamma): a ReLU input below c is rare enough to ignore


def output_ranges(module: nn.Module) -> torch.Tensor:
    """(C, 2): min and max of each output channel's weights (the paper's Figure 6)."""
    rows = module.weight.detach().reshape(module.weight.shape[0], -1)
    return torch.stack([rows.min(dim=1).values, rows.max(dim=1).values], dim=1)


def _by_group(weight: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """The weight as (groups, outputs per group, inputs per group, rest): input channel g * inputs + i is
    [g, :, i]. One group for a linear or a plain conv; a depthwise conv has one input per group."""
    groups = getattr(module, "groups", 1)
    return weight.reshape(groups, weight.shape[0] // groups, weight.shape[1], -1)


def _input_ranges(module: nn.Module) -> torch.Tensor:
    """Largest |weight| that reads each input channel (C_in,)."""
    return _by_group(module.weight.detach(), module).abs().amax(dim=(1, 3)).reshape(-1)


def _scale_inputs(module: nn.Module, scale: torch.Tensor) -> None:
    weight = module.weight.detach()
    grouped = _by_group(weight, module)
    scaled = grouped * scale.view(grouped.shape[0], 1, grouped.shape[2], 1)
    weight.copy_(scaled.reshape(weight.shape))


def ensure_bias(module: nn.Module) -> nn.Parameter | None:
    """The layer's bias, a zero one added where it has none; None for an embedding, which takes no bias."""
    if isinstance(module, EMBEDDINGS):
        return None
    if module.bias is None:
        module.bias = nn.Parameter(torch.zeros(out_channels(module), device=module.weight.device))
    return module.bias


def _range(module: nn.Module) -> torch.Tensor:
    """Largest |weight| of each output channel (C_out,)."""
    return module.weight.detach().reshape(module.weight.shape[0], -1).abs().max(dim=1).values


def _safe(scale: torch.Tensor, *ranges: torch.Tensor) -> torch.Tensor:
    # A dead channel (all zero weights on any side) has nothing to balance.
    alive = torch.stack([r > 0 for r in ranges]).all(dim=0) & torch.isfinite(scale) & (scale > 0)
    return torch.where(alive, scale, torch.ones_like(scale))


def is_depthwise(module: nn.Module) -> bool:
    """One input and one output channel per group: its output channel c reads input channel c only."""
    groups = getattr(module, "groups", 1)
    return groups > 1 and module.weight.shape[0] == groups and module.weight.shape[1] == 1


def _units(pairs: list[Pair], modules: dict[str, nn.Module]) -> list[tuple[Pair, ...]]:
    """The pairs in their order, a depthwise layer's two pairs (expand -> depthwise -> project) as one
    triplet."""
    by_second = {p.second: p for p in pairs}
    by_first = {p.first: p for p in pairs}
    units, used = [], set()
    for pair in pairs:
        if id(pair) in used:
            continue
        if is_depthwise(modules[pair.second]) and pair.second in by_first:
            unit = (pair, by_first[pair.second])
        elif (
            is_depthwise(modules[pair.first])
            and pair.first in by_second
            and id(by_second[pair.first]) not in used
        ):
            unit = (by_second[pair.first], pair)
        else:
            unit = (pair,)
        used.update(id(p) for p in unit)
        units.append(unit)
    return units


def _scales(modules: dict[str, nn.Module], unit: tuple[Pair, ...]) -> list[torch.Tensor]:
    """A pair's s = sqrt(r1 / r2); a triplet's two scales bring all three ranges to their geometric mean
    g = (r1 r2 r3)^(1/3) at once: s1 = r1 / g, s2 = g / r3 (the paper's chain of three, as AIMET does it)."""
    if len(unit) == 1:
        r1, r2 = _range(modules[unit[0].first]), _input_ranges(modules[unit[0].second])
        return [_safe(torch.sqrt(r1 / r2), r1, r2)]
    r1, r2, r3 = (
        _range(modules[unit[0].first]),
        _range(modules[unit[0].second]),
        _input_ranges(modules[unit[1].second]),
    )
    g = (r1 * r2 * r3).pow(1 / 3)
    alive = (r1, r2, r3)
    return [_safe(r1 / g, *alive), _safe(g / r3, *alive)]


def _rescale(
    modules: dict[str, nn.Module], pair: Pair, scale: torch.Tensor, stats: dict[str, dict] | None
) -> None:
    """W1[c] /= s_c, b1[c] /= s_c, W2[:, c] *= s_c: the same function, the ranges moved."""
    first, second = modules[pair.first], modules[pair.second]
    first.weight.div_(scale.view([-1] + [1] * (first.weight.dim() - 1)))
    if first.bias is not None:
        first.bias.div_(scale)
    _scale_inputs(second, scale)
    if stats is not None and pair.first in stats:
        info = stats[pair.first]  # on the BatchNorm's device: the model's, cpu or cuda
        info["mean"] = info["mean"] / scale.to(info["mean"].device)
        info["std"] = info["std"] / scale.to(info["std"].device)


@torch.no_grad()
def equalize(
    modules: dict[str, nn.Module],
    pairs: list[Pair],
    stats: dict[str, dict] | None = None,
    iterations: int = ITERATIONS,
    check_stop: Callable[[], None] | None = None,
) -> dict[str, torch.Tensor]:
    """Equalise every pair in place: s_c = sqrt(r1_c / r2_c), W1[c] /= s_c, b1[c] /= s_c, W2[:, c] *= s_c (for
    a grouped or depthwise second layer, the weights that read input channel c). A depthwise layer paired on
    both sides is equalised with its neighbours as one triplet (all three ranges to their geometric mean).
    Sweeps repeat until no scale moves: a layer in two pairs or units settles where its ranges match both
    neighbours'.

    `stats` ({layer: {"mean", "std"}} of folded BatchNorms) is rescaled with its layer, so BN-based ranges and
    bias absorption stay right. Returns each first layer's total scale per channel.
    """
    total: dict[str, torch.Tensor] = {}
    units = _units(pairs, modules)
    for _ in range(iterations):
        if check_stop is not None:
            check_stop()
        moved = 0.0
        for unit in units:
            for pair, scale in zip(unit, _scales(modules, unit), strict=True):
                moved = max(moved, float((scale - 1).abs().max()))
                _rescale(modules, pair, scale, stats)
                total[pair.first] = total.get(pair.first, torch.ones_like(scale)) * scale
        if moved < CONVERGED:
            break
    return total


@torch.no_grad()
def absorb_biases(
    modules: dict[str, nn.Module], pairs: list[Pair], stats: dict[str, dict]
) -> dict[str, float]:
    """For pairs with a ReLU between them and BatchNorm statistics for the first layer: b1 -= c, b2 += W2 c,
    with c = max(0, beta - 3 gamma) per channel. Returns the mean |c| moved per first layer."""
    moved = {}
    for pair in pairs:
        if not pair.relu or pair.first not in stats:
            continue
        first, second = modules[pair.first], modules[pair.second]
        info = stats[pair.first]
        c = (info["mean"] - ABSORB_SIGMAS * info["std"]).clamp(min=0).to(first.weight.device)
        if not bool((c > 0).any()):
            continue
        ensure_bias(first).sub_(c)
        w2 = second.weight.detach()
        grouped = _by_group(w2, second).sum(dim=3)  # (groups, outputs, inputs): W2 c, group by group
        shift = torch.einsum("goi,gi->go", grouped, c.view(grouped.shape[0], grouped.shape[2])).reshape(-1)
        ensure_bias(second).add_(shift)
        info["mean"] = info["mean"] - c.to(info["mean"].device)
        moved[pair.first] = float(c.mean())
    return moved
