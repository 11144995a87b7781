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

    def resident(self) -> torch.Tensor | None:
        """Every sample as one uint8 (N,C,H,W) tensor, or None while some are not in memory (or never will be).

        What a device-resident copy is made from; rows of samples in known_bad() hold no image.
        """
        return None

    def fetch_into(self, indices: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Write the images at `indices` into `out` (uint8, first len(indices) rows); returns the ok mask.

        Lets a caller gather into a buffer it reuses (pinned staging memory) instead of a fresh tensor a batch.
        """
        images, ok = self.fetch(indices)
        out[:images.shape[0]].copy_(images)
        return ok


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

    def resident(self) -> torch.Tensor:
        return self.data

    def fetch_into(self, indices: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        indices = torch.as_tensor(indices, dtype=torch.int64)
        torch.index_select(self.data, 0, indices, out=out[:indices.numel()])
        return torch.ones(indices.numel(), dtype=torch.bool)


MEMORY_LIMIT_BYTES = 512 * 2**20  # datasets smaller than this are held in memory as one uint8 tensor


def nbytes(count: int, shape: tuple[int, int, int]) -> int:
    return count * shape[0] * shape[1] * shape[2]
