"""CLE on torchvision mobilenet_v2 (weights=None, torch.manual_seed(0), BatchNorms folded in eval mode): the
per-tensor W8 weight SQNR of each of its 17 depthwise layers with the ReLU6s kept (CLE can pair none of them)
and after ReLU6 -> ReLU (white paper 4.1) and CLE with its expand -> depthwise -> project triplets; then the
logit SQNR against the float model with every conv and linear weight quantized per tensor at W8, on random
3x224x224 inputs.

    PYTHONPATH=. .venv/bin/python benchmarks/cle_mobilenet.py [--size 224] [--batch 8]
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics

import torch
import torchvision

from workbench.worker.quant import cle
from workbench.worker.quant.graph import cle_pairs, cle_triplets, find_structure, fold_batchnorms, trace
from workbench.worker.quant.relu6 import relu6_to_relu


def w8_per_tensor(weight: torch.Tensor) -> torch.Tensor:
    scale = weight.abs().max() / 127
    return (weight / scale).round().clamp(-127, 127) * scale


def sqnr_db(reference: torch.Tensor, approx: torch.Tensor) -> float:
    return 10 * math.log10(
        float(reference.double().square().sum() / (reference - approx).double().square().sum())
    )


@torch.no_grad()
def logits_with_w8(gm, modules: dict, x: torch.Tensor) -> torch.Tensor:
    """The graph's output with every weight quantized per tensor at W8 (on a copy)."""
    copied = copy.deepcopy(gm)
    for name in modules:
        weight = copied.get_submodule(name).weight
        weight.copy_(w8_per_tensor(weight))
    return copied(x)


def modules_of(structure) -> dict:
    return {name: layer.module for name, layer in structure.layers.items()}


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(weights=None).eval()
    x = torch.randn(args.batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
    reference = model(x)

    gm = trace(model)
    stats = fold_batchnorms(gm)
    structure = find_structure(gm)
    names = [n for n, layer in structure.layers.items() if cle.is_depthwise(layer.module)]
    kept = cle_pairs(gm, structure)
    kept_equalised = [n for n in names if any(n in (p.first, p.second) for p in kept)]
    before = {
        n: sqnr_db(structure.layers[n].module.weight, w8_per_tensor(structure.layers[n].module.weight))
        for n in names
    }
    logits_before = logits_with_w8(gm, modules_of(structure), x)

    replaced = relu6_to_relu(gm, structure)
    relu_logits = gm(x)
    structure = find_structure(gm)
    modules = modules_of(structure)
    pairs = cle_pairs(gm, structure)
    triplets = cle_triplets(pairs, structure)
    cle.equalize(modules, pairs, stats)
    cle.absorb_biases(modules, pairs, stats)
    after_logits = gm(x)
    after = {n: sqnr_db(modules[n].weight, w8_per_tensor(modules[n].weight)) for n in names}
    logits_after = logits_with_w8(gm, modules, x)

    print(f"ReLU6 kept: {len(kept_equalised)} of {len(names)} depthwise layers in a CLE pair")
    print(f"ReLU6 -> ReLU: {len(replaced)} replaced; {len(pairs)} pairs, {len(triplets)} triplets")
    print(
        f"float change of ReLU6 -> ReLU: logit SQNR {sqnr_db(reference, relu_logits):.1f} dB, argmax agree "
        f"{float((reference.argmax(1) == relu_logits.argmax(1)).float().mean()):.0%}"
    )
    print(
        "CLE keeps the ReLU model: relative change "
        f"{float((after_logits - relu_logits).norm() / relu_logits.norm()):.1e}"
    )
    print(
        "\n| depthwise layer | W8 per-tensor SQNR before (dB) | after (dB) | gain (dB) |\n|---|---|---|---|"
    )
    for n in names:
        print(f"| {n} | {before[n]:.2f} | {after[n]:.2f} | {after[n] - before[n]:+.2f} |")
    median_before, median_after = statistics.median(before.values()), statistics.median(after.values())
    print(
        f"| **median** | **{median_before:.2f}** | **{median_after:.2f}** | "
        f"**{median_after - median_before:+.2f}** |"
    )
    print(
        f"\nevery weight W8 per tensor, logit SQNR against float: ReLU6 kept, no CLE "
        f"{sqnr_db(reference, logits_before):.1f} dB; ReLU + CLE {sqnr_db(relu_logits, logits_after):.1f} dB "
        f"(against the ReLU model)"
    )


if __name__ == "__main__":
    main()
