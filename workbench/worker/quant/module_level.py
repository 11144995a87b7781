"""Module-level quantization, for a model torch.fx cannot trace (Python control flow on tensor values in
forward):
forward hooks quantize each conv and linear layer's weights and output and the model's input, and every
functional op between them (adds, activations, matmuls) stays float. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import weakref
from collections import Counter
from collections.abc import Iterator

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from workbench.errors import JobError
from workbench.worker.models.build import call_model
from workbench.worker.quant.attention import swap_attention
from workbench.worker.quant.graph import WEIGHTED, Layer, Point, Structure
from workbench.worker.quant.transformer import swap_transformers

INPUT = "input"
# The attributes that name a module's quantizer child: _quant_act_<k>, as the traced graph names them, so the
# ONNX QDQ export's QuantizeLinear nodes carry that name for the step analysis (export/qdq_steps.py) to find.
OUTPUT_QUANTIZER = "_wb_output_quantizer"
INPUT_QUANTIZER = "_wb_input_quantizer"

# Ops that move or describe values without computing new ones: not worth naming as "left in float".
_SHAPE_OPS = {
    "size",
    "dim",
    "shape",
    "numel",
    "view",
    "reshape",
    "flatten",
    "permute",
    "transpose",
    "contiguous",
    "unsqueeze",
    "squeeze",
    "expand",
    "clone",
    "detach",
    "to",
    "float",
    "item",
    "chunk",
    "split",
    "__getitem__",
    "__setitem__",
    "__len__",
    "__iter__",
    "__bool__",
    "bool",
    "__get__",
    "__format__",
    "t",
    "requires_grad_",
    "unbind",
    "stack",
    "cat",
    "type",
    "device",
    "dtype",
    "is_floating_point",
    "dropout",
    "__index__",
    "tolist",
    "__array__",
    "_has_compatible_shallow_copy_type",
    "new_empty",
}


def _op_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name.startswith("__") and name.endswith("__"):
        bare = name[2:-2]
        bare = (
            bare[1:]
            if bare.startswith(("i", "r"))
            and bare[1:] in {"add", "sub", "mul", "truediv", "matmul", "pow", "floordiv"}
            else bare
        )
        return {
            "truediv": "div",
            "lt": "compare",
            "gt": "compare",
            "le": "compare",
            "ge": "compare",
            "eq": "compare",
            "ne": "compare",
        }.get(bare, bare)
    return name


# Ops whose output stays on their input's grid: a layer they feed from a quantized tensor needs no quantizer
# of its own (relu and max of grid values are grid values; reshaping moves them).
_ON_GRID = {
    "view",
    "reshape",
    "flatten",
    "permute",
    "transpose",
    "contiguous",
    "unsqueeze",
    "squeeze",
    "expand",
    "clone",
    "detach",
    "chunk",
    "split",
    "unbind",
    "__getitem__",
    "t",
    "dropout",
    "relu",
    "relu_",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "hardtanh",
    "relu6",
    "identity",
}


class _FloatOps(TorchFunctionMode):
    """Counts the torch functions called outside the quantized layers during one forward pass, and follows
    which tensors stay on a quantizer's grid (`quantized`: their ids; `kept` holds them so no id is
    reused)."""

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.counts: Counter = Counter()
        self.quantized: set[int] = set()
        self.kept: list = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if self.depth == 0:
            name = _op_name(func)
            if name not in _SHAPE_OPS and not name.startswith("_"):
                self.counts[name] += 1
            if name in _ON_GRID and args and id(args[0]) in self.quantized:
                self.mark(result)
        return result

    def mark(self, value) -> None:
        for t in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(t, torch.Tensor):
                self.quantized.add(id(t))
                self.kept.append(t)


REQUANT_SUFFIX = ".input"  # a layer's input point is named after the first layer it feeds
SHARED_INPUT = "_wb_shared_input_quantizer"
_LAST_INPUT = "_wb_last_input"  # (forward pass, weak reference to the last input, its quantized value)
_alone = threading.local()
_passes = threading.local()


@contextlib.contextmanager
def layer_alone() -> Iterator[None]:
    """Inside, a layer called by itself gives its raw output, as a traced layer does (its quantizer is a
    separate node there): AdaRound and the layer errors call a layer with trial weights and quantize its
    output themselves."""
    depth = getattr(_alone, "depth", 0)
    _alone.depth = depth + 1
    try:
        yield
    finally:
        _alone.depth = depth


def _quantizer(module: nn.Module, which: str) -> nn.Module | None:
    name = getattr(module, which, None)
    return getattr(module, name, None) if name else None


def _quantize_output(module: nn.Module, args, output):
    quantizer = _quantizer(module, OUTPUT_QUANTIZER)
    if quantizer is None or not isinstance(output, torch.Tensor) or getattr(_alone, "depth", 0):
        return output
    return quantizer(output)


def _quantize_layer_input(module: nn.Module, args):
    """A layer's input quantizer, shared by the layers one tensor feeds: the same tensor is quantized once (q,
    k and v take one QuantizeLinear); off while the layer is called alone (its trial inputs are given as they
    are)."""
    owner = module.__dict__.get(SHARED_INPUT)
    quantizer = getattr(owner[0], owner[1], None) if owner is not None else None
    if quantizer is None or getattr(_alone, "depth", 0) or not args or not isinstance(args[0], torch.Tensor):
        return None
    last = quantizer.__dict__.get(_LAST_INPUT)
    now = getattr(_passes, "count", 0)
    if last is not None and last[0] == now and last[1]() is args[0]:
        return (last[2], *args[1:])
    out = quantizer(args[0])
    object.__setattr__(quantizer, _LAST_INPUT, (now, weakref.ref(args[0]), out))
    return (out, *args[1:])


def _next_pass(module: nn.Module, args) -> None:
    """A new forward pass of the model: a shared input quantizer's last value belongs to the one before."""
    _passes.count = getattr(_passes, "count", 0) + 1


