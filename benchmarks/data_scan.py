"""How fast `imagefolder` lists a big folder: scan_image_folder vs. a bare os.walk listing of the same files.

100,000 zero-byte *.png files in 10 class folders are created once under the temp dir and reused. Both are
timed interleaved, medians of repeats. Goal (data engine issue): the scan takes at most 2x the os.walk time.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

CLASSES = 10
PER_CLASS = 10_000
REPEATS = 7


def make_tree(root: Path) -> None:
    done = root / ".complete"
    if done.exists():
        return
    for c in range(CLASSES):
        folder = root / f"class_{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            (folder / f"img_{i:05d}.png").touch()
    done.touch()


def walk_listing(root: Path) -> list[str]:
    """The reference: every file under root, as plainly as the standard library lists it."""
    found = []
    for folder, _dirs, files in os.walk(root):
        found += [os.path.join(folder, name) for name in files]
    return found


def main() -> int:
    from workbench.worker.data import scan_image_folder

    root = Path(tempfile.gettempdir()) / f"workbench-bench-scan-{CLASSES}x{PER_CLASS}"
    started = time.perf_counter()
    make_tree(root)
    print(
        f"tree: {CLASSES * PER_CLASS:,} files under {root} (ready in {time.perf_counter() - started:.1f} s)"
    )
    walk_listing(root)  # warm the directory cache for both
    walks, scans = [], []
    for _ in range(REPEATS):
        t = time.perf_counter()
        walked = walk_listing(root)
        walks.append(time.perf_counter() - t)
        t = time.perf_counter()
        scan = scan_image_folder(root)
        scans.append(time.perf_counter() - t)
    assert len(scan.paths) == CLASSES * PER_CLASS and len(walked) >= CLASSES * PER_CLASS
    walk_s, scan_s = statistics.median(walks), statistics.median(scans)
    print(f"os.walk listing:      {walk_s * 1000:8.1f} ms (median of {REPEATS})")
    print(f"scan_image_folder:    {scan_s * 1000:8.1f} ms (median of {REPEATS})")
    ratio = scan_s / walk_s
    print(f"ratio scan/walk:      {ratio:8.2f}x (goal <= 2x) {'OK' if ratio <= 2 else 'OVER GOAL'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
