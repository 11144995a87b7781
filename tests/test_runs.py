"""The run store against real files and real SQLite, including a writer killed with SIGKILL mid-run."""

from __future__ import annotations

import math
import os
import queue
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import workbench
from workbench.errors import JobError, UsageError
from workbench.runs import LOCK_NAME, RunStore, atomic_write_text, atomic_writer
from workbench.workspace import default_workspace, resolve_workspace

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SPEC = {
    "task": "train.classifier",
    "epochs": 3,
    "lr": 0.001,
    "amp": False,
    "layers": [64, 32],
    "data": {"name": "mnist", "root": "/data/mnist", "split": {"train": 0.9, "val": 0.1}},
}


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    return RunStore(resolve_workspace(tmp_path / "ws"))


def _temp_files(directory: Path) -> list[str]:
    # The owner lock is hidden on purpose but is no temp file: it stays for as long as the run does.
    return [p.name for p in directory.iterdir() if p.name.startswith(".") and p.name != LOCK_NAME]


# --- workspace ----------------------------------------------------------------------------------


def test_resolve_workspace_creates_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ws = resolve_workspace("relative/ws")
    assert ws == tmp_path / "relative" / "ws"
    assert all((ws / sub).is_dir() for sub in ("runs", "data", "cache"))


def test_resolve_workspace_refuses_a_file(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises(UsageError, match=re.escape(str(target))):
        resolve_workspace(target)


def test_workspace_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_WORKSPACE", str(tmp_path / "from-env"))
    assert default_workspace() == tmp_path / "from-env"
    assert resolve_workspace(None) == tmp_path / "from-env"
    monkeypatch.delenv("WORKBENCH_WORKSPACE")
    assert default_workspace().name == "workspace"


# --- creating, listing, opening, deleting -------------------------------------------------------


def test_create_run_layout_and_meta(store):
    with store.create_run("train", SPEC, task="train.classifier") as run:
        assert re.fullmatch(r"\d{8}-\d{6}-train-[0-9a-f]{6}", run.id)
        assert run.dir == store.runs_dir / run.id
        assert run.checkpoints_dir.is_dir() and run.artifacts_dir.is_dir()
        assert (run.dir / "metrics.db").is_file()
        assert (run.kind, run.task, run.status, run.message) == ("train", "train.classifier", "created", "")
    # Nothing half-made is left next to the run.
    assert [p.name for p in store.runs_dir.iterdir()] == [run.id]


def test_spec_toml_round_trip(store):
    with store.create_run("train", SPEC, task="train.classifier") as run:
        assert tomllib.loads(run.spec_path.read_text()) == SPEC
        assert run.summary()["spec"] == SPEC


def test_unserializable_spec_leaves_no_run(store):
    with pytest.raises(TypeError):
        store.create_run("train", {"bad": object()}, task="train.classifier")
    assert list(store.runs_dir.iterdir()) == []


def test_list_runs_newest_first_with_status(store):
    ids = []
    for kind in ("train", "quant", "export"):
        with store.create_run(kind, {}, task=f"{kind}.x") as run:
            ids.append(run.id)
    with store.open_run(ids[1], readonly=False) as run:
        run.set_status("failed", "loss is NaN at step 12")
    listed = store.list_runs()
    assert [e["id"] for e in listed] == ids[::-1]
    failed = listed[1]
    assert failed["status"] == "failed" and failed["message"] == "loss is NaN at step 12"
    assert failed["kind"] == "quant" and failed["task"] == "quant.x"
    assert failed["run_dir"] == str(store.runs_dir / ids[1])
    assert set(failed) == {"id", "kind", "task", "status", "created", "updated", "run_dir", "message"}


def test_open_by_id_prefix_and_path(store, tmp_path, monkeypatch):
    with store.create_run("train", {}, task="t") as made:
        run_id, run_dir = made.id, made.dir
    for ref in (run_id, run_id[:-3], str(run_dir)):
        with store.open_run(ref) as run:
            assert run.id == run_id and run.dir == run_dir
    monkeypatch.chdir(store.runs_dir)
    with store.open_run(f"./{run_id}") as run:
        assert run.id == run_id


def test_open_unknown_and_ambiguous(store):
    a = store.create_run("train", {}, task="t")
    b = store.create_run("train", {}, task="t")
    a.close(), b.close()
    with pytest.raises(UsageError, match="nope"):
        store.open_run("nope")
    prefix = os.path.commonprefix([a.id, b.id])
    with pytest.raises(UsageError) as info:
        store.open_run(prefix)
    assert "ambiguous" in str(info.value) and a.id in str(info.value) and b.id in str(info.value)


def test_open_a_directory_that_is_not_a_run(store, tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(UsageError, match="not a run directory"):
        store.open_run(str(tmp_path / "plain"))


def test_delete_run(store):
    keep = store.create_run("train", {}, task="t")
    gone = store.create_run("quant", {}, task="t")
    keep.close(), gone.close()
    store.delete_run(gone.id)
    assert not gone.dir.exists() and keep.dir.exists()
    assert [e["id"] for e in store.list_runs()] == [keep.id]


def test_delete_refuses_a_run_outside_the_workspace(store, tmp_path):
    other = RunStore(resolve_workspace(tmp_path / "other"))
    with other.create_run("train", {}, task="t") as run:
        pass
    with pytest.raises(UsageError, match="Refusing"):
        store.delete_run(str(run.dir))
    assert run.dir.is_dir()


# --- metrics, events, status, report ------------------------------------------------------------


def test_metrics_round_trip_with_nan_and_inf(store):
    with store.create_run("train", {}, task="t") as run:
        t = time.time()
        run.log_metrics([(0, "loss", 2.5, t), (0, "acc", 0.1, t)])
        run.log_metrics(
            [(1, "loss", float("nan"), t), (2, "loss", float("inf"), t), (3, "loss", -math.inf, t)]
        )
        run.log_metrics([])
        run_id = run.id
    with store.open_run(run_id) as run:  # read back through a fresh connection
        steps, values = run.read_metrics("loss")["loss"]
        assert steps == [0, 1, 2, 3]
        assert values[0] == 2.5 and math.isnan(values[1]) and values[2] == math.inf and values[3] == -math.inf
        everything = run.read_metrics()
        assert set(everything) == {"loss", "acc"} and everything["acc"] == ([0], [0.1])
        last = run.last_metrics()
        assert last["acc"] == (0, 0.1) and last["loss"] == (3, -math.inf)


def test_last_metric_nan_reads_back_as_nan(store):
    with store.create_run("train", {}, task="t") as run:
        run.log_metrics([(5, "loss", float("nan"), 0.0)])
        step, value = run.last_metrics()["loss"]
        assert step == 5 and math.isnan(value)


def test_events_round_trip(store):
    with store.create_run("train", {}, task="t") as run:
        run.log_event("epoch", {"epoch": 1, "val": {"acc": 0.9}})
        run.log_event("warning", {"text": "dataset has 3 corrupt images", "path": Path("/x/y.png")})
        run.log_event("epoch", {"epoch": 2})
        events = run.events()
        assert [e["type"] for e in events] == ["epoch", "warning", "epoch"]
        assert events[0]["content"] == {"epoch": 1, "val": {"acc": 0.9}}
        assert events[1]["content"]["path"] == "/x/y.png"
        assert [e["content"]["epoch"] for e in run.events("epoch")] == [1, 2]
        assert all(isinstance(e["time"], float) for e in events)


def test_status_updates_and_rejects_unknown(store):
    with store.create_run("train", {}, task="t") as run:
        run.set_status("running")
        assert run.status == "running" and run.message == ""
        run.set_status("done", "best acc 0.97")
        assert (run.status, run.message) == ("done", "best acc 0.97")
        with pytest.raises(ValueError):
            run.set_status("exploded")
        assert run.status == "done"


def test_report_written_atomically(store):
    with store.create_run("train", {}, task="t") as run:
        assert run.read_report() is None
        run.write_report({"best_acc": 0.97, "epochs": 3})
        run.write_report({"best_acc": 0.98, "epochs": 4})
        assert run.read_report() == {"best_acc": 0.98, "epochs": 4}
        run.write_report({"loss": float("nan"), "onnx": Path("/out/model.onnx")})
        report = run.read_report()
        assert math.isnan(report["loss"]) and report["onnx"] == "/out/model.onnx"
        assert _temp_files(run.dir) == []


def test_summary(store):
    with store.create_run("train", SPEC, task="train.classifier") as run:
        run.log_metrics([(1, "loss", 0.3, 0.0)])
        run.log_event("epoch", {"epoch": 1})
        (run.checkpoints_dir / "last.pt").write_bytes(b"x")
        (run.checkpoints_dir / ".last.pt.abcd.tmp").write_bytes(b"half")
        (run.artifacts_dir / "onnx").mkdir()
        (run.artifacts_dir / "onnx" / "model.onnx").write_bytes(b"x")
        run.write_report({"ok": True})
        s = run.summary()
    assert s["id"] == run.id and s["kind"] == "train" and s["task"] == "train.classifier"
    assert s["status"] == "created" and s["run_dir"] == str(run.dir)
    assert s["spec"] == SPEC and s["report"] == {"ok": True}
    assert s["last_metrics"] == {"loss": (1, 0.3)}
    assert s["checkpoints"] == ["last.pt"] and s["artifacts"] == ["onnx/model.onnx"]
    assert s["event_count"] == 1 and s["created"] and s["updated"] >= s["created"]


def test_concurrent_writer_threads(store):
    with store.create_run("train", {}, task="t") as run:

        def write(name: str) -> None:
            for step in range(200):
                run.log_metrics([(step, name, float(step), 0.0)])
                if step % 50 == 0:
                    run.log_event("tick", {"name": name})

        threads = [threading.Thread(target=write, args=(f"m{i}",)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        data = run.read_metrics()
        assert all(data[f"m{i}"][0] == list(range(200)) for i in range(4))
        assert len(run.events("tick")) == 16


# --- atomic files and the database on disk ------------------------------------------------------


def test_atomic_writer_keeps_old_file_when_body_raises(tmp_path):
    target = tmp_path / "ckpt.bin"
    target.write_bytes(b"old contents")
    with pytest.raises(RuntimeError), atomic_writer(target) as f:
        f.write(b"new, but only half")
        raise RuntimeError("crash mid-write")
    assert target.read_bytes() == b"old contents"
    assert _temp_files(tmp_path) == []
    atomic_write_text(target, "new contents")
    assert target.read_text() == "new contents" and _temp_files(tmp_path) == []


def test_wal_mode_is_on(store):
    with store.create_run("train", {}, task="t") as run:
        run.log_metrics([(0, "loss", 1.0, 0.0)])
        conn = sqlite3.connect(run.dir / "metrics.db")
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            conn.close()


def test_corrupt_database_is_listed_unreadable(store):
    good = store.create_run("train", {}, task="t")  # still open: its owner lives, so it reads as created
    bad = store.create_run("quant", {}, task="t")
    bad.close()
    db = bad.dir / "metrics.db"
    db.write_bytes(b"this is not sqlite at all" * 100)
    listed = {e["id"]: e for e in store.list_runs()}
    good.close()
    assert listed[good.id]["status"] == "created"
    assert listed[bad.id]["status"] == "unreadable"
    assert str(db) in listed[bad.id]["message"]
    assert listed[bad.id]["kind"] == "quant" and listed[bad.id]["created"]
    with pytest.raises(JobError, match=re.escape(str(db))):
        store.open_run(bad.id)
    store.delete_run(bad.id)  # a broken run can still be removed
    assert not bad.dir.exists()


def test_missing_database_is_listed_unreadable_and_not_recreated(store):
    with store.create_run("train", {}, task="t") as run:
        pass
    (run.dir / "metrics.db").unlink()
    [entry] = store.list_runs()
    assert entry["status"] == "unreadable" and "metrics.db" in entry["message"]
    with pytest.raises(JobError, match="missing"):
        store.open_run(run.id)
    assert not (run.dir / "metrics.db").exists()


def test_foreign_sqlite_file_is_refused(store):
    with store.create_run("train", {}, task="t") as run:
        pass
    db = run.dir / "metrics.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE other(x)")
    conn.close()
    with pytest.raises(JobError, match="missing tables"):
        store.open_run(run.id)


# --- durability ---------------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from workbench.runs import RunStore
    run = RunStore(sys.argv[1]).create_run("train", {"epochs": 1}, task="train.classifier")
    print(run.dir, flush=True)
    batches = 0
    while True:
        run.log_metrics([(batches, f"m{i}", float(batches), time.time()) for i in range(10)])
        batches += 1
        print(batches, flush=True)
    """
)


HANG_S = 600


@pytest.mark.slow
def test_committed_metrics_survive_sigkill(tmp_path):
    workspace = resolve_workspace(tmp_path / "ws")
    env = dict(os.environ, PYTHONPATH=str(Path(workbench.__file__).parents[1]))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # end of output: the writer has exited

    threading.Thread(target=read, daemon=True).start()

    def next_line() -> str:
        # Wait for the writer's next line or its exit, however slow its start on this machine: the event, not
        # a clock. HANG_S only keeps a writer that neither writes nor exits from hanging the suite.
        line = lines.get(timeout=HANG_S)
        if line is None:
            proc.wait()
            raise AssertionError(f"the writer exited early ({proc.returncode}): {proc.stderr.read()}")
        return line

    try:
        run_dir = Path(next_line().strip())
        reported = 0
        while reported < 50:
            reported = int(next_line())
        proc.kill()  # SIGKILL on POSIX: no atexit, no close, no checkpoint of the WAL
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0

    db = run_dir / "metrics.db"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = conn.execute("SELECT count(*) FROM metrics").fetchone()[0]
    finally:
        conn.close()
    assert rows >= reported * 10
    with RunStore(workspace).open_run(run_dir.name) as run:
        steps, _ = run.read_metrics("m0")["m0"]
        assert steps[:reported] == list(range(reported))


# -- what a job killed mid-write leaves behind (issue #19, 5.8) ----------------------------------------------


def _kill_mid_export(store: RunStore) -> tuple[Path, list[Path]]:
    """A run whose owner died with an export staged and a checkpoint half-written, as SIGKILL leaves it."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import os, tempfile
        from pathlib import Path
        from workbench.runs import RunStore
        run = RunStore({str(store.workspace)!r}).create_run("export", {{}}, task="export.model")
        stage = Path(tempfile.mkdtemp(prefix=".model.onnx.", dir=run.dir / "artifacts"))
        (stage / "model.onnx").write_bytes(b"half")
        (run.dir / "checkpoints" / ".last.pt.0a1b2c3d.tmp").write_bytes(b"half")
        print(run.dir, flush=True)
        os._exit(0)  # no cleanup of any kind, as after a SIGKILL
    """),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    run_dir = Path(child.stdout.strip())
    leftovers = [*(run_dir / "artifacts").iterdir(), *(run_dir / "checkpoints").iterdir()]
    assert len(leftovers) == 2
    return run_dir, leftovers


def test_opening_a_dead_run_removes_its_stale_staging(store):
    run_dir, leftovers = _kill_mid_export(store)
    (run_dir / "artifacts" / "model.onnx").write_bytes(b"a finished export stays")
    with store.open_run(run_dir.name) as run:
        assert run.summary()["status"] == "interrupted"
    assert not any(path.exists() for path in leftovers)
    assert (run_dir / "artifacts" / "model.onnx").read_bytes() == b"a finished export stays"


def test_a_live_jobs_staging_is_never_swept(store):
    with store.create_run("export", {}, task="export.model") as live:
        stage = live.dir / "artifacts" / ".model.onnx.abc123"
        stage.mkdir()
        with store.open_run(live.id):
            pass
        assert stage.is_dir()  # its owner still writes there
    with store.open_run(live.id):
        pass
    assert not stage.exists()


def test_resuming_a_run_removes_what_its_killed_writer_left(store):
    run_dir, leftovers = _kill_mid_export(store)
    with store.open_run(run_dir.name, readonly=False) as run:
        leftovers[0].parent.joinpath(".model.onnx.zzz").mkdir()  # appears after the open, before the claim
        run.claim()
        assert not any(path.exists() for path in (*leftovers, leftovers[0].parent / ".model.onnx.zzz"))


def test_reading_a_clean_run_still_changes_nothing(store):
    with store.create_run("train", {}, task="train.classifier") as run:
        run.set_status("done")
    before = sorted((p.relative_to(run.dir), p.stat().st_mtime_ns) for p in run.dir.rglob("*"))
    with store.open_run(run.id):
        pass
    assert sorted((p.relative_to(run.dir), p.stat().st_mtime_ns) for p in run.dir.rglob("*")) == before
