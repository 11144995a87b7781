"""Synthetic shapes for segmentation: a noisy 32x32 image with a square and a disc; the mask marks each pixel
as background (0), square (1) or disc (2). Made from the sample index, so it needs no files and no
download."""

import torch
from torch.utils.data import Dataset

CLASSES = ["background", "square", "disc"]


class Shapes(Dataset):
    classes = CLASSES

    def __init__(self, size: int = 600, side: int = 32):
        self.size, self.side = size, side

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        g = torch.Generator().manual_seed(index)
        side = self.side
        mask = torch.zeros(side, side, dtype=torch.int64)
        top, left = (int(v) for v in torch.randint(0, side - 10, (2,), generator=g))
        width = int(torch.randint(6, 11, (1,), generator=g))
        mask[top : top + width, left : left + width] = 1
        cy, cx = (float(v) for v in torch.randint(6, side - 6, (2,), generator=g))
        radius = float(torch.randint(3, 7, (1,), generator=g))
        ys, xs = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
        mask[(ys - cy) ** 2 + (xs - cx) ** 2 <= radius**2] = 2
        image = torch.stack([(mask == 1).float(), (mask == 2).float(), torch.zeros(side, side)])
        image = 0.6 * image + 0.25 * torch.randn(3, side, side, generator=g)
        return image, mask
