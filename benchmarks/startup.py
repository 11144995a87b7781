"""Time until the main window is shown vs. a bare `python -c "import torch"`, both as fresh processes.

Goal (issue #2): ratio ≤ 0.5 — the window must never wait for torch. Prints medians and the ratio.
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


def time_window_shown(workspace: str) -> float:
    env = {**os.environ, "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
           "WORKBENCH_EXIT_AFTER_MS": "300"}
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "workbench", "gui", "--workspace", workspace],
                            stdout=subprocess.PIPE, text=True, env=env)
    shown = None
    for line in proc.stdout:
        if line.startswith("WORKBENCH_WINDOW_SHOWN"):
            shown = time.perf_counter() - start
    proc.wait(timeout=60)
    if shown is None:
        raise SystemExit("the window never reported that it was shown")
    return shown


def main() -> None:
    workspace = tempfile.mkdtemp(prefix="wb-bench-")
    torch_times, window_times = [], []
    time_import_torch()  # warm the file cache for both, so neither pays the first cold read
    time_window_shown(workspace)
    for _ in range(REPEATS):  # interleaved, so a noisy neighbour hurts both alike
        torch_times.append(time_import_torch())
        window_times.append(time_window_shown(workspace))
    t, w = statistics.median(torch_times), statistics.median(window_times)
    print(f"python -c 'import torch'   median {t:.3f} s  ({REPEATS} runs)")
    print(f"workbench window shown     median {w:.3f} s  ({REPEATS} runs)")
    print(f"ratio window/torch-import  {w / t:.2f}  (goal <= 0.5)")


if __name__ == "__main__":
    main()
