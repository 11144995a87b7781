"""Uniform affine quantizers on plain torch ops: the integer grid (qmin, qmax), scale and zero point from a
range, and quantize-dequantize per tensor or per channel (torch.fake_quantize_*: straight-through gradient).

x_int = clamp(round(x / s) + z, qmin, qmax), x_hat = s (x_int - z). Worker side; never imports Qt.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_SCALE = 1e-12  # an all-zero tensor still gets a positive scale (fake_quantize refuses 0)


@dataclass(frozen=True)
class Grid:
    """The integer grid of a quantizer: bit width, symmetric or not, signed or not, restricted or full."""

    bits: int
    symmetric: bool
    signed: bool
    # signed symmetric only: +-(2^(b-1)-1), dropping -2^(b-1) (ONNX/TensorRT weights)
    restricted: bool = False

    def __post_init__(self):
        if not 2 <= self.bits <= 16:
            raise ValueError(f"bits must be 2 to 16, not {self.bits}")

    @property
    def qmin(self) -> int:
        if not self.signed:
            return 0
        return -(2 ** (self.bits - 1)) + (1 if self.symmetric and self.restricted else 0)

    @property
    def qmax(self) -> int:
        return 2 ** (self.bits - 1) - 1 if self.signed else 2**self.bits - 1

    @property
    def levels(self) -> int:
        return self.qmax - self.qmin + 1

    def with_bits(self, bits: int) -> Grid:
        return Grid(bits, self.symmetric, self.signed, self.restricted)

    @classmethod
    def for_weights(cls, bits: int, symmetric: bool, restricted: bool = True) -> Grid:
        # Symmetric weights are signed (zero point 0); asymmetric ones use the unsigned grid with a fitted
        # zero point.
        return cls(bits, symmetric, signed=symmetric, restricted=restricted)

    @classmethod
    def for_activations(cls, bits: int, symmetric: bool, nonnegative: bool) -> Grid:
        # A symmetric grid over a tensor with no negative values (after a ReLU) would waste its negative half.
        return cls(bits, symmetric, signed=symmetric and not nonnegative)


@dataclass
class QParams:
    """Scale and zero point of one quantizer: 0-d tensors per tensor, (C,) tensors per channel along
    `axis`."""

    scale: torch.Tensor  # float32
    zero_point: torch.Tensor  # int32
    grid: Grid
    axis: int | None = None

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def to(self, device) -> QParams:
        return QParams(self.scale.to(device), self.zero_point.to(device), self.grid, self.axis)

    def extent(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The smallest and largest value the grid represents: s (qmin - z) and s (qmax - z)."""
        z = self.zero_point.float()
        return self.scale * (self.grid.qmin - z), self.scale * (self.grid.qmax - z)


def qparams_from_range(lo: torch.Tensor, hi: torch.Tensor, grid: Grid, axis: int | None = None) -> QParams:
    """Scale and zero point that map the range [lo, hi] onto `grid`; lo and hi are 0-d or (C,) tensors.

    The range is widened to include 0 so that zero (padding, ReLU outputs) is exactly representable.
    """
    lo = torch.as_tensor(lo, dtype=torch.float32)
    hi = torch.as_tensor(hi, dtype=torch.float32)
    lo, hi = torch.minimum(lo, torch.zeros_like(lo)), torch.maximum(hi, torch.zeros_like(hi))
    if grid.symmetric:
        bound = torch.maximum(-lo, hi) if grid.signed else hi
        scale = (bound / grid.qmax).clamp(min=MIN_SCALE)
        zero_point = torch.zeros_like(scale, dtype=torch.int32)
    else:
        scale = ((hi - lo) / (grid.qmax - grid.qmin)).clamp(min=MIN_SCALE)
        zero_point = torch.round(grid.qmin - lo / scale).clamp(grid.qmin, grid.qmax).to(torch.int32)
    return QParams(scale.float(), zero_point, grid, axis)


