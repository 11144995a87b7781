"""ReLU6 to ReLU before cross-layer equalisation (the white paper's section 4.1, as AIMET does): a clipping
activation between two layers keeps CLE from rescaling them, so the graph being quantized gets a ReLU there
instead. This changes the float function where an activation exceeded 6; the caller measures by how much.
Worker side; no Qt.
"""

from __future__ import annotations

import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from workbench.worker.quant.graph import Structure, cle_pairs, find_structure

RELU6_BOUNDS = (0.0, 6.0)


def _bounds(gm: fx.GraphModule, node: fx.Node) -> tuple[float, float] | None:
    """(min, max) of a ReLU6 or Hardtanh node, None for any other node."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if isinstance(module, nn.Hardtanh):  # nn.ReLU6 is a Hardtanh(0, 6)
            return float(module.min_val), float(module.max_val)
        return None
    if node.op == "call_function" and node.target is F.relu6:
        return RELU6_BOUNDS
    if node.op == "call_function" and node.target is F.hardtanh:
        low = node.kwargs.get("min_val", node.args[1] if len(node.args) > 1 else -1.0)
        high = node.kwargs.get("max_val", node.args[2] if len(node.args) > 2 else 1.0)
        return (
            (float(low), float(high))
            if isinstance(low, int | float) and isinstance(high, int | float)
            else None
        )
    return None


def is_relu6(gm: fx.GraphModule, node: fx.Node) -> bool:
    """A ReLU6 module or call, or a Hardtanh with ReLU6's bounds (0, 6)."""
    return _bounds(gm, node) == RELU6_BOUNDS


def replace_node(gm: fx.GraphModule, node: fx.Node) -> str:
    """Make `node` a ReLU; returns its name (the module's path, or the call's node name). A module that only
    this node calls is swapped in place, keeping its name; a shared one is left to its other calls."""
    if node.op == "call_module":
        calls = sum(1 for n in gm.graph.nodes if n.op == "call_module" and n.target == node.target)
        if calls == 1:
            parent, _, leaf = node.target.rpartition(".")
            setattr(gm.get_submodule(parent) if parent else gm, leaf, nn.ReLU())
            return node.target
        name = node.target
        node.op, node.target = "call_function", F.relu
    else:
        name = node.name
        node.target = F.relu
    node.args, node.kwargs = (node.args[0],), {}
    return name


def relu6_to_relu(gm: fx.GraphModule, structure: Structure | None = None) -> list[str]:
    """Replace every ReLU6 (or Hardtanh(0, 6)) that stands between two layers CLE could otherwise pair by a
    ReLU, in place; returns the names replaced, in graph order. Clipping ops with other bounds stay."""
    replaced: list[str] = []
    while True:  # a second clipping op behind the first is only seen once the first is gone
        clipped: list = []
        cle_pairs(gm, structure if structure is not None else find_structure(gm), clipped)
        nodes = {node.name: node for node in gm.graph.nodes}
        targets = [nodes[op] for _, _, op in clipped if op in nodes and is_relu6(gm, nodes[op])]
        if not targets:
            break
        for node in dict.fromkeys(targets):
            replaced.append(replace_node(gm, node))
        structure = None  # the next pass walks the changed graph
    if replaced:
        gm.graph.lint()
        gm.recompile()
    return replaced
