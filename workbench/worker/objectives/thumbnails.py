"""Small uint8 thumbnails of model inputs and class masks, stored in evaluation.json as base64 of raw bytes,
so the evaluation view draws the worst images without asking the worker (or the user's Dataset) for them
again.

Device-side tensors in, host bytes out; pure torch, never imports Qt.
"""

from __future__ import annotations

import base64

import torch
import torch.nn.functional as F

SIDE = 64  # the longer side of a thumbnail, in pixels; smaller images keep their size


def thumbnail_size(height: int, width: int, side: int = SIDE) -> tuple[int, int]:
    scale = min(1.0, side / max(height, width, 1))
    return max(1, round(height * scale)), max(1, round(width * scale))


def image_thumbnails(inputs, height: int, width: int, side: int = SIDE) -> torch.Tensor | None:
    """(N, h, w, C) uint8 with C 1 or 3, from (N, C, height, width) model inputs: the first channel, or the
    first three, each image stretched over 0..255 on its own (inputs are normalised, so their range says
    nothing); None for inputs that are not one image per sample of the masks' size (a tuple of inputs, a 1-D
    signal)."""
    if (
        not isinstance(inputs, torch.Tensor)
        or inputs.dim() != 4
        or tuple(inputs.shape[2:]) != (height, width)
    ):
        return None
    x = inputs.detach().float()
    x = x[:, :3] if x.shape[1] >= 3 else x[:, :1]
    h, w = thumbnail_size(height, width, side)
    if (h, w) != (height, width):
        x = F.interpolate(x, size=(h, w), mode="area")
    x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    low = x.amin(dim=(1, 2, 3), keepdim=True)
    span = (x.amax(dim=(1, 2, 3), keepdim=True) - low).clamp(min=1e-12)
    return ((x - low) / span * 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def mask_thumbnails(masks: torch.Tensor, side: int = SIDE) -> torch.Tensor:
    """(N, h, w) uint8 class maps from (N, H, W) ones, by nearest pixel (a class is never blended into
    another)."""
    height, width = int(masks.shape[1]), int(masks.shape[2])
    h, w = thumbnail_size(height, width, side)
    if (h, w) != (height, width):
        rows = (torch.arange(h, device=masks.device) * height // h).view(h, 1)
        cols = (torch.arange(w, device=masks.device) * width // w).view(1, w)
        masks = masks[:, rows, cols]
    return masks.to(torch.uint8)


def encode(array: torch.Tensor) -> str:
    """Raw uint8 bytes as base64 text (the shape travels beside it)."""
    return base64.b64encode(array.detach().cpu().contiguous().numpy().tobytes()).decode("ascii")
