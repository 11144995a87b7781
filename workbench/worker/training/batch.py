"""A batch's input as the engine meets it: one tensor (every built-in set), or a tuple or dict of tensors (a
user Dataset for a model with several inputs). Calling the model, slicing a rank's shard and the memory layout
treat all three alike. Worker side; never imports Qt.
"""

from __future__ import annotations

from typing import Any

import torch

from workbench.worker.models.build import call_model  # noqa: F401  (the engine calls models through it)

Batch = Any  # torch.Tensor | tuple[torch.Tensor, ...] | dict[str, torch.Tensor]


def slice_batch(x: Batch, lo: int, hi: int) -> Batch:
    """Samples lo:hi of every input (a DDP rank's shard of the batch)."""
    if isinstance(x, dict):
        return {key: value[lo:hi] for key, value in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(value[lo:hi] for value in x)
    return x[lo:hi]


def channels_last(x: Batch) -> Batch:
    """4-d image tensors in channels-last layout; anything else as it is."""
    if isinstance(x, torch.Tensor):
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
    if isinstance(x, dict):
        return {key: channels_last(value) for key, value in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(channels_last(value) for value in x)
    return x
