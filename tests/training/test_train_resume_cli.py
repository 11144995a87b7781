"""`workbench train` as a real subprocess: SIGKILL mid-run, then `--resume RUN_DIR` finishes the planned
epochs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run_cli

from workbench.errors import JobError
from workbench.runs import Run
from workbench.worker.training import load_last

ROOT = Path(__file__).resolve().parents[2]
# Batches of 8 make an epoch 180 steps: long enough that the kill lands well before epoch 6 ends.
ARGS = [
    "--set",
    "epochs=6",
    "--set",
    "dataset.name=digits",
    "--set",
    "model.name=cnn",
    "--set",
    "batch_size=8",
    "--set",
    "lr=0.003",
]


def _workbench(workspace: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "workbench",
        "train",
        *ARGS,
        "--workspace",
        str(workspace),
        "--json",
        *extra,
    ]


def _checkpoint_epoch(workspace: Path) -> tuple[Path | None, int]:
    for last in (workspace / "runs").glob("*/checkpoints/last.pt"):
        try:
            return last.parents[1], int(load_last(last)["state"]["epoch"])
        except JobError:  # not there yet
            pass
    return None, 0


@pytest.mark.slow
def test_sigkill_then_resume_reaches_the_planned_epochs(tmp_path):
    proc = subprocess.Popen(_workbench(tmp_path), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        run_dir, epoch = None, 0
        while epoch < 2:
            assert proc.poll() is None, (
                f"the run ended before it could be killed: {proc.stderr.read().decode()}"
            )
            assert time.monotonic() < deadline, "no checkpoint for epoch 2 within 180 s"
            time.sleep(0.05)
            run_dir, epoch = _checkpoint_epoch(tmp_path)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    with Run(run_dir) as run:
        assert run.status == "running"  # killed: nobody got to write an end state
        assert run.read_report() is None

    resumed = run_cli(
        _workbench(tmp_path, "--resume", str(run_dir))[3:], cwd=ROOT, env=os.environ, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["status"] == "done" and result["run_dir"] == str(run_dir)
    assert result["epochs_completed"] == 6 and 2 <= result["resumed_from_epoch"] < 6
    assert result["final"]["test_accuracy"] > 0.9
    with Run(run_dir) as run:
        assert (
            run.status == "done" and run.read_report()["resumed_from_epoch"] == result["resumed_from_epoch"]
        )
        epochs = run.read_metrics("epoch")["epoch"]
    assert epochs[1][-1] == 6.0 and epochs[0][-1] == 6 * 180
