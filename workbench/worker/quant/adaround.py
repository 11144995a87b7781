"""AdaRound (Nagel et al. 2020, "Up or Down? Adaptive Rounding for Post-Training Quantization"; the white
paper's section 4.2): learn per weight whether to round up or down so that the layer's output, on calibration
inputs from the partly quantized network, stays close to the FP32 output. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from workbench.worker.quant.quantizer import QParams

ZETA, GAMMA = 1.1, -0.1  # the rectified sigmoid's stretch: h(V) reaches exactly 0 and 1
REGULARIZATION = 0.01  # lambda of the rounding regulariser
WARMUP = 0.2  # fraction of the iterations without the regulariser
BETA_START, BETA_END = 20.0, 2.0  # the regulariser's exponent, annealed
LR = 1e-2  # higher than the paper's 1e-3: our budgets are hundreds of steps, not 10,000
BATCH = 32


def _view(t: torch.Tensor, w: torch.Tensor, qp: QParams) -> torch.Tensor:
    if qp.axis is None:
        return t.reshape(())
    shape = [1] * w.dim()
    shape[qp.axis] = -1
    return t.view(shape)


def rectified_sigmoid(v: torch.Tensor) -> torch.Tensor:
    return (torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA).clamp(0, 1)


def adaround(
    w: torch.Tensor,
    qp: QParams,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    *,
    iterations: int,
    seed: int = 0,
    check_stop: Callable[[], None] | None = None,
) -> torch.Tensor:
    """The integer codes of `w` (float tensor, like quantize()) that AdaRound learns.

    `forward(weights, x)` is the layer (and its activation) with the given weights; `inputs` and `targets` are
    the calibration inputs to the layer and the FP32 outputs it should keep, first dimension the sample.
    """
    w = w.detach().float()
    scale, z = _view(qp.scale, w, qp), _view(qp.zero_point.float(), w, qp)
    scaled = w * (1.0 / scale)
    floor = torch.floor(scaled)
    rest = scaled - floor
    # h(V) starts at the fractional part: the soft weights start equal to the FP32 ones.
    v = (-torch.log((ZETA - GAMMA) / (rest - GAMMA) - 1)).requires_grad_(True)
    optimizer = torch.optim.Adam([v], lr=LR)
    generator = torch.Generator().manual_seed(seed)
    n = inputs.shape[0]
    warmup = int(WARMUP * iterations)
    qmin, qmax = qp.grid.qmin, qp.grid.qmax
    for step in range(iterations):
        if check_stop is not None and step % 50 == 0:
            check_stop()
        index = torch.randint(0, n, (min(BATCH, n),), generator=generator).to(inputs.device)
        h = rectified_sigmoid(v)
        soft = (torch.clamp(floor + h + z, qmin, qmax) - z) * scale
        out = forward(soft, inputs[index])
        reconstruction = (out - targets[index]).pow(2).sum(dim=1).mean()
        loss = reconstruction
        if step >= warmup:
            progress = (step - warmup) / max(iterations - warmup, 1)
            beta = BETA_START + (BETA_END - BETA_START) * progress
            loss = loss + REGULARIZATION * (1 - (2 * h - 1).abs().pow(beta)).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        return torch.clamp(floor + (v >= 0).float() + z, qmin, qmax)
