"""A small U-Net: two downsamplings, two upsamplings with skip connections, one score map per class."""

import torch
from torch import nn


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, num_classes: int = 3, channels: int = 3, width: int = 16):
        super().__init__()
        self.down1 = _block(channels, width)
        self.down2 = _block(width, 2 * width)
        self.bottom = _block(2 * width, 4 * width)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.merge2 = _block(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.merge1 = _block(2 * width, width)
        self.head = nn.Conv2d(width, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        b = self.bottom(self.pool(d2))
        u2 = self.merge2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.merge1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)
