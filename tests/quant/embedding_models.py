"""Small models with transposed convs and embedding tables, and a helper that quantizes one the way the
quantize job does (trace, fold BatchNorms, weight ranges, optional AdaRound and bias correction, calibration),
at the Python level."""

from __future__ import annotations

import torch
from torch import nn

from workbench.specs import ActivationQuantSpec, WeightQuantSpec
from workbench.worker.quant import bias, cle
from workbench.worker.quant.graph import find_structure, fold_batchnorms, trace
from workbench.worker.quant.pipeline import _adaround_layer
from workbench.worker.quant.sim import QuantSim


class UNet(nn.Module):
    """Conv encoder (stride 2 down), ConvTranspose2d decoder (stride 2 up, then a grouped one), a skip
    concatenation and a per-pixel head: a segmentation map of 4 classes."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.enc2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2, bias=False)
        self.up_bn = nn.BatchNorm2d(8)
        self.dec = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU())
        self.refine = nn.ConvTranspose2d(8, 8, 3, padding=1, groups=2)
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a = self.enc1(x)
        u = torch.relu(self.up_bn(self.up(self.enc2(a))))
        return self.head(torch.relu(self.refine(self.dec(torch.cat([u, a], 1)))))


class Tokens(nn.Module):
    """Token ids (batch, 12) -> Embedding(50, 16) -> mean over the sequence -> Linear(16, 3)."""

    def __init__(self, bag: bool = False):
        super().__init__()
        self.bag = bag
        self.embed = nn.EmbeddingBag(50, 16, mode="mean") if bag else nn.Embedding(50, 16, padding_idx=0)
        self.fc = nn.Linear(16, 3)

    def forward(self, ids):
        return self.fc(self.embed(ids) if self.bag else self.embed(ids).mean(dim=1))


class Transposed1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 6, 3, padding=1)
        self.up = nn.ConvTranspose1d(6, 4, 4, stride=2, padding=1)

    def forward(self, x):
        return self.up(torch.relu(self.conv(x)))


class Transposed3d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(2, 4, 3, padding=1)
        self.up = nn.ConvTranspose3d(4, 3, 2, stride=2)

    def forward(self, x):
        return self.up(torch.relu(self.conv(x)))


def unet(seed: int = 0) -> UNet:
    """A UNet with BatchNorm statistics from real forward passes (so folding them means something)."""
    torch.manual_seed(seed)
    model = UNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.momentum = None
                m.weight.uniform_(0.5, 2.0)
                m.bias.uniform_(-0.5, 1.0)
        model.train()
        for k in range(10):
            model(images(32, seed=100 + k))
    return model.eval()


def images(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def token_ids(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 50, (n, 12), generator=torch.Generator().manual_seed(seed))


def batches(x: torch.Tensor, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        (x[i : i + size], torch.zeros(len(x[i : i + size]), dtype=torch.int64))
        for i in range(0, len(x), size)
    ]


def quantize(
    model: nn.Module,
    calibration,
    *,
    adaround: int = 0,
    correction: str = "none",
    weights: WeightQuantSpec | None = None,
) -> QuantSim:
    """The model quantized as the quantize job's ladder does it (no CLE), everything switched on."""
    gm = trace(model)
    folded = fold_batchnorms(gm)
    structure = find_structure(gm)
    if correction != "none":
        for layer in structure.layers.values():
            cle.ensure_bias(layer.module)  # as the job does: the correction needs a bias to go into
    sim = QuantSim(
        gm, structure, folded, weights=weights or WeightQuantSpec(), activations=ActivationQuantSpec()
    )
    sim.set_weight_ranges()
    sim.all(activations=False)
    for k, name in enumerate(list(sim.weights) if adaround else []):
        _adaround_layer(sim, name, calibration, adaround, k, None)
    sim.all(activations=False)
    if correction == "empirical":
        bias.empirical(sim, calibration)
    elif correction == "analytical":
        bias.analytical(sim, calibration)
    sim.all(activations=False)
    sim.calibrate(calibration, seed=0)
    sim.all()
    return sim
