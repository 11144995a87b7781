"""CLE equalises depthwise networks (issue #22): a trained MobileNet-like net on digits (expand -> depthwise
-> project blocks) has every depthwise layer in a pair on both sides, as triplets, and after a
function-preserving per-channel rescale of about 30x that ruins its per-tensor ranges, CLE restores each
depthwise layer's W8 weight SQNR to within 0.5 dB of the trained net's, with the logits kept to 1e-4. ReLU6
between two layers is named, not crossed."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from workbench.worker.quant import cle
from workbench.worker.quant.graph import (
    cle_chains,
    cle_pairs,
    cle_triplets,
    find_structure,
    fold_batchnorms,
    trace,
)


def block(c_in: int, hidden: int, c_out: int, act=nn.ReLU) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, hidden, 1, bias=False),
        nn.BatchNorm2d(hidden),
        act(),
        nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
        nn.BatchNorm2d(hidden),
        act(),
        nn.Conv2d(hidden, c_out, 1, bias=False),
        nn.BatchNorm2d(c_out),
    ]


def mobilenet_like(act=nn.ReLU) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        act(),
        *block(8, 24, 12, act),
        *block(12, 32, 16, act),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from workbench.worker.data.builtin import _digits_arrays

    images, labels = _digits_arrays()
    x = torch.as_tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    return (x - 0.3) / 0.4, torch.as_tensor(labels, dtype=torch.int64)


@pytest.fixture(scope="module")
def trained(digits) -> nn.Module:
    x, y = digits
    model = mobilenet_like()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(4):
        for index in torch.randperm(len(x), generator=g).split(64):
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        assert (model(x).argmax(1) == y).float().mean() > 0.9
    return model


def per_tensor_w8_sqnr_db(weight: torch.Tensor) -> float:
    scale = weight.abs().max() / 127
    error = weight - (weight / scale).round().clamp(-127, 127) * scale
    return 10 * math.log10(float(weight.square().sum() / error.square().sum()))


def folded(model: nn.Module):
    gm = trace(copy.deepcopy(model))
    stats = fold_batchnorms(gm)
    structure = find_structure(gm)
    return gm, stats, structure, {name: layer.module for name, layer in structure.layers.items()}


def depthwise(modules: dict) -> list[str]:
    return [name for name, m in modules.items() if isinstance(m, nn.Conv2d) and m.groups > 1]


@torch.no_grad()
def rescale(modules: dict, pairs, seed: int = 0) -> None:
    """Output channel c of each pair's first layer x s_c, the second's input c / s_c, s_c in [1/30, 30]: the
    same function, per-tensor ranges wrecked."""
    g = torch.Generator().manual_seed(seed)
    for pair in pairs:
        first = modules[pair.first]
        s = torch.exp((torch.rand(first.weight.shape[0], generator=g) * 2 - 1) * math.log(30))
        first.weight.mul_(s.view(-1, 1, 1, 1))
        if first.bias is not None:
            first.bias.mul_(s)
        cle._scale_inputs(modules[pair.second], 1 / s)


def test_every_depthwise_layer_is_paired_on_both_sides_as_a_triplet(trained):
    gm, _, structure, modules = folded(trained)
    pairs = cle_pairs(gm, structure)
    names = depthwise(modules)
    assert len(names) == 2
    for name in names:
        assert any(p.second == name for p in pairs) and any(p.first == name for p in pairs), name
    assert cle_triplets(pairs, structure) == [["3", "6", "9"], ["11", "14", "17"]]
    assert cle_chains(pairs) == [["0", "3", "6", "9", "11", "14", "17", "21"]]  # no branch: one chain


def test_cle_restores_the_depthwise_sqnr_of_a_rescaled_net_and_keeps_its_logits(trained, digits):
    x, _ = digits
    gm0, _, _, modules0 = folded(trained)
    before = {name: per_tensor_w8_sqnr_db(modules0[name].weight) for name in depthwise(modules0)}
    with torch.no_grad():
        expected = gm0(x)

    gm, stats, structure, modules = folded(trained)
    pairs = cle_pairs(gm, structure)
    rescale(modules, pairs)
    with torch.no_grad():
        assert (gm(x) - expected).abs().max() < 1e-4  # the rescale kept the function ...
    wrecked = {name: per_tensor_w8_sqnr_db(modules[name].weight) for name in before}
    # ... and hurt the ranges
    assert all(wrecked[name] < before[name] - 3 for name in before), (wrecked, before)

    cle.equalize(modules, pairs, stats)
    with torch.no_grad():
        assert (gm(x) - expected).abs().max() < 1e-4
    after = {name: per_tensor_w8_sqnr_db(modules[name].weight) for name in before}
    assert all(after[name] >= before[name] - 0.5 for name in before), (after, before)


def test_relu6_between_two_layers_is_named_not_crossed():
    gm, _, structure, _ = folded(mobilenet_like(nn.ReLU6).eval())
    clipped: list = []
    pairs = cle_pairs(gm, structure, clipped)
    assert {(p.first, p.second) for p in pairs} == {("9", "11"), ("17", "21")}  # no activation between these
    assert {(a, b) for a, b, _ in clipped} == {("0", "3"), ("3", "6"), ("6", "9"), ("11", "14"), ("14", "17")}
