"""Tiny CPU models for the quantization unit tests, with channels of very different ranges (what CLE
fixes)."""

from __future__ import annotations

import torch
from torch import nn


class ConvNet(nn.Module):
    """conv-BN-ReLU-maxpool-conv-BN-ReLU-avgpool-linear: the shape of the digits cnn, smaller."""

    def __init__(self, batchnorm: bool = True):
        super().__init__()
        norm = (lambda c: nn.BatchNorm2d(c)) if batchnorm else (lambda c: nn.Identity())
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=not batchnorm),
            norm(8),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=not batchnorm),
            norm(16),
            nn.ReLU(inplace=True),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(16, 5)

    def forward(self, x):
        return self.classifier(self.pool(self.features(x)).flatten(1))


def skewed_convnet(seed: int = 0, batchnorm: bool = True) -> ConvNet:
    """A ConvNet whose first layer's output channels span three orders of magnitude, with BatchNorm statistics
    from real forward passes (so folding and BN-based estimates are meaningful)."""
    torch.manual_seed(seed)
    model = ConvNet(batchnorm)
    skew = torch.logspace(-1.5, 1.5, 8)
    with torch.no_grad():
        if not batchnorm:
            model.features[0].weight.mul_(skew.view(-1, 1, 1, 1))
        else:
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.momentum = None  # a cumulative average over the warm-up batches
                    m.weight.uniform_(0.5, 2.0)
                    m.bias.uniform_(-0.5, 1.5)
            model.train()
            # Folding multiplies each channel's weights by gamma / sigma: skew gamma, and the folded layer is
            # skewed.
            model.features[1].weight.mul_(skew)
            model.features[1].bias.mul_(skew)
            for _ in range(20):
                model(inputs(64, seed=seed + 1000 + _))
    return model.eval()


def inputs(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(seed))


def batches(x: torch.Tensor, size: int = 32) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        (x[i : i + size], torch.zeros(len(x[i : i + size]), dtype=torch.int64))
        for i in range(0, len(x), size)
    ]
