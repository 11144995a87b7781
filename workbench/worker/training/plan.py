"""The batch plan of an epoch: global batch sizes, which optimiser step each batch belongs to, and each rank's
shard of a global batch. Host arithmetic only, known before the epoch starts, so the loop never asks the
device.

Worker side; never imports Qt.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpochPlan:
    batch_sizes: tuple[int, ...]  # global batch sizes, in order
    group_of: tuple[int, ...]  # batch index -> optimiser step within the epoch
    group_start: tuple[int, ...]  # optimiser step -> index of its first batch
    group_end: tuple[int, ...]  # optimiser step -> index after its last batch
    group_total: tuple[int, ...]  # optimiser step -> samples it sees, over all ranks

    @property
    def steps(self) -> int:
        return len(self.group_start)

    @property
    def samples(self) -> int:
        return sum(self.batch_sizes)


def plan_epoch(n: int, batch_size: int, accum: int = 1, world: int = 1) -> EpochPlan:
    """Batches of `batch_size` (the last may be smaller), grouped `accum` at a time into optimiser steps.

    With several ranks a last batch smaller than the number of ranks is dropped: some rank would get nothing.
    """
    sizes = [batch_size] * (n // batch_size) + ([n % batch_size] if n % batch_size else [])
    if world > 1 and sizes and sizes[-1] < world:
        sizes.pop()
    starts = list(range(0, len(sizes), accum))
    ends = [min(s + accum, len(sizes)) for s in starts]
    group_of = [g for g, (s, e) in enumerate(zip(starts, ends)) for _ in range(s, e)]
    totals = [sum(sizes[s:e]) for s, e in zip(starts, ends)]
    return EpochPlan(tuple(sizes), tuple(group_of), tuple(starts), tuple(ends), tuple(totals))


def shard_bounds(size: int, world: int, rank: int) -> tuple[int, int]:
    """This rank's [start, end) of a global batch of `size`: near-equal parts, the first ones one larger."""
    base, extra = divmod(size, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)
