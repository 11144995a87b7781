"""Counts for an ONNX file: parameters (its initializers), output shapes (ONNX shape inference) and FLOPs of
its matrix ops, counted as torch.utils.flop_counter counts them (2 per multiply-add of Conv, Gemm and MatMul
only).

Nodes stand in for modules here: an ONNX file has no named_modules(). Worker side; never Qt.
"""

from __future__ import annotations

import math
from pathlib import Path

from workbench.errors import JobError


def _dims(value_info) -> list[int] | None:
    shape = value_info.type.tensor_type.shape
    dims = [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]
    return None if any(d is None for d in dims) else dims


def onnx_stats(path: Path) -> dict:
    """{modules, params_total, flops}: one row per ONNX node that has weights or does matrix work."""
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf decode errors name no file
        raise JobError(
            f"source.file: {path} is not a readable ONNX model ({type(exc).__name__}: {exc})"
        ) from None
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shapes stay unknown where inference fails; counts of weights still work
        pass
    graph = model.graph
    sizes = {init.name: math.prod(init.dims) for init in graph.initializer}
    shapes: dict[str, list[int] | None] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        shapes[value.name] = _dims(value)
    for init in graph.initializer:
        shapes[init.name] = list(init.dims)
    modules, total_flops = [], 0
    for i, node in enumerate(graph.node):
        name = node.name or f"<node_{i}>"
        params = sum(sizes.get(x, 0) for x in node.input)
        out = shapes.get(node.output[0]) if node.output else None
        flops = _flops(node, shapes, out)
        total_flops += flops
        if params or flops:
            modules.append(
                {
                    "name": name,
                    "type": node.op_type,
                    "output_shape": out[1:] if out else None,
                    "params": params,
                    "flops": flops,
                    "leaf": True,
                    "calls": 1,
                }
            )
    return {"modules": modules, "params_total": sum(sizes.values()), "flops": total_flops}


def _flops(node, shapes: dict, out: list[int] | None) -> int:
    inputs = [shapes.get(x) for x in node.input]
    if out is None or not inputs or inputs[0] is None:
        return 0
    if node.op_type == "Conv" and len(inputs) > 1 and inputs[1] is not None:
        weight = inputs[1]  # (out_channels, in_channels / groups, *kernel)
        return 2 * math.prod(out) * math.prod(weight[1:])
    if node.op_type in ("Gemm", "MatMul") and len(inputs) > 1 and inputs[1] is not None:
        a = inputs[0]
        transposed = any(attr.name == "transA" and attr.i for attr in node.attribute)
        k = a[-2] if transposed else a[-1]
        return 2 * math.prod(out) * k
    return 0
