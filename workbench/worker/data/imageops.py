"""Pixel operations on uint8 image batches: resizing, thumbnails and value histograms.

Everything works on whole batches (n,C,H,W) so a page of thumbnails or a resized dataset is a few tensor ops.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

CHUNK = 4096  # images resized at a time: bounds the float32 copy of a large dataset


def parse_size(image_size: list[int] | tuple[int, ...]) -> tuple[int, int] | None:
    """DataSpec.image_size as (H, W): [] keeps the size (None), [n] is square, [h, w] is explicit."""
    if not image_size:
        return None
    if len(image_size) == 1:
        return int(image_size[0]), int(image_size[0])
    return int(image_size[0]), int(image_size[1])


def resize_uint8(images: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Resize uint8 (n,C,H,W) images to `size` (H, W), bilinear and antialiased when shrinking."""
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    out = torch.empty((images.shape[0], images.shape[1], *size), dtype=torch.uint8)
    for start in range(0, images.shape[0], CHUNK):
        chunk = images[start : start + CHUNK].to(torch.float32)
        resized = F.interpolate(chunk, size=size, mode="bilinear", align_corners=False, antialias=True)
        out[start : start + CHUNK] = resized.round_().clamp_(0, 255).to(torch.uint8)
    return out


def thumbnail_size(height: int, width: int, limit: int) -> tuple[int, int]:
    """The size a thumbnail of at most `limit` pixels a side gets: native when it fits, else scaled to fit."""
    if height <= limit and width <= limit:
        return height, width
    scale = limit / max(height, width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def thumbnails(images: torch.Tensor, limit: int) -> np.ndarray:
    """uint8 (n,C,H,W) images as uint8 (n,H,W,C) thumbnails no larger than `limit` a side."""
    size = thumbnail_size(images.shape[-2], images.shape[-1], limit)
    return to_hwc(resize_uint8(images, size))


def to_hwc(images: torch.Tensor) -> np.ndarray:
    """uint8 (n,C,H,W) or (C,H,W) as a contiguous numpy array with channels last, as the GUI draws them."""
    return np.ascontiguousarray(images.movedim(-3, -1).numpy())


def histogram(image: torch.Tensor, bins: int = 32) -> dict:
    """Per-channel counts of a uint8 (C,H,W) image's values in `bins` equal bins over 0..256."""
    edges = np.linspace(0, 256, bins + 1, dtype=np.float32)
    pixels = image.reshape(image.shape[0], -1).to(torch.int64) * bins // 256
    counts = np.stack([np.bincount(row.numpy(), minlength=bins) for row in pixels]).astype(np.int64)
    return {"edges": edges, "counts": counts}
