"""Time to the first page of 200 thumbnails of a 60,000-image in-memory dataset, after the dataset is loaded.

The dataset is MNIST read by torchvision's real loader from IDX files of 60,000 random 28x28 images written to
a temp dir. The page goes through the real `data.page` task (run_task), as the worker runs it. The reference,
measured in the same run on the same files: the first 200 items through torchvision's own MNIST dataset and a
DataLoader (batch 200), what a script would do to show them. The ratio printed is page time / reference time,
medians over repeats (goal: well under 1; the page also resizes to thumbnails and filters by class).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

N_TRAIN = 60_000
N_TEST = 10_000
PAGE = 200
REPEATS = 9


def write_mnist(root: Path) -> None:
    import numpy as np

    from workbench.worker.data.idx import write_idx

    raw = root / "MNIST" / "raw"
    rng = np.random.default_rng(0)
    for part, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        write_idx(raw / f"{part}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(raw / f"{part}-labels-idx1-ubyte", rng.integers(0, 10, n, dtype=np.uint8))


def reference_first_page(root: Path) -> float:
    """The first PAGE items of torchvision's MNIST through a DataLoader, as tensors: the plain-script way."""
    from torch.utils.data import DataLoader
    from torchvision.datasets import MNIST
    from torchvision.transforms.functional import pil_to_tensor

    dataset = MNIST(str(root), train=True, download=False, transform=pil_to_tensor)
    start = time.perf_counter()
    images, labels = next(iter(DataLoader(dataset, batch_size=PAGE, shuffle=False)))
    took = time.perf_counter() - start
    assert images.shape == (PAGE, 1, 28, 28) and labels.shape == (PAGE,)
    return took


def main() -> int:
    from workbench.specs import DataSpec
    from workbench.worker.data import clear_cache, load_dataset
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_mnist(tmp / "data")
        dataset = {"name": "mnist", "root": str(tmp / "data"), "val_fraction": 0.0}
        import torch  # noqa: F401  (imported before timing: the worker has it loaded already)

        task = get_task("data.page")
        loads, pages, references = [], [], []
        for i in range(REPEATS):
            references.append(reference_first_page(tmp / "data"))
            clear_cache()  # each repeat: a fresh load, then its first page
            t = time.perf_counter()
            loaded = load_dataset(DataSpec.from_dict(dataset), workspace=tmp)
            loads.append(time.perf_counter() - t)
            assert len(loaded.splits["train"]) == N_TRAIN
            spec = {
                "dataset": dataset,
                "split": "train",
                "offset": 0,
                "count": PAGE,
                "label": i % 11 - 1,
                "thumb_size": 64,
                "request_id": i,
            }
            t = time.perf_counter()
            result = run_task(task, spec, emit=lambda *a: None, workspace=tmp)
            pages.append(time.perf_counter() - t)
            assert result["status"] == "done" and result["images"].shape == (PAGE, 28, 28, 1), result.get(
                "error"
            )
    load_s, page_s, ref_s = statistics.median(loads), statistics.median(pages), statistics.median(references)
    print(f"dataset: MNIST via torchvision, {N_TRAIN:,} train images 28x28 in memory")
    print(f"load time:            {load_s * 1000:8.1f} ms (median of {REPEATS})")
    print(
        f"first page of {PAGE}:    {page_s * 1000:8.1f} ms (median of {REPEATS}; worst "
        f"{max(pages) * 1000:.1f} ms, the very first {pages[0] * 1000:.1f} ms)"
    )
    print(
        f"reference:            {ref_s * 1000:8.1f} ms (first {PAGE} through torchvision MNIST + DataLoader)"
    )
    ratio = page_s / ref_s
    print(f"ratio page/reference: {ratio:8.3f} (goal < 1) {'OK' if ratio < 1 else 'OVER GOAL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
