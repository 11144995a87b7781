"""The `workbench` command end to end: real subprocesses of `python -m workbench`, real run folders.

Contract: with --json stdout is exactly one JSON object (always `run_dir` and `status`); progress goes to
stderr; exit 0 done, 1 the job failed (`error: {type, message}`), 2 bad usage or spec; no traceback
unless --debug.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_runner import run_cli

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from cli_helpers import (  # noqa: F401
    ALLOWED_DATASETS,
    TRACEBACK,
    _argv,
    _env,
    count_args,
    expect,
    integrity,
    no_traceback,
    one_json,
    run_dirs,
    wb,
)

pytestmark = pytest.mark.slow


# -- a run from start to delete --------------------------------------------------------------------


def test_diag_count_done_then_list_show_delete(tmp_path: Path):
    ws = tmp_path / "ws"
    proc = wb(tmp_path, *count_args(steps=20, delay=0), "--json")
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done"
    assert result["steps_completed"] == 20
    assert "error" not in result
    run_dir = Path(result["run_dir"])
    assert run_dir.is_dir()
    assert run_dir.parent == (ws / "runs").absolute()
    for name in ("spec.toml", "metrics.db", "report.json"):
        assert (run_dir / name).is_file(), name
    assert tomllib.loads((run_dir / "spec.toml").read_text()) == {"steps": 20, "delay": 0}
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "done" and report["steps_completed"] == 20
    assert integrity(run_dir / "metrics.db") == "ok"
    # Progress went to stderr, naming the run folder; stdout held only the result.
    assert "run folder" in proc.stderr
    # --workspace wins over WORKBENCH_WORKSPACE.
    assert run_dirs(tmp_path / "env-workspace") == []

    listed = wb(tmp_path, "runs", "list", "--json")
    expect(listed, 0)
    runs = json.loads(listed.stdout)["runs"]
    assert [r["id"] for r in runs] == [run_dir.name]
    assert runs[0]["status"] == "done" and runs[0]["task"] == "debug.count"
    assert Path(runs[0]["run_dir"]) == run_dir

    prefix = run_dir.name[:-2]  # a unique prefix, not the whole id
    shown = wb(tmp_path, "runs", "show", prefix, "--json")
    expect(shown, 0)
    summary = json.loads(shown.stdout)
    assert summary["id"] == run_dir.name
    assert summary["status"] == "done"
    assert summary["last_metrics"]["value"] == [19, 19.0]
    assert summary["spec"] == {"steps": 20, "delay": 0}
    assert summary["report"]["status"] == "done"
    assert summary["problems"] == []

    deleted = wb(tmp_path, "runs", "delete", run_dir.name, "--json")
    expect(deleted, 0)
    assert json.loads(deleted.stdout)["status"] == "done"
    assert not run_dir.exists()
    relisted = wb(tmp_path, "runs", "list", "--json")
    expect(relisted, 0)
    assert json.loads(relisted.stdout)["runs"] == []


# -- failing jobs ----------------------------------------------------------------------------------


def test_raise_exits_1_with_runtime_error_and_no_traceback(tmp_path: Path):
    proc = wb(tmp_path, *count_args(steps=5, delay=0, crash_at=2, crash_mode="raise"), "--json")
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed"
    assert result["error"]["type"] == "RuntimeError"
    assert "step 2" in result["error"]["message"]
    assert "traceback" not in result
    run_dir = Path(result["run_dir"])
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "failed" and report["error"]["type"] == "RuntimeError"


def test_raise_with_debug_shows_traceback_on_stderr_only(tmp_path: Path):
    proc = wb(tmp_path, *count_args(steps=5, delay=0, crash_at=2, crash_mode="raise"), "--json", "--debug")
    expect(proc, 1)
    assert TRACEBACK in proc.stderr
    assert "RuntimeError: deliberate failure at step 2" in proc.stderr
    result = one_json(proc)  # stdout is still exactly one JSON object
    assert result["status"] == "failed" and result["error"]["type"] == "RuntimeError"
    assert "traceback" not in result


def test_job_error_exits_1(tmp_path: Path):
    proc = wb(tmp_path, *count_args(steps=5, delay=0, crash_at=1, crash_mode="job_error"), "--json")
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed"
    assert result["error"]["type"] == "JobError"
    assert result["error"]["message"]


def test_killed_process_leaves_a_sound_run(tmp_path: Path):
    ws = tmp_path / "ws"
    # delay so some metric batches are committed before the process SIGKILLs itself at step 20.
    proc = wb(tmp_path, *count_args(steps=100, delay=0.02, crash_at=20, crash_mode="kill"), "--json")
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    (run_dir,) = run_dirs(ws)
    assert (run_dir / "spec.toml").is_file()
    assert tomllib.loads((run_dir / "spec.toml").read_text())["crash_mode"] == "kill"
    assert not (run_dir / "report.json").exists()
    assert integrity(run_dir / "metrics.db") == "ok"
    conn = sqlite3.connect(run_dir / "metrics.db")
    try:
        rows, last = conn.execute("SELECT count(*), max(step) FROM metrics WHERE name = 'value'").fetchone()
    finally:
        conn.close()
    assert rows > 0 and last < 20
    # The store still reads it, and tells the truth: nobody owns it any more, so it was interrupted.
    shown = wb(tmp_path, "runs", "show", run_dir.name, "--json")
    expect(shown, 0)
    summary = json.loads(shown.stdout)
    assert summary["status"] == "interrupted" and "ended without finishing" in summary["message"]
    assert summary["owner"] is None
    assert summary["report"] is None
    assert summary["last_metrics"]["value"][0] == last


# -- spec errors: exit 2, one JSON object, the field named -----------------------------------------


def _spec_error(proc: subprocess.CompletedProcess, tmp_path: Path) -> str:
    expect(proc, 2)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed"
    assert result["run_dir"] is None
    assert result["error"]["type"] == "SpecError"
    message = result["error"]["message"]
    assert message in proc.stderr  # the same words for a person reading the terminal
    assert run_dirs(tmp_path / "ws") == []  # a bad spec never makes a run
    return message


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["lr=-1"], ["lr", "out of range", "> 0"]),
        (["lrr=0.1"], ["lrr", "did you mean 'lr'"]),
        (["dataset.name=imagenet"], ["dataset.name", "imagenet", *ALLOWED_DATASETS]),
        (["epochs=ten"], ["epochs", "ten", "not an integer"]),
        (["novalue"], ["novalue", "key=value"]),
        (["epochs=3", "model=cnn"], ["model", "table"]),
    ],
    ids=["negative-lr", "typo", "dataset", "not-int", "no-equals", "table"],
)
def test_bad_override_exits_2_naming_the_field(tmp_path: Path, overrides: list[str], words: list[str]):
    args = [arg for item in overrides for arg in ("--set", item)]
    message = _spec_error(wb(tmp_path, "train", *args, "--json"), tmp_path)
    for word in words:
        assert word in message, (word, message)


def test_missing_spec_file_exits_2(tmp_path: Path):
    message = _spec_error(wb(tmp_path, "train", "missing.toml", "--json"), tmp_path)
    assert "missing.toml" in message and "no such file" in message


def test_toml_syntax_error_names_file_and_line(tmp_path: Path):
    spec = tmp_path / "broken.toml"
    spec.write_text('epochs = 3\nlr = \n[dataset]\nname = "fake"\n')
    message = _spec_error(wb(tmp_path, "train", str(spec), "--json"), tmp_path)
    assert str(spec) in message
    assert "line 2" in message
    assert "TOML" in message


def test_yaml_spec_file_exits_2(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("epochs: 3\n")
    message = _spec_error(wb(tmp_path, "train", str(spec), "--json"), tmp_path)
    assert str(spec) in message
    assert ".yaml" in message and ".toml" in message


def test_bad_field_inside_spec_file_names_file_and_field(tmp_path: Path):
    spec = tmp_path / "train.toml"
    spec.write_text('epochs = 2\n[dataset]\nname = "imagenet"\n')
    message = _spec_error(wb(tmp_path, "train", str(spec), "--json"), tmp_path)
    assert str(spec) in message and "dataset.name" in message and "imagenet" in message


def test_bad_override_without_json_prints_nothing_on_stdout(tmp_path: Path):
    proc = wb(tmp_path, "train", "--set", "lrr=0.1")
    expect(proc, 2)
    no_traceback(proc)
    assert proc.stdout == ""
    assert "did you mean 'lr'" in proc.stderr


def test_spec_error_with_debug_shows_traceback_and_one_json(tmp_path: Path):
    proc = wb(tmp_path, "train", "--set", "lr=-1", "--json", "--debug")
    expect(proc, 2)
    assert TRACEBACK in proc.stderr
    assert one_json(proc)["error"]["type"] == "SpecError"


# -- job verbs (train runs; the others' tasks are not built yet) ---------------------------------------------


def test_a_train_spec_file_with_overrides_runs_and_bad_ones_fail_cleanly(tmp_path: Path):
    spec = tmp_path / "train.toml"
    spec.write_text(
        'epochs = 2\nlr = 0.01\noptimizer = "sgd"\n'
        '[dataset]\nname = "fake"\nsize = 64\nnum_classes = 4\nimage_size = [8]\n'
        '[model]\nname = "mlp"\nnum_classes = 4\ninput_shape = [3, 8, 8]\n'
    )
    # The file with one bad override is a spec error (2), found before anything runs (no run folder).
    bad = wb(tmp_path, "train", str(spec), "--set", "dataset.val_fraction=1.5", "--json")
    assert "dataset.val_fraction" in _spec_error(bad, tmp_path)
    proc = wb(
        tmp_path, "train", str(spec), "--set", "batch_size=8", "--set", "dataset.val_fraction=0.2", "--json"
    )
    expect(proc, 0)
    result = one_json(proc)
    assert result["status"] == "done" and result["epochs_completed"] == 2
    assert Path(result["checkpoint"]).is_file() and Path(result["run_dir"], "spec.toml").is_file()
    # An override that contradicts the data fails the job (1) with a message naming the field.
    proc = wb(tmp_path, "train", str(spec), "--set", "model.input_shape=1,28,28", "--json")
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert "model.input_shape" in result["error"]["message"]


@pytest.mark.parametrize(
    ("verb", "bad"),
    [
        (["export"], "format=coreml"),
        (["bench"], "batch_sizes=0"),
    ],
)
def test_export_and_bench_validate_then_fail_cleanly(tmp_path: Path, verb: list[str], bad: str):
    # A source that is not there fails the job (exit 1) with one line naming the field; a bad value is a usage
    # error.
    proc = wb(tmp_path, *verb, "--set", "source.run=nope", "--json")
    expect(proc, 1)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "JobError"
    assert result["error"]["message"].startswith("source.run: No run matches 'nope'")
    usage = tmp_path / "usage"  # a bad value makes no run at all: look in a workspace of its own
    usage.mkdir()
    message = _spec_error(wb(usage, *verb, "--set", bad, "--json"), usage)
    assert bad.split("=")[0] in message


# -- devices ---------------------------------------------------------------------------------------


def test_devices_lists_the_cpu_with_capabilities(tmp_path: Path):
    proc = wb(tmp_path, "devices", "--json", timeout=120)  # imports torch: the slow one, called once
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done"
    devices = result["devices"]
    assert isinstance(devices, list) and devices
    cpu = devices[0]
    assert cpu["id"] == "cpu"
    caps = cpu["capabilities"]
    assert {"autocast_bf16", "autocast_fp16", "compile", "onnxruntime_providers", "tensorrt"} <= set(caps)
    assert isinstance(caps["autocast_bf16"], bool) and isinstance(caps["autocast_fp16"], bool)
    assert isinstance(caps["compile"]["available"], bool)
    assert isinstance(caps["onnxruntime_providers"], list)
    assert caps["tensorrt"]["available"] is False
    assert caps["tensorrt"]["reason"]
    assert result["torch"]


# -- bad usage -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["frobnicate"], ["train", "--bogus"], ["runs"], ["diag", "explode"]],
    ids=["unknown-verb", "bad-option", "missing-subverb", "bad-diag-task"],
)
def test_bad_usage_prints_usage_on_stderr(tmp_path: Path, args: list[str]):
    proc = wb(tmp_path, *args)
    assert proc.returncode != 0
    no_traceback(proc)
    assert proc.stdout == ""
    assert "usage: workbench" in proc.stderr
    assert "error:" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [["frobnicate"], ["train", "--bogus"]],
    ids=["unknown-verb", "bad-option"],
)
def test_bad_usage_exits_2(tmp_path: Path, args: list[str]):
    expect(wb(tmp_path, *args), 2)


def test_runs_show_unknown_run_exits_2_naming_it(tmp_path: Path):
    proc = wb(tmp_path, "runs", "show", "nosuchrun", "--json")
    expect(proc, 2)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed" and result["error"]["type"] == "UsageError"
    assert "nosuchrun" in result["error"]["message"]
    assert "nosuchrun" in proc.stderr


def test_diag_set_without_equals_exits_2(tmp_path: Path):
    proc = wb(tmp_path, "diag", "count", "--set", "novalue", "--json")
    expect(proc, 2)
    no_traceback(proc)
    assert "novalue" in one_json(proc)["error"]["message"]
    assert run_dirs(tmp_path / "ws") == []


@pytest.mark.parametrize("args", [count_args(steps=1), ["runs", "list"]], ids=["job", "runs"])
def test_workspace_that_is_a_file_exits_2_naming_it(tmp_path: Path, args: list[str]):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("not a workspace\n")
    proc = wb(tmp_path, *args, "--json", workspace=not_a_dir)
    expect(proc, 2)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "failed"
    assert str(not_a_dir) in result["error"]["message"]
    assert str(not_a_dir) in proc.stderr
    assert not_a_dir.read_text() == "not a workspace\n"


# -- Ctrl-C ----------------------------------------------------------------------------------------


def _start_long_count(tmp_path: Path, workspace: Path) -> tuple[subprocess.Popen, list[str], threading.Event]:
    proc = subprocess.Popen(
        _argv(*count_args(steps=100000, delay=0.01), "--json", "--workspace", str(workspace)),
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    started = threading.Event()

    def read_stderr() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "run folder" in line:
                started.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    return proc, lines, started


def _interrupt(proc: subprocess.Popen, started: threading.Event) -> tuple[str, float]:
    try:
        started.wait(10)  # the interpreter start is slow on a loaded machine; usually well under 2 s
        time.sleep(0.2)  # a few steps into the run
        assert proc.poll() is None, "the job ended before it was interrupted"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out = proc.stdout.read()
        proc.wait(timeout=10)
        return out, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_cancels_the_run(tmp_path: Path):
    ws = tmp_path / "ws"
    proc, lines, started = _start_long_count(tmp_path, ws)
    out, _ = _interrupt(proc, started)
    assert started.is_set(), "stderr never reported the run folder"
    assert proc.returncode == 1, (proc.returncode, out, "".join(lines))
    # No latency is asserted (shared machines): a 1,000 s count that ends inside _interrupt's 10 s wait was
    # cancelled, not finished.
    stderr = "".join(lines)
    assert TRACEBACK not in stderr and TRACEBACK not in out
    result = json.loads(out)
    assert result["status"] == "cancelled"
    assert result["error"]["type"] == "JobCancelled"
    run_dir = Path(result["run_dir"])
    assert json.loads((run_dir / "report.json").read_text())["status"] == "cancelled"
    assert integrity(run_dir / "metrics.db") == "ok"
    shown = wb(tmp_path, "runs", "show", run_dir.name, "--json")
    expect(shown, 0)
    summary = json.loads(shown.stdout)
    assert summary["status"] == "cancelled"
    assert summary["last_metrics"]["value"][0] >= 1


def test_run_folder_line_on_stderr_is_not_wrapped(tmp_path: Path):
    ws = tmp_path / ("workspace-with-a-long-name-" + "x" * 60)
    proc = wb(tmp_path, *count_args(steps=2, delay=0), "--json", workspace=ws)
    expect(proc, 0)
    run_dir = one_json(proc)["run_dir"]
    assert f"run folder: {run_dir}\n" in proc.stderr, proc.stderr


# -- global flags before or after the verb ---------------------------------------------------------


@pytest.mark.parametrize("before", [True, False])
def test_workspace_and_json_flags_work_before_or_after_every_verb(tmp_path: Path, before: bool):
    ws = tmp_path / "flag-ws"
    made = run_cli(
        [*count_args(steps=2, delay=0), "--json", "--workspace", str(ws)], cwd=tmp_path, env=_env(tmp_path)
    )
    expect(made, 0)
    run_id = Path(one_json(made)["run_dir"]).name
    for verb in (["runs", "list"], ["runs", "show", run_id]):
        flags = ["--workspace", str(ws), "--json"]
        argv = [*flags, *verb] if before else [*verb, *flags]
        proc = run_cli(argv, cwd=tmp_path, env=_env(tmp_path))
        expect(proc, 0)
        shown = json.loads(proc.stdout)
        if verb[1] == "list":
            assert shown["workspace"] == str(ws) and [r["id"] for r in shown["runs"]] == [run_id]
        else:
            assert shown["id"] == run_id


def test_debug_before_the_verb_shows_the_traceback(tmp_path: Path):
    proc = run_cli(
        ["--debug", "--workspace", str(tmp_path / "ws"), *count_args(crash_at=0, crash_mode="raise")],
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    expect(proc, 1)
    assert TRACEBACK in proc.stderr
