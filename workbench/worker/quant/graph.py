"""The model as a torch.fx graph: its weighted layers, BatchNorm folding, where activation quantizers go, and
the layer pairs that cross-layer equalisation may rescale.

Weighted layers are convs, transposed convs, linear layers and embedding tables (an embedding's weights are
quantized per row, a transposed conv's per output channel: axis 1 of its (in, out / groups, *k) weight).
Activation quantizers sit at the model's input (unless it feeds an embedding's indices), after each layer
(past its BatchNorm and activation function), after each residual add (past its activation), and at the input
of a conv/linear that average pooling feeds (an average of grid values is off the grid: integer hardware
requantizes it there) or that no quantizer feeds at all (after a LayerNorm, a concatenation's BatchNorm, an
attention's context). Max pooling and reshaping keep their input's grid exactly. Module names stay those of
the original model's named_modules(). Worker side; never imports Qt.
"""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from workbench.errors import JobError
from workbench.worker.quant.attention import swap_attention
from workbench.worker.quant.transformer import swap_transformers

TRANSPOSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
EMBEDDINGS = (nn.Embedding, nn.EmbeddingBag)
WEIGHTED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, *TRANSPOSED, *EMBEDDINGS)
# Methods that turn token ids into the integer type an embedding takes: the ids' path to the table.
INDEX_METHODS = {
    "long",
    "int",
    "to",
    "type",
    "contiguous",
    "view",
    "reshape",
    "flatten",
    "unsqueeze",
    "squeeze",
}
BATCHNORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
# Element-wise activation functions: a layer's quantizer goes after them (they are fused in deployment).
ACTIVATION_MODULES = (
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.Hardtanh,
    nn.SiLU,
    nn.GELU,
    nn.Sigmoid,
    nn.Tanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.ELU,
    nn.Mish,
)
ACTIVATION_FUNCTIONS = {
    F.relu,
    torch.relu,
    F.relu6,
    F.leaky_relu,
    F.gelu,
    F.silu,
    torch.sigmoid,
    torch.tanh,
    F.hardswish,
    F.hardsigmoid,
    F.elu,
    F.mish,
    F.hardtanh,
    torch.relu_,
}
ACTIVATION_METHODS = {"relu", "relu_", "sigmoid", "tanh"}
# Positively homogeneous, f(s x) = s f(x) for s > 0 per channel: what CLE may rescale across.
RELU_MODULES = (nn.ReLU, nn.LeakyReLU)
RELU_FUNCTIONS = {F.relu, torch.relu, torch.relu_, F.leaky_relu}
RELU_METHODS = {"relu", "relu_"}
PASS_MODULES = (
    nn.Identity,
    nn.Dropout,
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
    nn.Flatten,
)
PASS_FUNCTIONS = {
    F.max_pool1d,
    F.max_pool2d,
    F.max_pool3d,
    F.avg_pool1d,
    F.avg_pool2d,
    F.avg_pool3d,
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    F.adaptive_max_pool2d,
    torch.flatten,
    F.dropout,
}
PASS_METHODS = {"flatten"}
# Keep the per-channel mean (what analytical bias correction may carry a BatchNorm's statistics through).
MEAN_MODULES = (
    nn.Identity,
    nn.Dropout,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.Flatten,
)
MEAN_FUNCTIONS = {
    F.avg_pool1d,
    F.avg_pool2d,
    F.avg_pool3d,
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    torch.flatten,
    F.dropout,
}
# Averages leave the grid: a layer they feed gets a quantizer at its input (a "pool" point).
AVERAGING_MODULES = (
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
)
AVERAGING_FUNCTIONS = {
    F.avg_pool1d,
    F.avg_pool2d,
    F.avg_pool3d,
    F.adaptive_avg_pool1d,
    F.adaptive_avg_pool2d,
    F.adaptive_avg_pool3d,
}
ADD_FUNCTIONS = {operator.add, operator.iadd, torch.add}
ADD_METHODS = {"add", "add_"}


