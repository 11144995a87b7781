"""Per-channel mean/std of a dataset's train split, computed once and cached as JSON in <workspace>/cache/.

The cache file is named by a hash of everything that changes the numbers (dataset, root, seed, fractions,
image size, and the file listing for image folders), so a different split or resize never reuses stale values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
from pathlib import Path

import torch

log = logging.getLogger(__name__)

# 2: splits are stratified by class, so a train split (and its statistics) differs from version 1's.
STATS_VERSION = 2
SAMPLE_LIMIT = 20_000  # images read for the statistics of a dataset too big to hold in memory
CHUNK = 2048  # images summed at a time at most
# and at most this much float64 copy of them: 2048 images of 4096x4096 would be 800 GB
CHUNK_BYTES = 64 * 2**20


def stats_key(spec, root: str, fingerprint: str) -> dict:
    key = {
        "version": STATS_VERSION,
        "name": spec.name,
        "root": root,
        "seed": spec.seed,
        "val_fraction": spec.val_fraction,
        "test_fraction": spec.test_fraction,
        "image_size": list(spec.image_size),
        "fingerprint": fingerprint,
    }
    if spec.name == "fake":
        key.update(size=spec.size, num_classes=spec.num_classes)
    return key


def stats_path(workspace: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return Path(workspace) / "cache" / f"data-stats-{digest}.json"


def read_stats(path: Path, key: dict, channels: int) -> tuple[list[float], list[float]] | None:
    """The cached (mean, std), or None when the file is missing, unreadable or for other data."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        mean, std = data["mean"], data["std"]
        ok = (
            data.get("key") == key
            and len(mean) == len(std) == channels
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in mean + std)
            and all(v > 0 for v in std)
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ([float(v) for v in mean], [float(v) for v in std]) if ok else None


def write_stats(path: Path, key: dict, mean: list[float], std: list[float], count: int) -> None:
    """Write atomically (temp file, then rename) so a crash never leaves half a cache file; failures only
    log."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".data-stats-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "mean": mean, "std": std, "images": count}, f, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not cache dataset statistics in %s: %s", path, exc)


def compute_stats(store, indices: torch.Tensor, progress=None) -> tuple[list[float], list[float], int]:
    """Mean and std per channel, in 0..1 pixel units, of the store's images at `indices` (bad files left
    out)."""
    if not store.in_memory and indices.numel() > SAMPLE_LIMIT:
        pick = torch.randperm(indices.numel(), generator=torch.Generator().manual_seed(0))[:SAMPLE_LIMIT]
        indices = indices[pick.sort().values]
    channels = store.shape[0]
    chunk = max(1, min(CHUNK, CHUNK_BYTES // (8 * channels * store.shape[1] * store.shape[2])))
    total = torch.zeros(channels, dtype=torch.float64)
    squares = torch.zeros(channels, dtype=torch.float64)
    count = 0
    for start in range(0, indices.numel(), chunk):
        images, ok = store.fetch(indices[start : start + chunk])
        images = images[ok].to(torch.float64)
        total += images.sum(dim=(0, 2, 3))
        squares += images.square_().sum(dim=(0, 2, 3))  # in place: one float64 copy of the chunk, not two
        count += images.shape[0]
        if progress is not None:
            progress(min(start + chunk, indices.numel()), indices.numel(), "computing mean and std")
    pixels = count * store.shape[1] * store.shape[2]
    if pixels == 0:
        return [0.0] * channels, [1.0] * channels, 0
    mean = total / pixels
    var = (squares / pixels - mean.square()).clamp(min=0)
    std = var.sqrt()
    # A constant channel has std 0; dividing by it would make infinities, so leave its scale alone.
    std = torch.where(std > 0, std, torch.full_like(std, 255.0))
    return (mean / 255).tolist(), (std / 255).tolist(), count
