"""The quantizers: grids, scales and zero points, and equality with torch's fake-quantize ops."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.worker.quant.quantizer import Grid, dequantize, fake_quant, qparams_from_range, quantize


def reference(x, scale, zero_point, qmin, qmax):
    """The paper's formula written out on plain torch ops (the float32 reciprocal, as torch's kernels use)."""
    inv = 1.0 / scale
    return (torch.clamp(torch.round(x * inv) + zero_point, qmin, qmax) - zero_point) * scale


def test_grids():
    assert (Grid.for_weights(8, True).qmin, Grid.for_weights(8, True).qmax) == (-127, 127)  # restricted
    assert (
        Grid.for_weights(8, True, restricted=False).qmin,
        Grid.for_weights(8, True, restricted=False).qmax,
    ) == (-128, 127)
    assert (Grid.for_weights(4, False).qmin, Grid.for_weights(4, False).qmax) == (0, 15)
    assert (
        Grid.for_activations(8, True, nonnegative=True).qmin,
        Grid.for_activations(8, True, True).qmax,
    ) == (0, 255)
    assert (
        Grid.for_activations(8, True, nonnegative=False).qmin,
        Grid.for_activations(8, True, False).qmax,
    ) == (-128, 127)
    assert (Grid.for_weights(16, True).qmin, Grid.for_weights(16, True).qmax) == (-32767, 32767)
    assert Grid.for_weights(2, True).levels == 3  # {-1, 0, 1}
    with pytest.raises(ValueError):
        Grid(1, True, True)


@pytest.mark.parametrize("bits", range(2, 9))
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_tensor_equals_torch_fake_quantize(bits, symmetric):
    torch.manual_seed(bits)
    x = torch.randn(4096) * 3 + (0 if symmetric else 1.5)
    grid = Grid.for_weights(bits, symmetric)
    # some clipping at the top, so clamping is exercised
    qp = qparams_from_range(x.min(), x.max() * 0.8, grid)
    expected = torch.fake_quantize_per_tensor_affine(
        x, float(qp.scale), int(qp.zero_point), grid.qmin, grid.qmax
    )
    assert torch.equal(fake_quant(x, qp), expected)  # the plain-ops path (no gradient wanted)
    assert torch.equal(fake_quant(x.clone().requires_grad_(), qp).detach(), expected)  # torch's op
    assert torch.equal(reference(x, qp.scale, qp.zero_point.float(), grid.qmin, grid.qmax), expected)
    assert torch.equal(dequantize(quantize(x, qp), qp), expected)
    codes = quantize(x, qp)
    assert codes.min() >= grid.qmin and codes.max() <= grid.qmax and torch.equal(codes, codes.round())


@pytest.mark.parametrize("bits", range(2, 9))
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_channel_equals_torch_fake_quantize(bits, symmetric):
    torch.manual_seed(100 + bits)
    w = torch.randn(16, 8, 3, 3) * torch.rand(16, 1, 1, 1) * 4
    rows = w.reshape(16, -1)
    grid = Grid.for_weights(bits, symmetric)
    qp = qparams_from_range(rows.min(1).values, rows.max(1).values * 0.9, grid, axis=0)
    expected = torch.fake_quantize_per_channel_affine(w, qp.scale, qp.zero_point, 0, grid.qmin, grid.qmax)
    assert torch.equal(fake_quant(w, qp), expected)
    assert torch.equal(fake_quant(w.clone().requires_grad_(), qp).detach(), expected)
    assert torch.equal(dequantize(quantize(w, qp), qp), expected)


def test_sixteen_bits_and_unsigned_activations():
    x = torch.rand(1000) * 6  # a ReLU's output
    grid = Grid.for_activations(16, symmetric=True, nonnegative=True)
    qp = qparams_from_range(x.min(), x.max(), grid)
    assert int(qp.zero_point) == 0 and (grid.qmin, grid.qmax) == (0, 65535)
    assert (fake_quant(x, qp) - x).abs().max() <= float(qp.scale) / 2 + 1e-7


def test_range_always_holds_zero_and_the_gradient_passes_straight_through():
    grid = Grid.for_weights(8, symmetric=False)
    qp = qparams_from_range(torch.tensor(0.5), torch.tensor(2.0), grid)  # widened to [0, 2]
    assert int(qp.zero_point) == 0 and float(fake_quant(torch.tensor([0.0]), qp)) == 0.0
    x = torch.linspace(-1, 3, 50, requires_grad=True)
    fake_quant(x, qp).sum().backward()
    inside = (x.detach() >= 0) & (x.detach() <= 2)
    assert torch.equal(x.grad, inside.float())


# --- far outside the grid: the no-gradient path is the grid's value, exactly --------------------------------

FINITE = st.floats(allow_nan=False, allow_infinity=False, width=32)  # every finite float32


@pytest.mark.parametrize(
    ("lo", "hi", "grid", "x", "expected"),
    [
        (0.0, 6.0, Grid.for_activations(8, True, nonnegative=True), 6e7, 6.0),
        (0.0, 6.0, Grid.for_activations(8, True, nonnegative=True), 1e9, 6.0),
        (-1.27, 1.27, Grid.for_weights(8, True), -1e6, -1.27),
    ],
)
def test_values_far_outside_the_grid_land_on_its_end(lo, hi, grid, x, expected):
    qp = qparams_from_range(torch.tensor(lo), torch.tensor(hi), grid)
    got = fake_quant(torch.tensor([x]), qp)
    assert torch.equal(got, dequantize(quantize(torch.tensor([x]), qp), qp))
    assert float(got) == pytest.approx(expected, rel=1e-6)
    graded = fake_quant(torch.tensor([x], requires_grad=True), qp)  # torch's op agrees
    assert torch.equal(graded.detach(), got)


@settings(max_examples=150)
@given(
    values=st.lists(FINITE, min_size=1, max_size=64),
    lo=st.floats(-100, 0),
    hi=st.floats(0, 100),
    bits=st.integers(2, 16),
    symmetric=st.booleans(),
)
def test_no_grad_fake_quant_is_dequantize_of_quantize_per_tensor(values, lo, hi, bits, symmetric):
    x = torch.tensor(values, dtype=torch.float32)
    grid = Grid.for_weights(bits, symmetric)
    qp = qparams_from_range(torch.tensor(lo), torch.tensor(hi), grid)
    got = fake_quant(x, qp)
    assert torch.equal(got, dequantize(quantize(x, qp), qp))
    low, high = qp.extent()
    assert bool((got >= low).all() and (got <= high).all())
    assert torch.equal(x, torch.tensor(values, dtype=torch.float32))  # the input is left alone


@settings(max_examples=100)
@given(
    values=st.lists(FINITE, min_size=12, max_size=12),
    bounds=st.lists(st.floats(0.01, 50), min_size=6, max_size=6),
    bits=st.integers(2, 16),
    symmetric=st.booleans(),
    axis=st.integers(0, 1),
)
def test_no_grad_fake_quant_is_dequantize_of_quantize_per_channel(values, bounds, bits, symmetric, axis):
    x = torch.tensor(values, dtype=torch.float32).reshape(3, 4)
    channels = x.shape[axis]
    b = torch.tensor(bounds[:channels])
    grid = Grid.for_weights(bits, symmetric)
    qp = qparams_from_range(-b * 0.5, b, grid, axis=axis)
    got = fake_quant(x, qp)
    assert torch.equal(got, dequantize(quantize(x, qp), qp))
    # where torch's op (the gradient path) is exact too: its int64 cast does not overflow
    inside = x.abs() < 1e9
    graded = fake_quant(x.clone().requires_grad_(), qp).detach()
    assert torch.equal(graded[inside], got[inside])


def test_the_gradient_path_still_passes_straight_through_per_channel():
    w = torch.linspace(-3, 3, 24).reshape(4, 6).requires_grad_()
    grid = Grid.for_weights(4, symmetric=True)
    qp = qparams_from_range(torch.full((4,), -2.0), torch.full((4,), 2.0), grid, axis=0)
    fake_quant(w, qp).sum().backward()
    low, high = qp.extent()
    inside = (w.detach() >= low.view(-1, 1)) & (w.detach() <= high.view(-1, 1))
    assert torch.equal(w.grad, inside.float())
    assert 0 < int(inside.sum()) < w.numel()