class Untraceable(JobError):
    """torch.fx cannot trace the model: quantize falls back to module-level quantization."""


def trace(model: nn.Module, what: str = "the model") -> fx.GraphModule:
    """A GraphModule of a deep copy of `model` (the original is never changed), in eval mode."""
    copied = copy.deepcopy(model).eval()
    # fx keeps torch.nn's transformer modules and nn.MultiheadAttention whole: this copy's are rebuilt from
    # plain ops, their feed-forward and projection Linear layers visible (module names unchanged, projections
    # added).
    swap_transformers(copied)
    swap_attention(copied)
    try:
        gm = fx.symbolic_trace(copied)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        raise Untraceable(
            f"quantize needs a model that torch.fx can trace, and {what} cannot be traced "
            f"({type(exc).__name__}: {first}); data-dependent Python control flow in forward() is the "
            "usual cause"
        ) from None
    return gm.eval()


def module_of(gm: fx.GraphModule, node: fx.Node) -> nn.Module | None:
    return gm.get_submodule(node.target) if node.op == "call_module" else None


def _first_arg_is(node: fx.Node, prev: fx.Node) -> bool:
    return bool(node.args) and node.args[0] is prev


def is_weighted(gm: fx.GraphModule, node: fx.Node) -> bool:
    return isinstance(module_of(gm, node), WEIGHTED)


def _kind(gm: fx.GraphModule, node: fx.Node, modules: tuple, functions: set, methods: set) -> bool:
    if node.op == "call_module":
        return isinstance(module_of(gm, node), modules)
    if node.op == "call_function":
        return node.target in functions
    if node.op == "call_method":
        return node.target in methods
    return False


def is_activation(gm, node) -> bool:
    return _kind(gm, node, ACTIVATION_MODULES, ACTIVATION_FUNCTIONS, ACTIVATION_METHODS)


def is_relu(gm, node) -> bool:
    return _kind(gm, node, RELU_MODULES, RELU_FUNCTIONS, RELU_METHODS)


def is_plain_relu(gm, node) -> bool:
    """ReLU itself (not leaky): ReLU(x - c) = ReLU(x) - c for x >= c, which bias absorption relies on."""
    return _kind(gm, node, (nn.ReLU,), {F.relu, torch.relu, torch.relu_}, RELU_METHODS)


def is_quantizer(gm, node) -> bool:
    """An activation quantizer the simulation inserted: walks through the graph look past it."""
    return getattr(module_of(gm, node), "is_quantizer", False)


def is_pass(gm, node) -> bool:
    return _kind(gm, node, PASS_MODULES, PASS_FUNCTIONS, PASS_METHODS) or is_quantizer(gm, node)


def is_mean_preserving(gm, node) -> bool:
    return _kind(gm, node, MEAN_MODULES, MEAN_FUNCTIONS, PASS_METHODS) or is_quantizer(gm, node)


def is_add(node: fx.Node) -> bool:
    tensors = [a for a in node.args if isinstance(a, fx.Node)]
    return len(tensors) >= 2 and (
        (node.op == "call_function" and node.target in ADD_FUNCTIONS)
        or (node.op == "call_method" and node.target in ADD_METHODS)
    )


