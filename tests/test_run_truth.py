"""Runs tell the truth: an owner lock per live run, interrupted when its owner is gone, one writer, no delete
of a live run, read-only readers, damaged files named, and user code that cannot break the CLI's contract.

Most defects here live across processes, so most tests use a real second process: the CLI, or a small
Python child that owns a run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from cli_helpers import TRACEBACK, _argv, _env, expect, one_json, trust_tmp, wb
from waiting import wait_until

from workbench.errors import JobError, UsageError
from workbench.runs import LOCK_NAME, Run, RunBusyError, RunOwner, RunStore, mark_run_ended, run_owner

pytestmark = pytest.mark.slow


def _files(run_dir: Path) -> dict[str, tuple[int, int]]:
    """Every file in a run folder with its size and mtime: what a reader must leave as it was."""
    return {
        p.relative_to(run_dir).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in run_dir.rglob("*")
        if p.is_file()
    }


OWNER_CHILD = textwrap.dedent("""
    import sys, time
    from workbench.runs import RunStore
    run = RunStore(sys.argv[1]).create_run("train", {"epochs": 1}, task="train.classifier")
    run.set_status("running")
    run.log_metrics([(0, "loss", 2.0, 0.0)])
    print(run.dir, flush=True)
    time.sleep(600)
""")


@pytest.fixture
def owned_by_child(tmp_path):
    """A run created and owned by another live process; yields (process, run_dir)."""
    ws = tmp_path / "ws"
    proc = subprocess.Popen([sys.executable, "-c", OWNER_CHILD, str(ws)], stdout=subprocess.PIPE, text=True)
    try:
        run_dir = Path(proc.stdout.readline().strip())
        assert run_dir.is_dir(), "the child did not create its run"
        yield proc, run_dir
    finally:
        proc.kill()
        proc.wait()


# -- 1. a dead run does not say running ------------------------------------------------------------------


def test_a_live_run_is_running_and_reads_interrupted_once_its_owner_is_killed(owned_by_child):
    proc, run_dir = owned_by_child
    store = RunStore(run_dir.parent.parent)
    (entry,) = store.list_runs()
    assert entry["status"] == "running"
    assert run_owner(run_dir)["pid"] == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (entry,) = store.list_runs()
    assert entry["status"] == "interrupted"
    assert f"workbench train --resume {run_dir.name}" in entry["message"]
    with store.open_run(run_dir.name) as run:
        summary = run.summary()
        assert run.status == "running"  # what is stored is unchanged; what readers are told is the truth
    assert summary["status"] == "interrupted" and summary["owner"] is None
    assert summary["last_metrics"]["loss"] == (0, 2.0)


def test_a_run_closed_without_an_end_state_reads_interrupted(tmp_path):
    store = RunStore(tmp_path)
    run = store.create_run("train", {}, task="train.classifier")
    run.set_status("running")
    assert store.list_runs()[0]["status"] == "running"
    run.close()
    assert store.list_runs()[0]["status"] == "interrupted"


def test_the_cli_killed_mid_run_leaves_an_interrupted_run(tmp_path):
    ws = tmp_path / "ws"
    proc = subprocess.Popen(
        _argv(
            "diag", "count", "--set", "steps=100000", "--set", "delay=0.01", "--json", "--workspace", str(ws)
        ),
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: any(e["status"] == "running" for e in RunStore(ws).list_runs()),
            timeout=30,
            what="the CLI's run to be running",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        proc.kill()
        proc.wait()
    listed = wb(tmp_path, "runs", "list", "--json")
    expect(listed, 0)
    (entry,) = json.loads(listed.stdout)["runs"]
    assert entry["status"] == "interrupted"


# -- 2. one writer per run -----------------------------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_owner(owned_by_child):
    proc, run_dir = owned_by_child
    with Run(run_dir) as run, pytest.raises(RunBusyError, match=rf"in use by a running job \(pid {proc.pid}"):
        run.claim(doing="resume it")


def test_a_second_resume_of_a_live_run_is_refused_and_changes_nothing(tmp_path, owned_by_child):
    proc, run_dir = owned_by_child
    before = _files(run_dir)
    resumed = wb(
        tmp_path, "train", "--resume", run_dir.name, "--json", workspace=run_dir.parent.parent, timeout=120
    )
    expect(resumed, 1)
    result = one_json(resumed)
    assert result["status"] == "failed" and result["error"]["type"] == "RunBusyError"
    assert f"pid {proc.pid}" in result["error"]["message"] and "stop it first" in result["error"]["message"]
    assert TRACEBACK not in resumed.stderr
    after = _files(run_dir)
    assert {k: v for k, v in after.items() if not k.startswith("metrics.db")} == {
        k: v for k, v in before.items() if not k.startswith("metrics.db")
    }
    with Run(run_dir, readonly=True) as run:
        assert run.status == "running" and run.read_report() is None
        assert len(run.read_metrics("loss")["loss"][0]) == 1  # no rows of a second writer


def test_a_resume_after_the_owner_died_takes_the_run_over(tmp_path, owned_by_child):
    proc, run_dir = owned_by_child
    proc.kill()
    proc.wait()
    with Run(run_dir) as run:
        run.claim()
        assert run.owned and run_owner(run_dir)["pid"] == os.getpid()
    assert run_owner(run_dir) is None  # closing released it


# -- 3. no delete of a live run -----------------------------------------------------------------------


def test_deleting_a_live_run_is_refused_with_exit_1(tmp_path, owned_by_child):
    proc, run_dir = owned_by_child
    deleted = wb(tmp_path, "runs", "delete", run_dir.name, workspace=run_dir.parent.parent)
    expect(deleted, 1)
    assert "stop it first" in deleted.stderr and f"pid {proc.pid}" in deleted.stderr
    assert run_dir.is_dir() and (run_dir / "metrics.db").is_file()
    proc.kill()
    proc.wait()
    expect(wb(tmp_path, "runs", "delete", run_dir.name, workspace=run_dir.parent.parent), 0)
    assert not run_dir.exists()


def test_mark_run_ended_never_touches_a_live_run(owned_by_child):
    proc, run_dir = owned_by_child
    assert not mark_run_ended(run_dir, "failed", "worker exited: SIGKILL")
    proc.kill()
    proc.wait()
    assert mark_run_ended(run_dir, "failed", "worker exited: SIGKILL")
    with Run(run_dir, readonly=True) as run:
        assert (run.status, run.message) == ("failed", "worker exited: SIGKILL")
        assert run.read_report()["error"] == {"type": "WorkerDied", "message": "worker exited: SIGKILL"}
        assert run.summary()["status"] == "failed"


# -- 4. read-only readers and damaged files -----------------------------------------------------------


def test_runs_list_and_show_change_no_file(tmp_path):
    store = RunStore(tmp_path / "ws")
    with store.create_run("train", {"epochs": 1}, task="train.classifier") as run:
        run.log_metrics([(0, "loss", 1.0, 0.0)])
        run.write_report({"status": "done"})
        run.set_status("done")
        run_dir = run.dir
    empty = store.create_run("quant", {}, task="quant.analyze")
    empty.close()
    (empty.dir / "metrics.db").write_bytes(b"")  # an empty database file, as a crash can leave
    before = {d.name: _files(d) for d in (run_dir, empty.dir)}
    expect(wb(tmp_path, "runs", "list"), 0)
    expect(wb(tmp_path, "runs", "list", "--json"), 0)
    expect(wb(tmp_path, "runs", "show", run_dir.name, "--json"), 0)
    shown_empty = wb(tmp_path, "runs", "show", empty.id, "--json")
    assert {d.name: _files(d) for d in (run_dir, empty.dir)} == before
    assert (empty.dir / "metrics.db").stat().st_size == 0
    expect(shown_empty, 1)
    assert "not a run database" in shown_empty.stderr and str(empty.dir / "metrics.db") in shown_empty.stderr


def _mount_tmpfs(path: Path, options: str) -> None:
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({done.stderr.decode().strip()}): a read-only workspace needs one"
        )


def test_a_read_only_workspace_lists_healthy_runs_as_healthy(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    _mount_tmpfs(mount, "size=8m")
    try:
        store = RunStore(mount / "ws")
        with store.create_run("train", {"epochs": 1}, task="train.classifier") as run:
            run.log_metrics([(0, "loss", 1.0, 0.0)])
            run.write_report({"status": "done"})
            run.set_status("done")
        # A writer killed mid-run, as SIGKILL leaves it: its last commits still sit in the WAL.
        child = subprocess.Popen(
            [sys.executable, "-c", OWNER_CHILD, str(mount / "ws")], stdout=subprocess.PIPE, text=True
        )
        killed_dir = Path(child.stdout.readline().strip())
        child.kill()
        child.wait()
        subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
        listed = {e["id"]: e for e in RunStore(mount / "ws").list_runs()}
        assert listed[run.id]["status"] == "done"
        assert listed[killed_dir.name]["status"] == "interrupted"
        with RunStore(mount / "ws").open_run(run.id) as reread:
            assert reread.summary()["last_metrics"]["loss"] == (0, 1.0)
        with RunStore(mount / "ws").open_run(killed_dir.name) as reread:
            assert reread.summary()["last_metrics"]["loss"] == (0, 2.0)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_spec_as_a_folder_and_report_in_bad_utf8_are_named(tmp_path):
    store = RunStore(tmp_path / "ws")
    with store.create_run("train", {}, task="train.classifier") as run:
        run.set_status("done")
    run.spec_path.unlink()
    run.spec_path.mkdir()
    run.report_path.write_bytes(b'{"status": "d\xff\xfe"}')
    with store.open_run(run.id) as reread:
        with pytest.raises(JobError, match=r"spec\.toml is a folder, not a file"):
            reread.read_spec()
        with pytest.raises(JobError, match=r"report\.json is not UTF-8 text"):
            reread.read_report()
    shown = wb(tmp_path, "runs", "show", run.id, "--json")
    expect(shown, 0)
    problems = json.loads(shown.stdout)["problems"]
    assert any("spec.toml is a folder" in p for p in problems) and any("not UTF-8" in p for p in problems)
    resumed = wb(tmp_path, "train", "--resume", run.id, "--json")
    assert resumed.returncode in (1, 2) and "internal error" not in resumed.stderr
    assert str(run.spec_path) in one_json(resumed)["error"]["message"]


def test_a_symlink_out_of_the_workspace_is_not_a_run(tmp_path):
    store = RunStore(tmp_path / "ws")
    with store.create_run("train", {}, task="t") as run:
        run.set_status("done")
    outside = RunStore(tmp_path / "elsewhere")
    with outside.create_run("train", {}, task="t") as foreign:
        foreign.set_status("done")
    link = store.runs_dir / "20990101-000000-train-abcdef"
    link.symlink_to(foreign.dir, target_is_directory=True)
    assert [e["id"] for e in store.list_runs()] == [run.id]
    with pytest.raises(UsageError, match="outside the workspace"):
        store.delete_run(link.name)
    assert foreign.dir.is_dir()


# -- 6, 7. the command line: hung user code, sys.exit, KeyboardInterrupt, prints -------------------------


MODEL = textwrap.dedent("""
    import pathlib, sys, time
    from torch import nn

    MODE = {mode!r}
    MARK = pathlib.Path({mark!r})

    class Net(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.fc = nn.Linear(64, num_classes)
            if MODE == "exit_in_init":
                sys.exit(5)

        def forward(self, x):
            print("hello from forward")  # must not reach stdout under --json
            if MODE == "hang" and self.training:
                MARK.write_text("in forward")
                while True:  # a hung forward: it never returns, and never checks for cancel
                    time.sleep(0.05)
            if MODE == "keyboard_interrupt":
                raise KeyboardInterrupt
            return self.fc(x.flatten(1))
""")


def _model(tmp_path: Path, mode: str) -> tuple[str, Path]:
    mark = tmp_path / "mark"
    path = tmp_path / f"net_{mode}.py"
    path.write_text(MODEL.format(mode=mode, mark=str(mark)))
    return f"file:{path}:Net", mark


def _train_args(model: str) -> list[str]:
    return ["train", "--set", f"model.name={model}", "--set", "epochs=1", "--set", "batch_size=64", "--json"]


@pytest.mark.parametrize(
    "mode, kind, words",
    [
        ("exit_in_init", "SystemExit", "sys.exit(5)"),
        ("keyboard_interrupt", "KeyboardInterrupt", "KeyboardInterrupt"),
    ],
)
def test_user_code_exiting_still_gives_exit_1_and_one_json(tmp_path, mode, kind, words):
    model, _ = _model(tmp_path, mode)
    proc = wb(tmp_path, *_train_args(model), timeout=180)
    expect(proc, 1)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == kind
    assert words in result["error"]["message"]
    assert TRACEBACK not in proc.stderr
    with Run(result["run_dir"], readonly=True) as run:
        assert run.summary()["status"] == "failed"


def test_prints_in_user_code_do_not_reach_stdout(tmp_path):
    model, _ = _model(tmp_path, "plain")
    proc = wb(tmp_path, *_train_args(model), timeout=180)
    expect(proc, 0)
    assert one_json(proc)["status"] == "done"
    assert "hello from forward" in proc.stderr


# SIGTERM only with -m heavy (CI time): its exit code is tested by itself in tests/test_interrupts.py.
@pytest.mark.parametrize(
    "signum, code", [(signal.SIGINT, 130), pytest.param(signal.SIGTERM, 143, marks=pytest.mark.heavy)]
)
def test_a_hung_forward_stops_at_the_second_signal_with_the_run_marked(tmp_path, signum, code):
    model, mark = _model(tmp_path, "hang")
    trust_tmp(tmp_path, tmp_path / "ws")
    proc = subprocess.Popen(
        _argv(*_train_args(model), "--workspace", str(tmp_path / "ws")),
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
    try:
        wait_until(mark.exists, timeout=120, what="the model's forward to start hanging")
        proc.send_signal(signum)
        wait_until(
            lambda: "again to stop at once" in "".join(stderr), timeout=30, what="the first signal's notice"
        )
        assert proc.poll() is None  # the hung forward never reached a step boundary
        proc.send_signal(signum)
        out = proc.stdout.read()
        proc.wait(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == code, "".join(stderr)
    result = json.loads(out)
    assert result["status"] == "cancelled" and result["run_dir"]
    assert "hello from forward" not in out
    with Run(result["run_dir"], readonly=True) as run:
        summary = run.summary()
    assert summary["status"] == "cancelled" and "second interrupt" in summary["message"]
    assert summary["report"]["status"] == "cancelled"


def test_run_owner_handles_a_run_without_a_lock_file(tmp_path):
    store = RunStore(tmp_path)
    with store.create_run("train", {}, task="train.classifier") as run:
        run.set_status("running")
    (run.dir / LOCK_NAME).unlink()  # a run made before locks existed
    assert run_owner(run.dir) is None
    assert store.list_runs()[0]["status"] == "interrupted"
    owner = RunOwner.acquire(run.dir)
    try:
        assert run_owner(run.dir)["pid"] == os.getpid()
    finally:
        owner.release()


# -- the window's worker dies: its runs are marked on disk, not only in the Jobs panel ----------------------


def test_a_worker_killed_mid_job_leaves_its_run_failed_on_disk(tmp_path):
    from workbench.client import WorkerManager

    manager = WorkerManager(runtime_dir=tmp_path / "rt", max_restarts=0)
    assert manager.start(wait=True)
    try:
        record = manager.submit(
            "debug.count",
            {"steps": 1000, "delay": 0.01, "crash_at": 30, "crash_mode": "kill"},
            workspace=tmp_path / "ws",
        )
        ended = manager.wait_job(record.job_id, timeout=60)
    finally:
        manager.shutdown()
    assert ended.state == "failed" and ended.error_message == "worker exited: SIGKILL"

    def summary() -> dict:
        with Run(ended.run_dir, readonly=True) as run:
            return run.summary()

    # The job list turns failed first; the monitor thread then writes the run (and only then tells the GUI).
    wait_until(
        lambda: summary()["status"] == "failed", timeout=10, what="the run to be marked failed on disk"
    )
    assert summary()["message"] == "worker exited: SIGKILL"
    summary = summary()
    assert summary["report"]["error"]["type"] == "WorkerDied"
