"""Cross-layer equalisation against aimet-torch's on the issue's peer test (#22, part 2): a MobileNet-like net
of four expand -> depthwise -> project blocks with ReLU, trained on digits, its BatchNorms folded, then every
layer pair rescaled per channel by factors in [1/30, 30] (the same function, its per-tensor ranges wrecked).
Each tool equalises a copy; then every conv and linear weight is quantized per tensor at W8 (symmetric
min-max) and the table gives held-out accuracy, logit SQNR against the float net, and the worst depthwise
layer's weight SQNR.

aimet-torch is a benchmark-only peer: run with a Python that has it (see benchmarks/busy_neighbour.py) and
this checkout on PYTHONPATH; without it, the aimet row is left out.

    PYTHONPATH=. AIMET_PYTHON/bin/python benchmarks/cle_peer.py [--epochs 4]
"""

from __future__ import annotations

import argparse
import copy
import logging
import math
import warnings

import torch
from torch import nn

from workbench.worker.quant import cle
from workbench.worker.quant.graph import cle_pairs, find_structure, trace


def block(c_in: int, hidden: int, c_out: int) -> list[nn.Module]:
    return [
        nn.Conv2d(c_in, hidden, 1, bias=False),
        nn.BatchNorm2d(hidden),
        nn.ReLU(),
        nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False),
        nn.BatchNorm2d(hidden),
        nn.ReLU(),
        nn.Conv2d(hidden, c_out, 1, bias=False),
        nn.BatchNorm2d(c_out),
    ]


def mobilenet_like() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        *block(8, 24, 12),
        *block(12, 32, 16),
        *block(16, 48, 16),
        *block(16, 48, 24),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(24, 10),
    )


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from workbench.worker.data.builtin import _digits_arrays

    images, labels = _digits_arrays()
    x = torch.as_tensor(images, dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    return (x - 0.3) / 0.4, torch.as_tensor(labels, dtype=torch.int64)


def train(model: nn.Module, x, y, epochs: int) -> nn.Module:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for index in torch.randperm(len(x), generator=g).split(64):
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


@torch.no_grad()
def fold(model: nn.Sequential) -> nn.Sequential:
    """Each BatchNorm folded into the conv before it and dropped: a plain net both tools read alike."""
    model = copy.deepcopy(model)
    layers = list(model)
    for i, layer in enumerate(layers):
        if isinstance(layer, nn.BatchNorm2d):
            conv = layers[i - 1]
            factor = layer.weight / torch.sqrt(layer.running_var + layer.eps)
            conv.weight.mul_(factor.view(-1, 1, 1, 1))
            bias = conv.bias if conv.bias is not None else torch.zeros_like(layer.running_mean)
            conv.bias = nn.Parameter((bias - layer.running_mean) * factor + layer.bias)
            layers[i] = None
    return nn.Sequential(*[layer for layer in layers if layer is not None]).eval()


@torch.no_grad()
def rescale(model: nn.Sequential, *, everywhere: bool, seed: int = 0) -> nn.Sequential:
    """Layer pairs rescaled: output channel c x s_c, the next layer's input c / s_c. Within the blocks only
    (the pairs either side of a depthwise layer, joined by ReLU: what AIMET's CLE equalises), or `everywhere`
    (also the project -> expand pairs across blocks, which no ReLU joins, and the stem)."""
    model = copy.deepcopy(model)
    gm = trace(model)
    modules = dict(model.named_modules())
    g = torch.Generator().manual_seed(seed)

    def depthwise(name: str) -> bool:
        return getattr(modules[name], "groups", 1) > 1

    for pair in cle_pairs(gm, find_structure(gm)):
        if not everywhere and not (depthwise(pair.first) or depthwise(pair.second)):
            continue
        first, second = modules[pair.first], modules[pair.second]
        s = torch.exp((torch.rand(first.weight.shape[0], generator=g) * 2 - 1) * math.log(30))
        first.weight.mul_(s.view(-1, *[1] * (first.weight.dim() - 1)))
        first.bias.mul_(s)
        cle._scale_inputs(second, 1 / s)
    return model


def ours(model: nn.Module) -> nn.Module:
    gm = trace(model)
    structure = find_structure(gm)
    modules = {name: layer.module for name, layer in structure.layers.items()}
    pairs = cle_pairs(gm, structure)
    cle.equalize(modules, pairs, {})
    return gm


def aimet(model: nn.Module) -> nn.Module | None:
    try:
        from aimet_torch.cross_layer_equalization import equalize_model
    except ImportError:
        return None
    model = copy.deepcopy(model)
    equalize_model(model, input_shapes=(1, 1, 8, 8))
    return model


@torch.no_grad()
def quantized_w8(model: nn.Module) -> nn.Module:
    model = copy.deepcopy(model)
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            scale = module.weight.abs().max() / 127
            module.weight.copy_((module.weight / scale).round().clamp(-127, 127) * scale)
    return model


def sqnr_db(reference: torch.Tensor, value: torch.Tensor) -> float:
    return 10 * math.log10(
        float(reference.square().sum() / (reference - value).square().sum().clamp_min(1e-30))
    )


@torch.no_grad()
def row(name: str, model: nn.Module, x, y, reference: torch.Tensor) -> str:
    q = quantized_w8(model)
    logits = q(x)
    accuracy = float((logits.argmax(1) == y).float().mean())
    depthwise = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d) and m.groups > 1]
    worst = min(_w8_sqnr(w) for w in depthwise)
    drift = float((model(x) - reference).abs().max())
    return f"| {name} | {accuracy:.2%} | {sqnr_db(reference, logits):.1f} | {worst:.1f} | {drift:.1e} |"


def _w8_sqnr(weight: torch.Tensor) -> float:
    scale = weight.abs().max() / 127
    return sqnr_db(weight, (weight / scale).round().clamp(-127, 127) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    x, y = digits()
    net = fold(train(mobilenet_like(), x, y, args.epochs))
    with torch.no_grad():
        reference = net(x)
    print(
        f"digits, {len(x)} images; float accuracy {float((reference.argmax(1) == y).float().mean()):.2%}; "
        "weights W8 per tensor, symmetric min-max"
    )
    print("| net | W8 accuracy | logit SQNR dB | worst depthwise weight SQNR dB | float drift from the net |")
    print("|---|---|---|---|---|")
    print(row("trained, BN folded", net, x, y, reference))
    for everywhere, where in ((False, "within blocks"), (True, "every pair")):
        wrecked = rescale(net, everywhere=everywhere)
        print(row(f"rescaled {where}, no CLE", wrecked, x, y, reference))
        print(row(f"rescaled {where}, workbench CLE", ours(wrecked), x, y, reference))
        peer = aimet(wrecked)
        print(
            row(f"rescaled {where}, aimet-torch CLE", peer, x, y, reference)
            if peer is not None
            else f"| rescaled {where}, aimet-torch CLE | not installed | | | |"
        )


if __name__ == "__main__":
    main()
