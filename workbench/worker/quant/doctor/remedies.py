"""The doctor's graph fixes, each changing a float fx GraphModule copy (and its folded BatchNorm statistics)
in place and returning what it did: function-preserving ones first (CLE of a pair or a fan-out, SmoothQuant,
concat rescale); relu6_to_relu changes the float model."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch import nn

from workbench.errors import JobError
from workbench.worker.quant import cle, relu6
from workbench.worker.quant.graph import (
    cle_pairs,
    equalisable,
    find_structure,
    in_channels,
    is_pass,
    is_relu,
    module_of,
    only_user,
    out_channels,
)


class NotApplicable(JobError):
    """The fix does not fit this layer's place in the graph (no pair, no single consumer, a branch)."""


def _node(gm: fx.GraphModule, name: str) -> fx.Node:
    """The call of module `name`, or the node named `name` (a concatenation)."""
    for node in gm.graph.nodes:
        if (node.op == "call_module" and node.target == name) or node.name == name:
            return node
    raise NotApplicable(f"{name} is not in the graph")


def _plain(module: nn.Module) -> bool:
    """Rescalable along output channel rows and input channel columns, ungrouped."""
    return (
        isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear))
        and equalisable(module)
        and getattr(module, "groups", 1) == 1
    )


def _through(gm: fx.GraphModule, node: fx.Node) -> fx.Node:
    """Walk down from `node` through single-user ReLUs and pass-through ops; the last node before a fan-out or
    another op."""
    current = node
    while True:
        user = only_user(current)
        if user is None or not user.args or user.args[0] is not current:
            return current
        if not (is_relu(gm, user) or is_pass(gm, user)):
            return current
        current = user


def _consumers(gm: fx.GraphModule, node: fx.Node, channels: int) -> list[nn.Module]:
    """The weighted layers that read `node` whole as their input, every user being one; else NotApplicable."""
    found = []
    for user in node.users:
        module = module_of(gm, user)
        if (
            module is None
            or not _plain(module)
            or user.args[0] is not node
            or in_channels(module) != channels
        ):
            raise NotApplicable(f"{user.name} is not a conv or linear layer that reads the channels whole")
        found.append(module)
    if not found:
        raise NotApplicable(f"nothing reads {node.name}")
    return found


def _input_ranges(module: nn.Module) -> torch.Tensor:
    """Largest |weight| that reads each input channel."""
    w = module.weight.detach()
    return w.transpose(0, 1).reshape(w.shape[1], -1).abs().amax(dim=1)


@torch.no_grad()
def rescale(
    first: nn.Module,
    consumers: list[nn.Module],
    scale: torch.Tensor,
    folded_info: dict | None,
    columns: slice | None = None,
) -> None:
    """Divide `first`'s output channels by `scale` and multiply the consumers' matching input columns (at
    `columns`, for a concatenation's slice) by it: through ReLUs and pass-through ops, the same function."""
    scale = scale.to(first.weight.device)
    first.weight.div_(scale.view([-1] + [1] * (first.weight.dim() - 1)))
    if first.bias is not None:
        first.bias.div_(scale)
    for module in consumers:
        view = module.weight[:, columns] if columns is not None else module.weight
        view.mul_(scale.view([1, -1] + [1] * (module.weight.dim() - 2)))
    if folded_info is not None:
        folded_info["mean"] = folded_info["mean"] / scale.to(folded_info["mean"].device)
        folded_info["std"] = folded_info["std"] / scale.to(folded_info["std"].device)


def cle_pair(gm: fx.GraphModule, folded: dict, layer: str) -> str:
    """CLE of `layer` with the layer after it (graph.cle_pairs' rule), with cle.equalize."""
    structure = find_structure(gm)
    pairs = [p for p in cle_pairs(gm, structure) if p.first == layer]
    if not pairs:
        raise NotApplicable(f"{layer} has no single next layer joined by ReLU or pooling only")
    modules = {name: item.module for name, item in structure.layers.items()}
    cle.equalize(modules, pairs, folded)
    return f"equalised {layer} with {pairs[0].second} (CLE: float function unchanged)"


def cle_fanout(gm: fx.GraphModule, folded: dict, layer: str) -> str:
    """CLE of `layer` with every layer its output feeds: s = sqrt(r1 / max over consumers of r2) per
    channel."""
    node = _node(gm, layer)
    first = module_of(gm, node)
    if first is None or not _plain(first):
        raise NotApplicable(f"{layer} is not a conv or linear layer")
    end = _through(gm, node)
    consumers = _consumers(gm, end, out_channels(first))
    if len(consumers) < 2:
        raise NotApplicable(f"{layer} feeds one layer: that is a pair (cle)")
    r1 = first.weight.detach().reshape(first.weight.shape[0], -1).abs().amax(dim=1)
    r2 = torch.stack([_input_ranges(m) for m in consumers]).amax(dim=0)
    scale = torch.sqrt(r1 / r2)
    scale = torch.where((r1 > 0) & (r2 > 0) & torch.isfinite(scale), scale, torch.ones_like(scale))
    rescale(first, consumers, scale, folded.get(layer))
    return f"equalised {layer} with the {len(consumers)} layers it feeds (CLE across the fan-out)"


