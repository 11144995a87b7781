"""BN folding and cross-layer equalisation keep the FP32 function; CLE narrows the per-channel range
spread."""

from __future__ import annotations

import torch
from tiny_models import inputs, skewed_convnet

from workbench.worker.quant import cle
from workbench.worker.quant.graph import cle_pairs, find_structure, fold_batchnorms, trace


def spread(ranges: torch.Tensor) -> float:
    """Largest over smallest per-channel absolute range."""
    absolute = ranges.abs().max(dim=1).values
    return float(absolute.max() / absolute.min())


def test_folding_keeps_the_function_and_records_the_batchnorm_statistics():
    model = skewed_convnet()
    x = inputs(64)
    gm = trace(model)
    folded = fold_batchnorms(gm)
    assert sorted(folded) == ["features.0", "features.4"]
    assert folded["features.0"]["bn"] == "features.1"
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in gm.modules())
    assert torch.allclose(gm(x), model(x), atol=1e-5)
    # untouched
    assert all(isinstance(m, torch.nn.BatchNorm2d) for m in (model.features[1], model.features[5]))


def test_cle_preserves_the_fp32_function_and_narrows_the_range_spread():
    model = skewed_convnet()
    x = inputs(64)
    gm = trace(model)
    folded = fold_batchnorms(gm)
    structure = find_structure(gm)
    pairs = cle_pairs(gm, structure)
    assert [(p.first, p.second, p.relu) for p in pairs] == [
        ("features.0", "features.4", True),
        ("features.4", "classifier", True),
    ]
    modules = {name: layer.module for name, layer in structure.layers.items()}
    before = {name: cle.output_ranges(m) for name, m in modules.items()}
    expected = gm(x)
    cle.equalize(modules, pairs, folded)
    assert (gm(x) - expected).abs().max() <= 1e-5
    after = {name: cle.output_ranges(m) for name, m in modules.items()}
    assert spread(after["features.0"]) < spread(before["features.0"]) / 10
    assert spread(after["features.4"]) < spread(before["features.4"])


def test_bias_absorption_moves_what_relu_never_passes_and_keeps_the_output_close():
    model = skewed_convnet(seed=3)
    x = inputs(256)
    gm = trace(model)
    folded = fold_batchnorms(gm)
    structure = find_structure(gm)
    pairs = cle_pairs(gm, structure)
    modules = {name: layer.module for name, layer in structure.layers.items()}
    with torch.no_grad():
        # A layer whose outputs sit well above zero: beta - 3 gamma > 0 for every channel.
        folded["features.4"]["mean"] = folded["features.4"]["mean"] + 10 * folded["features.4"]["std"]
        modules["features.4"].bias.add_(10 * folded["features.4"]["std"])
    with torch.no_grad():
        expected = gm(x)
    bias_before = modules["features.4"].bias.detach().clone()
    moved = cle.absorb_biases(modules, pairs, folded)
    assert set(moved) == {"features.4"} and moved["features.4"] > 0
    assert torch.all(modules["features.4"].bias < bias_before)
    # Exact where the ReLU's input stays above c (all but a few values beyond 3 sigma): close, not equal.
    with torch.no_grad():
        difference = (gm(x) - expected).abs()
    assert float(difference.mean()) < 1e-3 * float(expected.abs().mean())
    assert float(difference.max()) < 1e-2 * float(expected.abs().max())
