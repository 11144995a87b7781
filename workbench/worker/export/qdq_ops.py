"""Two torch ops that the ONNX exporters write as QuantizeLinear/DequantizeLinear: `workbench::qdq` (quantize
then dequantize an activation) and `workbench::dq` (dequantize int8/uint8 weight codes, which stay the
initializers). In eager PyTorch they compute what the quantize run simulated. Worker side; never imports Qt.
"""

from __future__ import annotations

import torch
from torch import Tensor

# torch's own fake_quantize ops cannot serve: torch.export decomposes them into a `_cachemask` variant that
# has no fake (meta) kernel, and both exporters refuse the restricted weight grid (-127, 127).
PER_TENSOR = -1  # the `axis` argument of a per-tensor quantizer (scale and zero point are 0-d)


@torch.library.custom_op("workbench::qdq", mutates_args=())
def qdq(x: Tensor, scale: Tensor, zero_point: Tensor, axis: int, qmin: int, qmax: int) -> Tensor:
    """clamp(round(x / s) + z, qmin, qmax) back to float, per tensor (axis -1) or per channel along `axis`.

    `zero_point` carries the ONNX integer type (uint8 or int8): the exported QuantizeLinear takes its type
    from it.
    """
    z = zero_point.to(torch.int32)
    if axis == PER_TENSOR:
        return torch.fake_quantize_per_tensor_affine(x, scale.float(), z, qmin, qmax)
    return torch.fake_quantize_per_channel_affine(x, scale.float(), z, axis, qmin, qmax)


@qdq.register_fake
def _qdq_fake(x, scale, zero_point, axis, qmin, qmax):
    return torch.empty_like(x)


@torch.library.custom_op("workbench::dq", mutates_args=())
def dq(codes: Tensor, scale: Tensor, zero_point: Tensor, axis: int) -> Tensor:
    """(codes - z) * s as float32: integer weight codes back to the weights the quantized model computes
    with."""
    shape = [1] * codes.dim()
    if axis != PER_TENSOR:
        shape[axis] = -1
    return (codes.float() - zero_point.float().reshape(shape)) * scale.float().reshape(shape)


@dq.register_fake
def _dq_fake(codes, scale, zero_point, axis):
    return torch.empty(codes.shape, dtype=torch.float32, device=codes.device)


def dynamo_translations() -> dict:
    """The ONNX functions the torch.export-based exporter uses for the two ops (its
    custom_translation_table)."""
    from onnxscript import opset18 as op

    def qdq_onnx(x, scale, zero_point, axis: int, qmin: int, qmax: int):
        # qmin/qmax need no node: the zero point's type (uint8 0..255, int8 -128..127) is QuantizeLinear's
        # grid, and the restricted weight grid (-127..127) only ever reaches dq, never qdq.
        if axis == PER_TENSOR:
            return op.DequantizeLinear(op.QuantizeLinear(x, scale, zero_point), scale, zero_point)
        quantized = op.QuantizeLinear(x, scale, zero_point, axis=axis)
        return op.DequantizeLinear(quantized, scale, zero_point, axis=axis)

    def dq_onnx(codes, scale, zero_point, axis: int):
        if axis == PER_TENSOR:
            return op.DequantizeLinear(codes, scale, zero_point)
        return op.DequantizeLinear(codes, scale, zero_point, axis=axis)

    return {torch.ops.workbench.qdq.default: qdq_onnx, torch.ops.workbench.dq.default: dq_onnx}


_SYMBOLICS_REGISTERED = False
SYMBOLIC_OPSET = 13  # per-channel QuantizeLinear / DequantizeLinear (the axis attribute) came with opset 13


def register_torchscript_symbolics() -> None:
    """Teach the TorchScript-based exporter (the fallback) the two ops; once per process."""
    global _SYMBOLICS_REGISTERED
    if _SYMBOLICS_REGISTERED:
        return
    from torch.onnx import symbolic_helper

    def _axis(value) -> int:
        return int(symbolic_helper._get_const(value, "i", "axis"))

    def qdq_symbolic(g, x, scale, zero_point, axis, qmin, qmax):
        a = _axis(axis)
        extra = {} if a == PER_TENSOR else {"axis_i": a}
        quantized = g.op("QuantizeLinear", x, scale, zero_point, **extra)
        return g.op("DequantizeLinear", quantized, scale, zero_point, **extra)

    def dq_symbolic(g, codes, scale, zero_point, axis):
        a = _axis(axis)
        extra = {} if a == PER_TENSOR else {"axis_i": a}
        return g.op("DequantizeLinear", codes, scale, zero_point, **extra)

    torch.onnx.register_custom_op_symbolic("workbench::qdq", qdq_symbolic, SYMBOLIC_OPSET)
    torch.onnx.register_custom_op_symbolic("workbench::dq", dq_symbolic, SYMBOLIC_OPSET)
    _SYMBOLICS_REGISTERED = True
