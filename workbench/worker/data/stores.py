"""Image stores: where a dataset's pixels live (uint8 tensors in memory, or files decoded on demand) and their
labels.

A store answers `fetch(indices) -> (uint8 (n,C,H,W), ok (n,))`; `ok` is False for samples that could not be
decoded, which callers skip. Splits are index sets into a store, so nothing is copied to make them. One memory
budget, a share of the machine's available memory, bounds every dataset held in memory.
"""

from __future__ import annotations

import os

import torch

from workbench.errors import JobError


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
        """Every sample as one uint8 (N,C,H,W) tensor, or None while some are not in memory (or never will
        be).

        What a device-resident copy is made from; rows of samples in known_bad() hold no image.
        """
        return None

    def fetch_into(self, indices: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Write the images at `indices` into `out` (uint8, first len(indices) rows); returns the ok mask.

        Lets a caller gather into a buffer it reuses (pinned staging memory) instead of a fresh tensor a
        batch.
        """
        images, ok = self.fetch(indices)
        out[: images.shape[0]].copy_(images)
        return ok


class TensorStore(ImageStore):
    """Images held as one uint8 tensor (N,C,H,W): batches are gathers from it, never per-sample calls."""

    def __init__(self, data: torch.Tensor, labels: torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 4:
            raise ValueError(
                f"a TensorStore holds uint8 (N,C,H,W) images, not {data.dtype} {tuple(data.shape)}"
            )
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
        torch.index_select(self.data, 0, indices, out=out[: indices.numel()])
        return torch.ones(indices.numel(), dtype=torch.bool)


# of the memory available when a dataset loads: the rest is for the model, the job and the OS
HOST_SHARE = 0.5
FALLBACK_BUDGET_BYTES = 512 * 2**20  # where the available memory cannot be read


def nbytes(count: int, shape: tuple[int, int, int]) -> int:
    return count * shape[0] * shape[1] * shape[2]


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
        return int(text)
    except (OSError, ValueError):  # missing, unreadable, or "max" (no limit)
        return None


def _stat(path: str, key: str) -> int:
    """One counter of a cgroup's memory.stat, or 0 where it cannot be read."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _meminfo_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """What this process's cgroups (a container's memory limit, set on its own group or one above) still
    allow, or None where no limit is set."""
    groups: list[tuple[str, str, str, str, str]] = []  # (hierarchy, group path, limit, usage, inactive cache)
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            for line in f:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if number == "0":  # cgroup v2: one unified hierarchy
                    groups.append(("/sys/fs/cgroup", path, "memory.max", "memory.current", "inactive_file"))
                elif "memory" in controllers.split(","):  # cgroup v1's memory controller
                    groups.append(
                        (
                            "/sys/fs/cgroup/memory",
                            path,
                            "memory.limit_in_bytes",
                            "memory.usage_in_bytes",
                            "total_inactive_file",
                        )
                    )
    except (OSError, ValueError):
        return None
    room: int | None = None
    for base, path, limit_file, usage_file, inactive_key in groups:
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the group itself, then each group above it
            folder = "/".join([base, *parts[:depth]])
            limit = _read_int(f"{folder}/{limit_file}")
            if limit is None or limit >= 2**60:  # v1 spells "no limit" as a huge number, v2 as "max"
                continue
            # Usage counts the page cache too; its inactive part is reclaimed before the limit bites, so leave
            # it out as container tools do (v1 names it total_inactive_file, v2 inactive_file).
            used = (_read_int(f"{folder}/{usage_file}") or 0) - _stat(f"{folder}/memory.stat", inactive_key)
            left = max(0, limit - max(0, used))
            room = left if room is None else min(room, left)
    return room


def available_memory() -> int | None:
    """Bytes of memory this process could still fill: Linux's MemAvailable (free plus reclaimable cache),
    lowered to what a container's cgroup limit leaves; elsewhere the free pages, or half the physical memory
    (macOS reports no free figure); None where none of these can be read."""
    found = _meminfo_available()
    if found is None:
        try:
            found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            try:
                found = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
            except (ValueError, OSError, AttributeError):
                return None
    room = _cgroup_room()
    return found if room is None else min(found, room)


def memory_budget(available: int | None = None) -> int:
    """The bytes an in-memory dataset may take: HOST_SHARE of `available` (default: what the machine has
    available now), or FALLBACK_BUDGET_BYTES where that is unknown. Every in-memory dataset is checked against
    this one figure."""
    if available is None:
        available = available_memory()
    return FALLBACK_BUDGET_BYTES if available is None else int(HOST_SHARE * available)


def check_budget(needed: int, what: str, fix: str) -> None:
    """Refuse, before anything is allocated, `what` needing `needed` bytes beyond memory_budget(); `fix` says
    which fields to change. The message gives both figures, so the user can see how far off the request is."""
    available = available_memory()
    budget = memory_budget(available)
    if needed <= budget:
        return
    source = (
        f"{HOST_SHARE:.0%} of the {_mb(available)} of memory available now"
        if available is not None
        else "a fixed budget, as this machine's available memory cannot be read"
    )
    raise JobError(
        f"{what} would need {_mb(needed)}, more than the {_mb(budget)} a dataset may take here "
        f"({source}); {fix}"
    )
