"""A quantize beside other work (issue #22, part 4): the whole `workbench quantize` of the digits cnn (W4A8
with 300 AdaRound iterations, as the issue measured) on a quiet machine and with a Python busy loop keeping
one core busy, each with the threads sized to the free cores (the default) and with torch's own thread per
core (OMP_NUM_THREADS = the core count, which turns the sizing off). Every run is a fresh `workbench` process;
medians of interleaved repeats. Goal: beside the busy loop, the sized run within 1.3x of its quiet time
(torch's default threads took 2.5-15x in the issue), and at most aimet-torch's time in both conditions.

The aimet-torch peer (benchmarks/aimet_peer.py: the same run, calibration images, W4A8 and AdaRound
iterations, its own threads) runs where --aimet-python (or AIMET_PYTHON) names a Python that has aimet-torch;
it is never a dependency. One way: `python -m venv /tmp/aimet && echo $PWD/.venv/lib/python3.11/site-packages
> /tmp/aimet/lib/python3.11/site-packages/workbench.pth && /tmp/aimet/bin/pip install aimet-torch`.

    .venv/bin/python benchmarks/busy_neighbour.py [--repeats 3] [--iterations 300] [--aimet-python PATH]
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


def workbench(args: list[str], workspace: str, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "workbench", *args, "--workspace", workspace, "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def quantize_seconds(run_dir: str, workspace: str, iterations: int, *, sized: bool) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if not sized:
        env["OMP_NUM_THREADS"] = str(os.cpu_count() or 1)  # torch's default count, and the sizing off
    args = [
        "quantize",
        "--set",
        f"source.run={run_dir}",
        "--set",
        "weights.bits=4",
        "--set",
        "weights.range=mse",
        "--set",
        "adaround.enabled=true",
        "--set",
        f"adaround.iterations={iterations}",
        "--set",
        "device=cpu",
    ]
    started = time.perf_counter()
    result = workbench(args, workspace, env)
    if result["status"] != "done":
        raise SystemExit(f"quantize failed: {result.get('error')}")
    ACCURACY["workbench"] = result["quantized"]["accuracy"]
    return time.perf_counter() - started


ACCURACY: dict[str, float] = {}  # the last run's held-out accuracy at W4A8, per tool


def aimet_seconds(python: str, run_dir: str, workspace: str, iterations: int) -> tuple[float, float]:
    """(seconds, held-out accuracy) of the aimet-torch peer, a fresh process like the workbench's."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(here), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    started = time.perf_counter()
    done = subprocess.run(
        [
            python,
            os.path.join(here, "aimet_peer.py"),
            "--run",
            run_dir,
            "--workspace",
            workspace,
            "--iterations",
            str(iterations),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"aimet_peer.py failed:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])["accuracy"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument(
        "--aimet-python",
        default=os.environ.get("AIMET_PYTHON", ""),
        help="a Python with aimet-torch installed: adds the peer's rows",
    )
    args = parser.parse_args()
    peer: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as workspace:
        trained = workbench(
            ["train", "--set", "model.name=cnn", "--set", "epochs=3", "--set", "device=cpu"],
            workspace,
            dict(os.environ),
        )
        rows = {(quiet, sized): [] for quiet in (True, False) for sized in (True, False)}
        for repeat in range(args.repeats):
            for (quiet, sized), times in rows.items():
                neighbour = None if quiet else subprocess.Popen([sys.executable, "-c", "while True: pass"])
                try:
                    times.append(
                        quantize_seconds(trained["run_dir"], workspace, args.iterations, sized=sized)
                    )
                    if args.aimet_python and sized:  # the peer beside the same neighbour (or none)
                        seconds, ACCURACY["aimet-torch"] = aimet_seconds(
                            args.aimet_python, trained["run_dir"], workspace, args.iterations
                        )
                        peer[quiet].append(seconds)
                finally:
                    if neighbour is not None:
                        neighbour.kill()
                        neighbour.wait()
            print(
                f"  repeat {repeat + 1}/{args.repeats}: "
                + ", ".join(
                    f"{'quiet' if q else 'busy'}/{'sized' if s else 'default'} {t[-1]:.1f} s"
                    for (q, s), t in rows.items()
                ),
                file=sys.stderr,
            )
    median = {key: statistics.median(times) for key, times in rows.items()}
    print(
        f"busy neighbour: {os.cpu_count()} cores; workbench quantize of the digits cnn, W4A8 MSE + AdaRound "
        f"{args.iterations} iterations, whole process; medians of {args.repeats} interleaved repeats"
    )
    for (quiet, sized), seconds in median.items():
        label = (
            f"{'quiet machine' if quiet else 'one core busy'}, "
            f"{'threads sized' if sized else 'torch default threads'}"
        )
        print(f"  {label:<45} {seconds:7.1f} s   {seconds / median[(True, True)]:.2f}x the quiet sized run")
    ratio = median[(False, True)] / median[(True, True)]
    print(
        f"beside a busy core, sized: {ratio:.2f}x its quiet time (goal <= 1.3); torch's default threads: "
        f"{median[(False, False)] / median[(True, False)]:.2f}x theirs"
    )
    if not args.aimet_python:
        print("aimet-torch peer rows: left out (give --aimet-python; aimet-torch is a benchmark-only peer)")
        return 0
    for quiet in (True, False):
        seconds = statistics.median(peer[quiet])
        ours = median[(quiet, True)]
        print(
            f"  aimet-torch, {'quiet machine' if quiet else 'one core busy':<31} {seconds:7.1f} s   the "
            f"workbench's sized run is {ours / seconds:.2f}x its time (goal <= 1.0)"
        )
    print(
        f"  held-out accuracy at W4A8: workbench {ACCURACY['workbench']:.2%}, aimet-torch "
        f"{ACCURACY['aimet-torch']:.2%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