# What onnxruntime carries a DequantizeLinear across (dropping, reshaping or max-pooling its integer codes): a
# layer behind only these ops after a quantizer takes quantized input, and deployment quantizes its bias to
# int32.
CARRY_MODULES = (nn.Identity, nn.Dropout, nn.Flatten, nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
CARRY_FUNCTIONS = {torch.flatten, F.dropout, F.max_pool1d, F.max_pool2d, F.max_pool3d, torch.reshape}
CARRY_METHODS = {"flatten", "view", "reshape", "contiguous"}


def quantized_input(gm: fx.GraphModule, node: fx.Node) -> str | None:
    """The activation point whose quantizer feeds `node` (through ops that keep the codes), or None."""
    current = node.args[0] if node.args else None
    while isinstance(current, fx.Node):
        if is_quantizer(gm, current):
            return module_of(gm, current).point
        if not _kind(gm, current, CARRY_MODULES, CARRY_FUNCTIONS, CARRY_METHODS):
            return None
        current = current.args[0] if current.args else None
    return None


def only_user(node: fx.Node) -> fx.Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None


def out_channels(module: nn.Module) -> int:
    """Output channels (features); an embedding gives vectors of embedding_dim features."""
    if isinstance(module, nn.Linear):
        return module.out_features
    if isinstance(module, EMBEDDINGS):
        return module.embedding_dim
    return module.out_channels


def in_channels(module: nn.Module) -> int:
    """Input channels (features); an embedding's input is one of num_embeddings ids (a one-hot row)."""
    if isinstance(module, nn.Linear):
        return module.in_features
    if isinstance(module, EMBEDDINGS):
        return module.num_embeddings
    return module.in_channels


def weight_axis(module: nn.Module) -> int:
    """The axis of a layer's weight that holds its output channels, which per-channel quantization runs along:
    1 for a transposed conv ((in, out / groups, *k), as ONNX's ConvTranspose has it too), 0 otherwise (an
    embedding's rows)."""
    return 1 if isinstance(module, TRANSPOSED) else 0


def equalisable(module: nn.Module) -> bool:
    """Whether CLE may rescale the layer's channels: its rows are output channels and its columns inputs. A
    transposed conv's output channels lie along axis 1 and an embedding has no input channels; both are left
    out."""
    return not isinstance(module, (*TRANSPOSED, *EMBEDDINGS))


def feeds_embedding(gm: fx.GraphModule, node: fx.Node, depth: int = 8) -> bool:
    """Whether `node`'s value reaches an embedding as its indices (directly or through casts and reshapes): a
    token-id input, which an activation quantizer would turn into other ids, so none goes there."""
    for user in node.users:
        if isinstance(module_of(gm, user), EMBEDDINGS) and _first_arg_is(user, node):
            return True
        if depth and user.op == "call_method" and user.target in INDEX_METHODS and _first_arg_is(user, node):
            if feeds_embedding(gm, user, depth - 1):
                return True
    return False


# --- BatchNorm folding --------------------------------------------------------------------------------------


def fold_batchnorms(gm: fx.GraphModule, only: set[str] | None = None) -> dict[str, dict]:
    """Fold every BatchNorm that directly follows a conv/linear (its only user) into that layer, and take the
    BatchNorm out of the graph. Returns {layer: {"bn": bn name, "mean": beta, "std": |gamma|}}: the
    per-channel statistics of the folded layer's output, which BN-based ranges, bias absorption and analytical
    bias correction use. `only` limits folding to these BatchNorms (to rebuild a model quantized earlier)."""
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    folded: dict[str, dict] = {}
    for node in list(gm.graph.nodes):
        bn = module_of(gm, node)
        if not isinstance(bn, BATCHNORMS) or bn.running_mean is None or not node.args:
            continue
        if only is not None and node.target not in only:
            continue
        prev = node.args[0]
        layer = module_of(gm, prev) if isinstance(prev, fx.Node) else None
        if (
            not isinstance(layer, WEIGHTED)
            or isinstance(layer, EMBEDDINGS)
            or len(prev.users) != 1
            or calls.get(prev.target, 0) != 1
            or calls.get(node.target, 0) != 1
            or out_channels(layer) != bn.num_features
        ):
            continue
        with torch.no_grad():
            gamma = bn.weight.detach() if bn.weight is not None else torch.ones_like(bn.running_mean)
            beta = bn.bias.detach() if bn.bias is not None else torch.zeros_like(bn.running_mean)
            factor = gamma / torch.sqrt(bn.running_var + bn.eps)
            if isinstance(layer, TRANSPOSED):
                # (in, out / groups, *k): output channel g * (out / groups) + j is [group g's inputs, j].
                groups = layer.groups
                weight = layer.weight.view(groups, layer.weight.shape[0] // groups, layer.weight.shape[1], -1)
                weight.mul_(factor.view(groups, 1, -1, 1))
            else:
                shape = [-1] + [1] * (layer.weight.dim() - 1)
                layer.weight.mul_(factor.view(shape))
            bias = layer.bias.detach() if layer.bias is not None else torch.zeros_like(bn.running_mean)
            new_bias = (bias - bn.running_mean) * factor + beta
            if layer.bias is None:
                layer.bias = nn.Parameter(new_bias.clone())
            else:
                layer.bias.copy_(new_bias)
        folded[prev.target] = {
            "bn": node.target,
            "mean": beta.clone().float(),
            "std": gamma.abs().clone().float(),
        }
        node.replace_all_uses_with(prev)
        gm.graph.erase_node(node)
        gm.delete_submodule(node.target)
    gm.graph.lint()
    gm.recompile()
    return folded


def bn_stats(
    gm: fx.GraphModule, layer: Layer, folded: dict[str, dict]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(mean, std) per channel of a layer's output before its activation: from its folded BatchNorm, or from
    an unfolded one right after it."""
    info = folded.get(layer.name)
    if info is not None:
        return info["mean"], info["std"]
    for node in layer.tail:
        module = module_of(gm, node)
        if isinstance(module, BATCHNORMS) and module.weight is not None:
            return module.bias.detach().float(), module.weight.detach().abs().float()
    return None


# --- layers and activation points ---------------------------------------------------------------------------


@dataclass
class Layer:
    """A weighted layer (conv, transposed conv, linear, embedding): its weight quantizer, and the activation
    point after its BatchNorm and activation."""

    name: str
    node: fx.Node | None  # None under module-level quantization
    module: nn.Module
    tail: list[fx.Node] = field(default_factory=list)  # the nodes between the layer's output and its point
    point: str = ""

    @property
    def path(self) -> str:
        """The module's path in the model (a traced layer called twice has one path and two names)."""
        return self.node.target if self.node is not None else self.name


@dataclass
class Point:
    """Where an activation quantizer goes: right after `node`."""

    name: str
    node: fx.Node | None  # None under module-level quantization
    kind: str  # "input", "layer", "add" or "pool"
    layer: str | None = None  # the layer whose output it quantizes
    logits: bool = False  # the model's output
    relu: bool = False  # a ReLU precedes it in the layer's tail (the tensor has no negative values)


@dataclass
class Structure:
    layers: dict[str, Layer]
    points: dict[str, Point]
    # in graph order: a layer name (its weights and its output point) or a lone point's name
    groups: list[str]
    traced: bool = True  # False: module-level quantization (quant/module_level.py), no fx nodes
    # Module-level only: an input point -> the layers it feeds (one tensor into several layers: one
    # quantizer).
    feeds: dict[str, list[str]] = field(default_factory=dict)


def _tail(gm: fx.GraphModule, start: fx.Node) -> list[fx.Node]:
    """The single-user chain of BatchNorms and activation functions right after `start`."""
    chain, current = [], start
    while True:
        user = only_user(current)
        if user is None or not _first_arg_is(user, current):
            break
        if not (is_activation(gm, user) or isinstance(module_of(gm, user), BATCHNORMS)):
            break
        chain.append(user)
        current = user
    return chain


def _owner(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [value[0] for value in stack.values()] if stack else []
    return paths[-1] if paths else ""


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    k = 1
    while f"{name}@{k}" in taken:
        k += 1
    return f"{name}@{k}"


def _averaged_input(gm: fx.GraphModule, layer: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(the node feeding `layer`, the average pooling behind it) where only pass-through ops (pooling,
    flatten, dropout) lie between the two and one of them averages; None otherwise."""
    source = layer.args[0] if layer.args else None
    current, averaged = source, None
    while isinstance(current, fx.Node) and is_pass(gm, current) and not is_quantizer(gm, current):
        if _kind(gm, current, AVERAGING_MODULES, AVERAGING_FUNCTIONS, set()):
            averaged = current
        current = current.args[0] if current.args else None
    return (source, averaged) if averaged is not None else None


def _unquantized_input(gm: fx.GraphModule, layer: fx.Node, placed: set[fx.Node]) -> fx.Node | None:
    """The node feeding `layer` where no quantizer reaches it through ops that keep the codes (a LayerNorm, an
    unfolded BatchNorm, a concatenation, an attention's context, an LSTM's output); None where one does.
    Integer kernels take 8-bit inputs, so such a layer gets a quantizer at its input: left float, onnxruntime
    quantizes a MatMul's input itself at run time (MatMulNBits), and the file no longer computes what was
    simulated."""
    source = layer.args[0] if layer.args else None
    current = source
    while isinstance(current, fx.Node):
        if current in placed:
            return None
        if not _kind(gm, current, CARRY_MODULES, CARRY_FUNCTIONS, CARRY_METHODS):
            break
        current = current.args[0] if current.args else None
    return source if isinstance(source, fx.Node) else None


def find_structure(gm: fx.GraphModule) -> Structure:
    layers: dict[str, Layer] = {}
    points: dict[str, Point] = {}
    groups: list[str] = []
    taken: set[str] = set()
    output = next(n for n in gm.graph.nodes if n.op == "output")

    def add_point(name: str, node: fx.Node, kind: str, layer: str | None, tail: list[fx.Node]) -> Point:
        logits = set(node.users) == {output}
        point = Point(name, node, kind, layer, logits, any(is_relu(gm, n) for n in tail))
        points[name] = point
        taken.add(name)
        return point

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if feeds_embedding(gm, node):
                continue  # token ids: quantizing them would look up other rows
            name = _unique("input", taken)
            add_point(name, node, "input", None, [])
            groups.append(name)
        elif is_weighted(gm, node):
            indexed = isinstance(module_of(gm, node), EMBEDDINGS)  # its input is ids: no quantizer before it
            pooled = None if indexed else _averaged_input(gm, node)
            placed = {p.node for p in points.values()}
            if indexed:
                pass
            elif pooled is not None and pooled[0] not in placed:
                source, pool = pooled
                name = _unique(pool.target if pool.op == "call_module" else pool.name, taken)
                add_point(name, source, "pool", None, [])
                groups.append(name)
            elif pooled is None and (source := _unquantized_input(gm, node, placed)) is not None:
                name = _unique(source.target if source.op == "call_module" else f"{node.target}.input", taken)
                add_point(name, source, "requant", None, [])
                groups.append(name)
            name = _unique(node.target, taken)
            tail = _tail(gm, node)
            layer = Layer(name, node, module_of(gm, node), tail, name)
            layers[name] = layer
            add_point(name, tail[-1] if tail else node, "layer", name, tail)
            groups.append(name)
        elif is_add(node):
            tail = _tail(gm, node)
            name = _unique(_owner(node) or node.name, taken)
            add_point(name, tail[-1] if tail else node, "add", None, tail)
            groups.append(name)
    if not layers:
        raise JobError("the model has no Conv, Linear or Embedding layer to quantize")
    return Structure(layers, points, groups)


# --- pairs for cross-layer equalisation ---------------------------------------------------------------------


@dataclass
class Pair:
    first: str
    second: str
    relu: bool  # a plain ReLU between them: bias absorption applies


CLIPPING_MODULES = (nn.ReLU6, nn.Hardtanh)  # ReLU6 is a Hardtanh(0, 6)
CLIPPING_FUNCTIONS = {F.relu6, F.hardtanh}


def is_clipping(gm, node) -> bool:
    """ReLU6 and Hardtanh: a fixed upper bound, so scaling what goes in by 1/s does not scale what comes
    out."""
    return _kind(gm, node, CLIPPING_MODULES, CLIPPING_FUNCTIONS, set())


def cle_pairs(gm: fx.GraphModule, structure: Structure, clipped: list | None = None) -> list[Pair]:
    """Consecutive layers joined only by positively homogeneous ops (ReLU, pooling, flatten), with no branch:
    scaling the first layer's output channel c by 1/s and the second's input channel c by s keeps the
    function. The second may be grouped or depthwise (input channel c reaches only its own group). Pairs a
    clipping activation (ReLU6) stands between are left out, and listed in `clipped` as (first, second,
    op)."""
    pairs = []
    by_node = {layer.node: layer for layer in structure.layers.values()}
    for layer in structure.layers.values():
        if layer.name != layer.node.target:  # a module called twice: rescaling it would change both calls
            continue
        if not equalisable(layer.module):
            continue
        current, relu, clipping = layer.node, False, None
        while True:
            user = only_user(current)
            if user is None or not _first_arg_is(user, current):
                break
            if user in by_node:
                second = by_node[user]
                if (
                    second.name == user.target
                    and equalisable(second.module)
                    and in_channels(second.module) == out_channels(layer.module)
                ):
                    if clipping is None:
                        pairs.append(Pair(layer.name, second.name, relu))
                    elif clipped is not None:
                        clipped.append((layer.name, second.name, clipping))
                break
            if is_relu(gm, user):
                relu = relu or is_plain_relu(gm, user)
            elif is_clipping(gm, user) and clipping is None:
                clipping = user.name  # walk on, only to name the pair it keeps from being equalised
            elif not is_pass(gm, user):
                break
            current = user
    return pairs


def cle_chains(pairs: list[Pair]) -> list[list[str]]:
    """The pairs joined into chains where one pair's second layer is the next one's first: conv -> depthwise
    -> conv is one chain of three (a triplet, as the paper and AIMET equalise it); a lone pair is a chain of
    two."""
    following = {p.first: p.second for p in pairs}
    seconds = {p.second for p in pairs}
    chains = []
    for pair in pairs:
        if pair.first in seconds:
            continue  # not the start of a chain
        chain = [pair.first]
        while chain[-1] in following and following[chain[-1]] not in chain:
            chain.append(following[chain[-1]])
        chains.append(chain)
    return chains


def cle_triplets(pairs: list[Pair], structure: Structure) -> list[list[str]]:
    """(before, depthwise, after) for each grouped layer paired on both sides: what the paper and AIMET
    equalise as one triplet, and iterating the two pairs reaches the same balance."""
    before = {p.second: p.first for p in pairs}
    after = {p.first: p.second for p in pairs}
    return [
        [before[name], name, after[name]]
        for name, layer in structure.layers.items()
        if getattr(layer.module, "groups", 1) > 1 and name in before and name in after
    ]


def producer(gm: fx.GraphModule, structure: Structure, layer: Layer) -> tuple[Layer | None, bool]:
    """The layer whose output reaches `layer`'s input through mean-preserving ops and ReLUs only, and whether
    a ReLU is on the way (for analytical bias correction); (None, False) when there is no such layer."""
    if layer.node is None:  # module-level quantization knows no graph
        return None, False
    by_node = {item.node: item for item in structure.layers.values()}
    node = layer.node.args[0] if layer.node.args else None
    relu = False
    while isinstance(node, fx.Node):
        if node in by_node:
            return by_node[node], relu
        if len(node.users) != 1:
            return None, False
        if is_plain_relu(gm, node):
            if relu:  # a second ReLU is harmless, but keep the rule simple
                return None, False
            relu = True
        elif not is_mean_preserving(gm, node):
            return None, False
        node = node.args[0] if node.args else None
    return None, False