def _quantize_input(module: nn.Module, args):
    quantizer = _quantizer(module, INPUT_QUANTIZER)
    if quantizer is None or not args or not isinstance(args[0], torch.Tensor):
        return None
    return (quantizer(args[0]), *args[1:])


def prepare(model: nn.Module) -> nn.Module:
    """The copy the simulation works on (the original is never changed), in eval mode, its transformer modules
    and attention rebuilt as trace() rebuilds them: torch's own compute their Linear layers in fused calls
    that never run those modules' forward, so no hook would see them."""
    copied = copy.deepcopy(model).eval()
    swap_transformers(copied)
    swap_attention(copied)
    return copied


@torch.no_grad()
def find_structure(model: nn.Module, example) -> tuple[Structure, list[tuple[str, int]]]:
    """The conv and linear layers in the order one forward pass of `example` calls them (layers it never calls
    are left out), a quantizer at the input and at each layer's output, and the float ops counted on the way:
    [(op, calls)], most called first."""
    weighted = {module: name for name, module in model.named_modules() if isinstance(module, WEIGHTED)}
    order: list[str] = []
    outputs: dict[str, torch.Tensor] = {}
    mode = _FloatOps()
    handles = []
    takes_tensor = isinstance(example, torch.Tensor) and example.is_floating_point()
    if takes_tensor:
        mode.mark(example)
    # A layer fed a float tensor that no quantizer gave (a LayerNorm's output, attention's context, a GELU
    # after a layer) gets a quantizer at its input, as integer kernels take 8-bit inputs: where none feeds it,
    # onnxruntime quantizes that input itself at run time. One tensor into several layers (q, k, v) is one
    # quantizer.
    feeds: dict[int, list[str]] = {}

    def enter(module, args):
        name = weighted[module]
        first = args[0] if args else None
        if (
            mode.depth == 0
            and name not in outputs
            and isinstance(first, torch.Tensor)
            and first.is_floating_point()
            and id(first) not in mode.quantized
        ):
            feeds.setdefault(id(first), []).append(name)
            mode.kept.append(first)
        mode.depth += 1

    def leave(module, args, output):
        mode.depth -= 1
        name = weighted[module]
        if name not in outputs:
            order.append(name)
        outputs[name] = output
        mode.mark(output)

    for module in weighted:
        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave))
    try:
        with mode:
            result = call_model(model, example)
    finally:
        for handle in handles:
            handle.remove()
    if not order:
        raise JobError(
            "the model has no Conv or Linear layer that its forward pass calls, so there is nothing to "
            "quantize"
        )
    logits = next((name for name in reversed(order) if outputs[name] is result), None)
    # One float tensor in: an input quantizer. Integer inputs (token ids) are never quantized.
    inputs = {f"{layers[0]}{REQUANT_SUFFIX}": layers for layers in feeds.values()}
    structure = structure_of(model, order, logits, input_point=takes_tensor, feeds=inputs)
    return structure, mode.counts.most_common()