def _broadcast(t: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[axis] = -1
    return t.view(shape)


def fake_quant(x: torch.Tensor, qp: QParams) -> torch.Tensor:
    """Quantize-dequantize `x`: with torch's fake-quantize ops where a gradient is wanted (it passes straight
    through inside the grid), else on plain ops (`quant_dequant`), equal bit for bit and several times faster
    on a CPU (every activation of every evaluation pass goes through here)."""
    if not (x.requires_grad and torch.is_grad_enabled()):
        return quant_dequant(x, qp)
    g = qp.grid
    if qp.axis is None:
        return torch.fake_quantize_per_tensor_affine(
            x, qp.scale.reshape(()), qp.zero_point.reshape(()), g.qmin, g.qmax
        )
    return torch.fake_quantize_per_channel_affine(x, qp.scale, qp.zero_point, qp.axis, g.qmin, g.qmax)


def quantize(x: torch.Tensor, qp: QParams) -> torch.Tensor:
    """The integer codes clamp(round(x / s) + z, qmin, qmax), as float (exact for up to 16 bits).

    Multiplies by the float32 reciprocal of the scale, as torch's fake-quantize kernels do, so that
    dequantize(quantize(x)) equals fake_quant(x) bit for bit.
    """
    scale, z = qp.scale, qp.zero_point.float()
    if qp.axis is not None:
        scale, z = _broadcast(scale, x, qp.axis), _broadcast(z, x, qp.axis)
    inv = 1.0 / scale
    return torch.clamp(torch.round(x * inv) + z, qp.grid.qmin, qp.grid.qmax)


def dequantize(q: torch.Tensor, qp: QParams) -> torch.Tensor:
    scale, z = qp.scale, qp.zero_point.float()
    if qp.axis is not None:
        scale, z = _broadcast(scale, q, qp.axis), _broadcast(z, q, qp.axis)
    return (q - z) * scale


@torch.no_grad()
def quant_dequant(x: torch.Tensor, qp: QParams) -> torch.Tensor:
    """dequantize(quantize(x)) bit for bit, with no gradient, in place on one new tensor: s (clamp(round(x /
    s) + z)
    - z). Computed directly rather than as (q(x) - x) + x, which is off the grid for values far outside it
      (the
    float sum loses q(x) against a huge x: 6e7 on a [0, 6] grid came back as 8)."""
    scale = qp.scale if qp.axis is None else _broadcast(qp.scale, x, qp.axis)
    q = x * (1.0 / scale)
    q.round_()
    if qp.grid.symmetric:  # zero point 0: two passes fewer, in the range search's inner loop
        q.clamp_(qp.grid.qmin, qp.grid.qmax)
    else:
        z = qp.zero_point.float() if qp.axis is None else _broadcast(qp.zero_point.float(), x, qp.axis)
        q.add_(z).clamp_(qp.grid.qmin, qp.grid.qmax).sub_(z)
    return q.mul_(scale)


def quant_error(x: torch.Tensor, qp: QParams) -> torch.Tensor:
    """q(x) - x, with no gradient: the plain-ops path (about ten times faster than fake_quantize on a CPU)
    that error measures run. For q(x) itself use `quant_dequant`: adding x back is not exact far outside the
    grid."""
    with torch.no_grad():
        return quant_dequant(x, qp).sub_(x)


# The float32 values nearest the ends of the int32 range: a bias code saturates there.
INT32_LOW, INT32_HIGH = -(2**31), 2**31 - 128


def bias_codes(
    bias: torch.Tensor, input_scale: torch.Tensor, weight_scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """A layer's bias as int8 kernels take it: int32 codes round(b / s) on the grid s = input scale x weight
    scale (per output channel where the weights are), saturated to int32; (codes as float, s, whether any
    saturated). onnxruntime quantizes a float bias beside quantized inputs the same way (Mul, Div, Round,
    Cast), in float32."""
    scale = input_scale.float().reshape(()) * weight_scale.float()
    codes = torch.round(bias.float() / scale)
    # At an end counts too: a saved quantized model keeps the saturated bias, whose codes then sit there
    # exactly.
    saturated = bool(((codes <= INT32_LOW) | (codes >= INT32_HIGH)).any())
    return codes.clamp_(INT32_LOW, INT32_HIGH), scale, saturated


def int_dtype(grid: Grid) -> torch.dtype:
    """The smallest integer dtype that holds the grid's codes (for the saved quantized weights)."""
    if grid.signed:
        return torch.int8 if grid.bits <= 8 else torch.int16
    return torch.uint8 if grid.bits <= 8 else torch.int32
