"""Image jobs through the one source resolver against the code before it: quantize and export of a resnet18
training run (FakeData, 3x32x32), timed in this tree and in a baseline checkout (a git worktree of an older
revision) in the same run, alternating, medians of repeats. Goal: this tree within 1.05x of the baseline.

The run is trained by the baseline (its specs are older, so this also shows an old run opening in the new
code). Each job's own elapsed_s (its JSON result: the job alone, without the interpreter's start) and the
whole command's wall time are both reported.

    .venv/bin/python benchmarks/image_jobs.py --baseline-rev ee5a88f [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
JOBS = {
    "quantize": ["quantize", "--set", "calibration.samples=128", "--set", "eval_samples=256"],
    "export onnx": ["export", "--set", "format=onnx", "--set", "parity_samples=32"],
}


def workbench(tree: Path, workspace: Path, args: list[str], threads: int) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "--workspace", str(workspace), *args, "--json"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - started
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise SystemExit(
            f"{tree}: workbench {' '.join(args)} printed no JSON:\n{done.stderr[-2000:]}"
        ) from None
    if result.get("status") != "done":
        raise SystemExit(f"{tree}: workbench {' '.join(args)} failed: {result.get('error')}")
    return result, wall


def baseline_tree(args, scratch: Path) -> Path:
    if args.baseline_tree:
        return Path(args.baseline_tree).resolve()
    tree = scratch / "baseline"
    subprocess.run(
        ["git", "-C", str(HERE), "worktree", "add", "--detach", str(tree), args.baseline_rev],
        check=True,
        capture_output=True,
    )
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-rev", default="ee5a88f", help="the revision before the resolver")
    parser.add_argument("--baseline-tree", help="an existing checkout to compare with instead")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        base = baseline_tree(args, scratch)
        workspace = scratch / "ws"
        try:
            trained, _ = workbench(
                base,
                workspace,
                [
                    "train",
                    "--set",
                    "model.name=torchvision:resnet18",
                    "--set",
                    "dataset.name=fake",
                    "--set",
                    "dataset.size=1024",
                    "--set",
                    "dataset.image_size=32",
                    "--set",
                    "epochs=1",
                    "--set",
                    "batch_size=64",
                ],
                args.threads,
            )
            run = Path(trained["run_dir"]).name
            print(
                f"resnet18 on 1,024 fake 3x32x32 images, trained by {base.name} as run {run}; "
                f"threads {args.threads}"
            )
            print(f"{'job':<14}{'baseline s':>12}{'this tree s':>13}{'ratio':>8}{'wall ratio':>12}")
            for name, job in JOBS.items():
                times = {"base": [], "new": []}
                walls = {"base": [], "new": []}
                for _ in range(args.repeats):
                    for side, tree in (("base", base), ("new", HERE)):
                        result, wall = workbench(
                            tree, workspace, [*job, "--set", f"source.run={run}"], args.threads
                        )
                        times[side].append(result["elapsed_s"])
                        walls[side].append(wall)
                b, n = statistics.median(times["base"]), statistics.median(times["new"])
                wb, wn = statistics.median(walls["base"]), statistics.median(walls["new"])
                print(f"{name:<14}{b:>12.2f}{n:>13.2f}{n / b:>7.2f}x{wn / wb:>11.2f}x")
        finally:
            if not args.baseline_tree:
                subprocess.run(
                    ["git", "-C", str(HERE), "worktree", "remove", "--force", str(base)], capture_output=True
                )


if __name__ == "__main__":
    main()
