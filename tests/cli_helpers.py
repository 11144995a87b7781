"""Helpers for tests that run the `workbench` command as a real subprocess."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from cli_runner import run_cli

TRACEBACK = "Traceback (most recent call last)"
ALLOWED_DATASETS = (
    "digits",
    "mnist",
    "fashion_mnist",
    "kmnist",
    "cifar10",
    "cifar100",
    "svhn",
    "imagefolder",
    "fake",
)

# -- helpers ---------------------------------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    # Deliberately a different folder from --workspace: the flag must win over the variable.
    env["WORKBENCH_WORKSPACE"] = str(tmp_path / "env-workspace")
    env.pop("COLUMNS", None)  # rich reads these; the tests want what a plain pipe gets
    env.pop("LINES", None)
    return env


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "workbench", *args]


def count_args(**fields: object) -> list[str]:
    """`diag count --set k=v ...` arguments."""
    return ["diag", "count", *(arg for key, value in fields.items() for arg in ("--set", f"{key}={value}"))]


def trust_tmp(tmp_path: Path, workspace: Path) -> None:
    """Trust the test's own folder in `workspace`, as `workbench trust <tmp_path>` would: the Python files a
    test writes there are its user code. The check itself stays on (tests/test_trust.py runs it untrusted)."""
    from workbench.trust import trust_folder

    if (workspace.exists() and not workspace.is_dir()) or not any(tmp_path.rglob("*.py")):
        # a test of a bad workspace, or one with no user code: its workspace is left as the command finds it
        return
    workspace.mkdir(parents=True, exist_ok=True)
    trust_folder(workspace, tmp_path)


def wb(
    tmp_path: Path, *args: str, workspace: Path | None = None, timeout: float = 60, trusted: bool = True
) -> subprocess.CompletedProcess:
    """Run `workbench ARGS --workspace WS` in tmp_path (a child forked with torch already imported: see
    cli_runner) and return the finished process. `trusted`: tmp_path is a trusted folder of WS first."""
    ws = workspace if workspace is not None else tmp_path / "ws"
    if trusted:
        trust_tmp(tmp_path, ws)
    return run_cli([*args, "--workspace", str(ws)], cwd=tmp_path, env=_env(tmp_path), timeout=timeout)


def one_json(proc: subprocess.CompletedProcess) -> dict:
    """stdout must be exactly one JSON object: json.loads of the whole of it, nothing before or after."""
    try:
        result = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"stdout is not one JSON object ({exc}):\n{proc.stdout!r}\nstderr:\n{proc.stderr}"
        ) from None
    assert isinstance(result, dict), proc.stdout
    assert "run_dir" in result and "status" in result, result
    return result


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    assert TRACEBACK not in proc.stdout, proc.stdout
    assert TRACEBACK not in proc.stderr, proc.stderr


def expect(proc: subprocess.CompletedProcess, code: int) -> None:
    assert proc.returncode == code, (
        f"exit {proc.returncode}, expected {code}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )


def run_dirs(workspace: Path) -> list[Path]:
    runs = workspace / "runs"
    return (
        sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith("."))
        if runs.is_dir()
        else []
    )


def integrity(db: Path) -> str:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()
