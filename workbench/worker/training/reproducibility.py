"""Seeds, deterministic mode and the RNG states a checkpoint carries (as plain lists, for weights_only
loading).

Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import os
import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (every CUDA device too) for weight initialisation and dropout."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextlib.contextmanager
def deterministic_mode(enabled: bool):
    """Deterministic algorithms for the job's duration, then the worker's previous settings again.

    warn_only: an op without a deterministic kernel warns instead of failing a long run at some later step.
    """
    if not enabled:
        yield
        return
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    # cuBLAS needs a fixed workspace to be deterministic; it reads this when it first initialises.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[2], before[3]


def rng_state() -> dict:
    """Every RNG state, in types torch.load(weights_only=True) accepts (tensors, lists, ints, floats, str)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "python": [int(version), [int(v) for v in internal], gauss_next],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if "numpy" in state:
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "python" in state:
        version, internal, gauss_next = state["python"]
        random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        # A checkpoint from a machine with more GPUs restores what this one has.
        torch.cuda.set_rng_state_all([s.cpu() for s in cuda[: torch.cuda.device_count()]])