def structure_of(
    model: nn.Module,
    order: list[str],
    logits: str | None,
    *,
    input_point: bool,
    feeds: dict[str, list[str]] | None = None,
) -> Structure:
    """The Structure of these layers (module paths, in call order): a layer point after each one's output,
    with `input_point` one at the model's input, and an input point for each entry of `feeds`
    ({"<layer>.input": the layers that one tensor feeds}). Also what a saved module-level run is rebuilt
    from."""
    feeds = dict(feeds or {})
    first_fed = {layers[0]: point for point, layers in feeds.items()}
    modules = dict(model.named_modules())
    layers, points, groups = {}, {}, []
    if input_point:
        points[INPUT] = Point(INPUT, None, "input")
        groups.append(INPUT)
    for name in order:
        if name not in modules or not isinstance(modules[name], WEIGHTED):
            raise JobError(f"{name} is not a conv or linear layer of this model")
        if name in first_fed:
            points[first_fed[name]] = Point(first_fed[name], None, "requant")
            groups.append(first_fed[name])
        layers[name] = Layer(name, None, modules[name], [], name)
        points[name] = Point(name, None, "layer", name, logits=name == logits)
        groups.append(name)
    return Structure(
        layers, points, groups, traced=False, feeds={p: list(v) for p, v in feeds.items() if p in points}
    )


def attach(model: nn.Module, structure: Structure, quantizers: dict[str, nn.Module]) -> None:
    """Register each point's quantizer as a child of the module it follows (of the model itself for the
    input), with a hook that applies it: a deep copy (the ONNX QDQ export's) keeps both, and swapping the
    child swaps the op."""
    shared = False
    for k, (name, quantizer) in enumerate(quantizers.items()):
        point = structure.points[name]
        child = f"_quant_act_{k}"
        if point.kind == "input":
            model.add_module(child, quantizer)
            setattr(model, INPUT_QUANTIZER, child)
            model.register_forward_pre_hook(_quantize_input)
        elif point.kind == "requant":
            if not shared:
                model.register_forward_pre_hook(_next_pass)
                shared = True
            fed = [structure.layers[layer].module for layer in structure.feeds[name]]
            fed[0].add_module(child, quantizer)
            for module in fed:
                # A plain reference to the owner and the child's name, not a child: one quantizer shared by
                # the layers one tensor feeds (a deep copy keeps it shared; swapping the child swaps it for
                # all).
                object.__setattr__(module, SHARED_INPUT, (fed[0], child))
                module.register_forward_pre_hook(_quantize_layer_input)
        else:
            module = structure.layers[point.layer].module
            module.add_module(child, quantizer)
            setattr(module, OUTPUT_QUANTIZER, child)
            module.register_forward_hook(_quantize_output)


def float_ops_text(ops: list[tuple[str, int]], limit: int = 8) -> str:
    """ "add x8, relu x9, mean x1" for the ops left in float; "none" when there were none."""
    if not ops:
        return "none seen"
    shown = ", ".join(f"{name} x{count}" for name, count in ops[:limit])
    return shown + (f" and {len(ops) - limit} more" if len(ops) > limit else "")