def smoothquant(gm: fx.GraphModule, folded: dict, layer: str, act_range: torch.Tensor, alpha: float) -> str:
    """SmoothQuant through the producer: activation channel j is divided by s_j = a_j^alpha / w_j^(1-alpha)
    (a_j its calibration range, w_j the largest consumer weight reading it), the consumers' columns
    multiplied."""
    node = _node(gm, layer)
    first = module_of(gm, node)
    if first is None or not _plain(first):
        raise NotApplicable(f"{layer} is not a conv or linear layer")
    consumers = _consumers(gm, _through(gm, node), out_channels(first))
    w = torch.stack([_input_ranges(m) for m in consumers]).amax(dim=0)
    a = act_range.to(w.device).float().clamp(min=1e-8)
    scale = a.pow(alpha) / w.clamp(min=1e-8).pow(1 - alpha)
    scale = scale / scale.median()  # only the spread matters; keep the typical channel where it was
    scale = torch.where(torch.isfinite(scale) & (scale > 0), scale, torch.ones_like(scale))
    rescale(first, consumers, scale, folded.get(layer))
    return f"migrated {layer}'s activation scale into the next weights (SmoothQuant, alpha {alpha:g})"


def _producer(gm: fx.GraphModule, node: fx.Node) -> tuple[fx.Node, nn.Module]:
    """The plain layer whose output reaches `node` through single-user ReLUs and pass-through ops."""
    current = node
    while isinstance(current, fx.Node):
        module = module_of(gm, current)
        if module is not None and isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)):
            if not _plain(module) or len(current.users) != 1:
                break
            return current, module
        if len(current.users) != 1 or not (is_relu(gm, current) or is_pass(gm, current)) or not current.args:
            break
        current = current.args[0]
    raise NotApplicable(f"{node.name} does not come from one conv or linear layer through ReLUs only")


def concat_rescale(gm: fx.GraphModule, folded: dict, cat: str, spans: list[float]) -> str:
    """Scale each input of concatenation `cat` wider than its narrowest down to it at its producer, and its
    columns up in the consumer: the merged grid then spends its codes evenly."""
    node = _node(gm, cat)
    inputs = list(node.args[0])
    consumer_node = _through(gm, node)
    consumers = _consumers(gm, consumer_node, sum(out_channels(_producer(gm, n)[1]) for n in inputs))
    narrowest = min(s for s in spans if s > 0)
    offset, moved = 0, []
    for value, span in zip(inputs, spans):
        producer_node, producer = _producer(gm, value)
        width = out_channels(producer)
        factor = span / narrowest
        if factor > 1.5:
            rescale(
                producer,
                consumers,
                torch.full((width,), factor),
                folded.get(producer_node.target),
                slice(offset, offset + width),
            )
            moved.append(f"{producer_node.target} by 1/{factor:.3g}")
        offset += width
    if not moved:
        raise NotApplicable(f"the inputs of {cat} already span similar ranges")
    return f"rescaled the inputs of {cat} into its consumer: {', '.join(moved)} (float function unchanged)"


def relu6_to_relu(gm: fx.GraphModule, folded: dict, first: str, second: str) -> str:
    """Replace the ReLU6 between `first` and `second` by a ReLU (relu6.replace_node), then equalise the
    pair."""
    clipped: list = []
    cle_pairs(gm, find_structure(gm), clipped)
    nodes = {node.name: node for node in gm.graph.nodes}
    ops = [nodes[op] for a, b, op in clipped if (a, b) == (first, second) and op in nodes]
    if not ops or not relu6.is_relu6(gm, ops[0]):
        raise NotApplicable(f"no ReLU6 joins {first} and {second}")
    relu6.replace_node(gm, ops[0])
    gm.graph.lint()
    gm.recompile()
    said = cle_pair(gm, folded, first)
    return f"replaced the ReLU6 after {first} by a ReLU (the float model no longer clips at 6), then {said}"


def cat_dim(node: fx.Node) -> int | None:
    """The dimension a torch.cat node joins along, or None for another node."""
    if node.op != "call_function" or node.target is not torch.cat:
        return None
    return node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else 0)


__all__ = [
    "NotApplicable",
    "cat_dim",
    "cle_fanout",
    "cle_pair",
    "concat_rescale",
    "relu6_to_relu",
    "rescale",
    "smoothquant",
]
