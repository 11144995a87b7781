"""Time until the main window is shown vs. a bare `python -c "import torch"`, both as fresh processes.

"Shown" is the window's first paint; its tabs build right after it (they import pyqtgraph), so the time
until the first tab is ready is printed too. Goal (polish issue): shown <= 0.25x; prints medians and ratios.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

REPEATS = int(os.environ.get("REPEATS", "5"))


def time_import_torch() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def time_window_shown(workspace: str) -> tuple[float, float]:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
        "WORKBENCH_EXIT_AFTER_MS": "300",
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "gui", "--workspace", workspace],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    shown = ready = None
    for line in proc.stdout:
        if line.startswith("WORKBENCH_WINDOW_SHOWN"):
            shown = time.perf_counter() - start
        elif line.startswith("WORKBENCH_TAB_READY"):
            ready = time.perf_counter() - start
    proc.wait(timeout=60)
    if shown is None or ready is None:
        raise SystemExit("the window never reported that it was shown and its first tab ready")
    return shown, ready


def main() -> None:
    workspace = tempfile.mkdtemp(prefix="wb-bench-")
    torch_times, window_times, ready_times = [], [], []
    time_import_torch()  # warm the file cache for both, so neither pays the first cold read
    time_window_shown(workspace)
    for _ in range(REPEATS):  # interleaved, so a noisy neighbour hurts both alike
        torch_times.append(time_import_torch())
        shown, ready = time_window_shown(workspace)
        window_times.append(shown)
        ready_times.append(ready)
    t, w, r = statistics.median(torch_times), statistics.median(window_times), statistics.median(ready_times)
    print(f"python -c 'import torch'   median {t:.3f} s  ({REPEATS} runs)")
    print(f"workbench window shown     median {w:.3f} s  ({REPEATS} runs)")
    print(f"  ... its first tab ready  median {r:.3f} s")
    print(f"ratio window/torch-import  {w / t:.2f}  (goal <= 0.25)")
    print(f"ratio first tab/torch      {r / t:.2f}")


if __name__ == "__main__":
    main()
