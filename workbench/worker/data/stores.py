"""Image stores: where a dataset's pixels live (uint8 tensors in memory, or files decoded on demand) and their labels.

A store answers `fetch(indices) -> (uint8 (n,C,H,W), ok (n,))`; `ok` is False for samples that could not be
decoded, which callers skip. Splits are index sets into a store, so nothing is copied to make them.
"""

from __future__ import annotations

import torch


class ImageStore:
    """The interface every store implements; `labels` is int64 (N,), `shape` is (C,H,W)."""

    labels: torch.Tensor
    shape: tuple[int, int, int]
    in_memory: bool = True

    def __len__(self) -> int:
        return int(self.labels.numel())

    def fetch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def path(self, index: int) -> str:
        """The file a sample came from, or "" when the store has no files."""
        return ""

    def known_bad(self) -> torch.Tensor | None:
        """A bool mask of samples known not to decode, or None when every sample is good."""
        return None

    @property
    def skipped_files(self) -> list[dict]:
        return []

    @property
    def fully_decoded(self) -> bool:
        return True

    def decode(self, indices: torch.Tensor) -> None:
        """Make sure these samples are decoded (and bad ones known); a no-op for stores already in memory."""


class TensorStore(ImageStore):
    """Images held as one uint8 tensor (N,C,H,W): batches are gathers from it, never per-sample calls."""

    def __init__(self, data: torch.Tensor, labels: torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 4:
            raise ValueError(f"a TensorStore holds uint8 (N,C,H,W) images, not {data.dtype} {tuple(data.shape)}")
        if labels.numel() != data.shape[0]:
            raise ValueError(f"{data.shape[0]} images but {labels.numel()} labels")
        self.data = data.contiguous()
        self.labels = labels.to(torch.int64)
        self.shape = tuple(int(n) for n in data.shape[1:])

    def fetch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.as_tensor(indices, dtype=torch.int64)
        return self.data[indices], torch.ones(indices.numel(), dtype=torch.bool)


MEMORY_LIMIT_BYTES = 512 * 2**20  # datasets smaller than this are held in memory as one uint8 tensor


def nbytes(count: int, shape: tuple[int, int, int]) -> int:
    return count * shape[0] * shape[1] * shape[2]
