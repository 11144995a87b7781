"""Loss functions by name: cross_entropy (with label smoothing), nll and mse on one-hot targets.

All take (scores, int64 labels) and return the batch mean in float32. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def build_loss(name: str, *, label_smoothing: float = 0.0, num_classes: int = 0) -> LossFn:
    # auto: classification's own loss (other tasks resolve theirs first)
    if name in ("auto", "cross_entropy"):
        return lambda scores, y: F.cross_entropy(scores.float(), y, label_smoothing=label_smoothing)
    if name == "nll":
        # log_softmax of log-probabilities is the identity, so this is right both for models that end in
        # log_softmax (what NLLLoss expects) and for ones that return raw scores.
        return lambda scores, y: F.nll_loss(F.log_softmax(scores.float(), dim=1), y)
    if name == "mse":
        return lambda scores, y: F.mse_loss(scores.float(), F.one_hot(y, scores.shape[1]).float())
    raise ValueError(f"unknown loss {name!r}")
