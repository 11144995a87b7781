"""AdaRound beats rounding to nearest on the layer's output; bias correction shrinks the mean output shift."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tiny_models import batches, inputs, skewed_convnet

from workbench.specs import ActivationQuantSpec, WeightQuantSpec
from workbench.worker.quant import bias
from workbench.worker.quant.adaround import adaround
from workbench.worker.quant.graph import find_structure, fold_batchnorms, trace
from workbench.worker.quant.quantizer import Grid, dequantize, qparams_from_range, quantize
from workbench.worker.quant.sim import QuantSim
from workbench.worker.quant.taps import channel_dim, channel_mean, collect


def test_adaround_lowers_the_layer_output_error_against_rounding_to_nearest():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(64, 32)
    # Correlated inputs, as a network's activations are: where rounding each weight alone is not the best.
    mix = torch.randn(64, 64, generator=g) / 8 + torch.eye(64)
    mix[:, :8] *= 4
    x_train = torch.randn(512, 64, generator=g) @ mix
    x_test = torch.randn(512, 64, generator=g) @ mix
    w = layer.weight.detach()
    rows = w.reshape(32, -1)
    qp = qparams_from_range(rows.min(1).values, rows.max(1).values, Grid.for_weights(3, True), axis=0)

    def forward(weight, x):
        return F.linear(x, weight, layer.bias.detach())

    with torch.no_grad():
        targets = forward(w, x_train)
    codes = adaround(w, qp, x_train, targets, forward, iterations=1000, seed=0)
    nearest = quantize(w, qp)
    assert codes.min() >= qp.grid.qmin and codes.max() <= qp.grid.qmax
    assert torch.all((codes - torch.floor(w / qp.scale.view(-1, 1))).abs() <= 1)  # only up or down
    assert not torch.equal(codes, nearest)
    for x in (x_train, x_test):
        with torch.no_grad():
            err_nearest = (forward(dequantize(nearest, qp), x) - forward(w, x)).pow(2).mean()
            err_adaround = (forward(dequantize(codes, qp), x) - forward(w, x)).pow(2).mean()
        assert err_adaround < 0.9 * err_nearest, (float(err_adaround), float(err_nearest))


def _sim(model, bits=3):
    gm = trace(model)
    folded = fold_batchnorms(gm)
    weights = WeightQuantSpec(bits=bits, granularity="per_tensor", range="minmax")
    sim = QuantSim(gm, find_structure(gm), folded, weights=weights, activations=ActivationQuantSpec())
    sim.set_weight_ranges()
    sim.all(activations=False)
    return sim


def mean_shift(sim, x, layer: str = "features.4") -> float:
    """Norm of E[y_q - y_fp] at a layer's output, per channel, over `x`."""
    conv = sim.weights[layer].module
    with sim.keeping():
        sim.fp32()
        fp = collect(sim, conv, batches(x), inputs=False)
        sim.all(activations=False)
        q = collect(sim, conv, batches(x), inputs=False)
    dim = channel_dim(conv)
    return float((channel_mean(torch.cat(q), dim) - channel_mean(torch.cat(fp), dim)).norm())


def test_empirical_bias_correction_shrinks_the_mean_output_shift():
    model = skewed_convnet(seed=1)
    sim = _sim(model)
    calibration, held_out = inputs(256, seed=5), inputs(256, seed=6)
    before = mean_shift(sim, held_out)
    bias.empirical(sim, batches(calibration))
    sim.all(activations=False)
    assert mean_shift(sim, calibration) < 1e-3 * max(before, 1e-6) + 1e-5  # measured on it: gone
    assert mean_shift(sim, held_out) < 0.5 * before


def test_analytical_bias_correction_uses_batchnorm_statistics_and_shrinks_the_shift():
    model = skewed_convnet(seed=2)
    sim = _sim(model)
    held_out = inputs(512, seed=7)
    before = {name: mean_shift(sim, held_out, name) for name in ("features.4", "classifier")}
    source = bias.analytical(sim, batches(inputs(128, seed=8)))
    # features.4 follows features.0 through ReLU and max pooling (which moves the mean): measured; the
    # classifier follows features.4 through ReLU and average pooling: from its folded BatchNorm.
    assert source == {"features.0": "data", "features.4": "data", "classifier": "bn"}
    sim.all(activations=False)
    # Less than the empirical correction removes: (W_q - W) E[x] ignores how the quantized layers before
    # change x.
    for name, shift in before.items():
        assert mean_shift(sim, held_out, name) < 0.75 * shift, name


def test_relu_mean_matches_sampling():
    mean, std = torch.tensor([-1.0, 0.0, 2.0]), torch.tensor([1.0, 0.5, 0.3])
    samples = torch.randn(200_000, 3, generator=torch.Generator().manual_seed(0)) * std + mean
    assert torch.allclose(bias.relu_mean(mean, std), samples.clamp(min=0).mean(0), atol=5e-3)
