"""Module-level quantization, for a model torch.fx cannot trace (Python control flow on tensor values in forward):
forward hooks quantize each conv and linear layer's weights and output and the model's input, and every functional
op between them (adds, activations, matmuls) stays float. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import copy
import threading
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
# The attributes that name a module's quantizer child: _quant_act_<k>, as the traced graph names them, so the ONNX
# QDQ export's QuantizeLinear nodes carry that name for the step analysis (export/qdq_steps.py) to find.
OUTPUT_QUANTIZER = "_wb_output_quantizer"
INPUT_QUANTIZER = "_wb_input_quantizer"

# Ops that move or describe values without computing new ones: not worth naming as "left in float".
_SHAPE_OPS = {"size", "dim", "shape", "numel", "view", "reshape", "flatten", "permute", "transpose", "contiguous",
              "unsqueeze", "squeeze", "expand", "clone", "detach", "to", "float", "item", "chunk", "split",
              "__getitem__", "__setitem__", "__len__", "__iter__", "__bool__", "bool", "__get__", "__format__", "t",
              "requires_grad_", "unbind", "stack", "cat", "type", "device", "dtype", "is_floating_point",
              "dropout", "__index__", "tolist", "__array__", "_has_compatible_shallow_copy_type", "new_empty"}


def _op_name(func) -> str:
    name = getattr(func, "__name__", None) or str(func)
    if name.startswith("__") and name.endswith("__"):
        bare = name[2:-2]
        bare = bare[1:] if bare.startswith(("i", "r")) and bare[1:] in {"add", "sub", "mul", "truediv", "matmul",
                                                                        "pow", "floordiv"} else bare
        return {"truediv": "div", "lt": "compare", "gt": "compare", "le": "compare", "ge": "compare",
                "eq": "compare", "ne": "compare"}.get(bare, bare)
    return name


class _FloatOps(TorchFunctionMode):
    """Counts the torch functions called outside the quantized layers during one forward pass."""

    def __init__(self):
        super().__init__()
        self.depth = 0
        self.counts: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.depth == 0:
            name = _op_name(func)
            if name not in _SHAPE_OPS and not name.startswith("_"):
                self.counts[name] += 1
        return func(*args, **(kwargs or {}))


_alone = threading.local()


@contextlib.contextmanager
def layer_alone() -> Iterator[None]:
    """Inside, a layer called by itself gives its raw output, as a traced layer does (its quantizer is a separate
    node there): AdaRound and the layer errors call a layer with trial weights and quantize its output themselves."""
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


def _quantize_input(module: nn.Module, args):
    quantizer = _quantizer(module, INPUT_QUANTIZER)
    if quantizer is None or not args or not isinstance(args[0], torch.Tensor):
        return None
    return (quantizer(args[0]), *args[1:])


def prepare(model: nn.Module) -> nn.Module:
    """The copy the simulation works on (the original is never changed), in eval mode, its transformer modules and
    attention rebuilt as trace() rebuilds them: torch's own compute their Linear layers in fused calls that never
    run those modules' forward, so no hook would see them."""
    copied = copy.deepcopy(model).eval()
    swap_transformers(copied)
    swap_attention(copied)
    return copied


@torch.no_grad()
def find_structure(model: nn.Module, example) -> tuple[Structure, list[tuple[str, int]]]:
    """The conv and linear layers in the order one forward pass of `example` calls them (layers it never calls are
    left out), a quantizer at the input and at each layer's output, and the float ops counted on the way:
    [(op, calls)], most called first."""
    weighted = {module: name for name, module in model.named_modules() if isinstance(module, WEIGHTED)}
    order: list[str] = []
    outputs: dict[str, torch.Tensor] = {}
    mode = _FloatOps()
    handles = []

    def enter(module, args):
        mode.depth += 1

    def leave(module, args, output):
        mode.depth -= 1
        name = weighted[module]
        if name not in outputs:
            order.append(name)
        outputs[name] = output

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
        raise JobError("the model has no Conv or Linear layer that its forward pass calls, so there is nothing to "
                       "quantize")
    logits = next((name for name in reversed(order) if outputs[name] is result), None)
    # One float tensor in: an input quantizer. Integer inputs (token ids) are never quantized.
    takes_tensor = isinstance(example, torch.Tensor) and example.is_floating_point()
    structure = structure_of(model, order, logits, input_point=takes_tensor)
    return structure, mode.counts.most_common()


def structure_of(model: nn.Module, order: list[str], logits: str | None, *, input_point: bool) -> Structure:
    """The Structure of these layers (module paths, in call order): a layer point after each one's output and, with
    `input_point`, one at the model's input. Also what a saved module-level run is rebuilt from."""
    modules = dict(model.named_modules())
    layers, points, groups = {}, {}, []
    if input_point:
        points[INPUT] = Point(INPUT, None, "input")
        groups.append(INPUT)
    for name in order:
        if name not in modules or not isinstance(modules[name], WEIGHTED):
            raise JobError(f"{name} is not a conv or linear layer of this model")
        layers[name] = Layer(name, None, modules[name], [], name)
        points[name] = Point(name, None, "layer", name, logits=name == logits)
        groups.append(name)
    return Structure(layers, points, groups, traced=False)


def attach(model: nn.Module, structure: Structure, quantizers: dict[str, nn.Module]) -> None:
    """Register each point's quantizer as a child of the module it follows (of the model itself for the input), with
    a hook that applies it: a deep copy (the ONNX QDQ export's) keeps both, and swapping the child swaps the op."""
    for k, (name, quantizer) in enumerate(quantizers.items()):
        point = structure.points[name]
        child = f"_quant_act_{k}"
        if point.kind == "input":
            model.add_module(child, quantizer)
            setattr(model, INPUT_QUANTIZER, child)
            model.register_forward_pre_hook(_quantize_input)
        else:
            module = structure.layers[point.layer].module
            module.add_module(child, quantizer)
            setattr(module, OUTPUT_QUANTIZER, child)
            module.register_forward_hook(_quantize_output)


def float_ops_text(ops: list[tuple[str, int]], limit: int = 8) -> str:
    """"add x8, relu x9, mean x1" for the ops left in float; "none" when there were none."""
    if not ops:
        return "none seen"
    shown = ", ".join(f"{name} x{count}" for name, count in ops[:limit])
    return shown + (f" and {len(ops) - limit} more" if len(ops) > limit else "")
