"""JobInterrupts, the headless job's Ctrl+C: only SIGINT and SIGTERM count, though the wakeup fd it reads
carries every signal with a Python handler (torch's DataLoader installs one for SIGCHLD: its workers ending at
an epoch's end once stopped a whole `workbench train` run)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest
from cli_helpers import _argv, _env, expect, one_json, trust_tmp, wb
from waiting import wait_until

from workbench.interrupts import JobInterrupts, exit_code_for
from workbench.runs import Run


def _wait_for(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_a_child_ending_is_no_interrupt_but_sigterm_is():
    stop, forced = threading.Event(), []
    notices: list[str] = []
    previous = signal.signal(signal.SIGCHLD, lambda *_: None)  # what torch's DataLoader does
    try:
        with JobInterrupts(stop, forced.append, notice=notices.append) as interrupts:
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGCHLD)
            time.sleep(0.3)
            assert not stop.is_set() and interrupts.count == 0 and notices == []
            os.kill(os.getpid(), signal.SIGTERM)
            assert _wait_for(stop.is_set)
            assert interrupts.count == 1 and notices and notices[0].startswith("SIGTERM:")
            assert forced == []
    finally:
        signal.signal(signal.SIGCHLD, previous)


def test_exit_codes_follow_the_shell():
    assert exit_code_for(signal.SIGINT) == 130 and exit_code_for(signal.SIGTERM) == 143


# -- through the real command: nothing the job started outlives it -------------------------------------------
# The dataset signals its own job from a DataLoader worker: a real SIGTERM, twice, while every loader sits in
# a long `__getitem__`, which is where the probe found them orphaned and still running long after the job.
SIGNALLING_DATA = """
import os, pathlib, signal, time
import torch
from torch.utils.data import Dataset, get_worker_info

PIDS = pathlib.Path({pids!r})

class Stuck(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        info = get_worker_info()
        if info is None:
            return torch.zeros(1, 8, 8), i % 2  # sample 0, read by the job itself before any loader starts
        PIDS.mkdir(exist_ok=True)
        (PIDS / str(os.getpid())).touch()
        if info.id == 0:
            time.sleep(1)
            os.kill(os.getppid(), signal.SIGTERM)
            time.sleep(1)
            os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(600)
"""

EXITING_DATA = """
import os
import torch
from torch.utils.data import Dataset

class Exits(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 5:
            os._exit(0)
        return torch.zeros(1, 8, 8), i % 2
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has already ended
    except OSError:
        return False


def _train_args(dataset: str, workers: int) -> list[str]:
    return [
        "train",
        "--set",
        f"dataset.name={dataset}",
        "--set",
        f"dataset.num_workers={workers}",
        "--set",
        "model.name=mlp",
        "--set",
        "epochs=1",
        "--set",
        "batch_size=8",
        "--json",
    ]


@pytest.mark.slow
def test_a_second_sigterm_takes_the_dataloader_workers_along(tmp_path):
    pids = tmp_path / "pids"
    (tmp_path / "stuck.py").write_text(SIGNALLING_DATA.format(pids=str(pids)))
    trust_tmp(tmp_path, tmp_path / "ws")
    # A fresh interpreter, as a user starts it: the test runner's forked command does not host DataLoader
    # workers.
    proc = subprocess.run(
        _argv(*_train_args(f"file:{tmp_path / 'stuck.py'}:Stuck", 2), "--workspace", str(tmp_path / "ws")),
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    expect(proc, 143)
    assert one_json(proc)["status"] == "cancelled"
    workers = [int(p.name) for p in pids.iterdir()]
    assert workers
    wait_until(
        lambda: not any(_alive(pid) for pid in workers), timeout=5, what=f"loader workers {workers} to end"
    )


@pytest.mark.slow
def test_os_exit_in_user_code_still_gives_one_json_and_a_failing_exit(tmp_path):
    (tmp_path / "exits.py").write_text(EXITING_DATA)
    proc = wb(tmp_path, *_train_args(f"file:{tmp_path / 'exits.py'}:Exits", 0), timeout=180)
    assert proc.returncode not in (0, None), proc.stderr
    result = one_json(proc)
    assert result["status"] == "interrupted" and "os._exit(0)" in result["error"]["message"]
    with Run(result["run_dir"], readonly=True) as run:
        assert run.summary()["status"] == "interrupted"
