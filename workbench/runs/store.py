"""The store of a workspace's runs: creating, finding (by id, prefix or folder), listing and deleting them. No
torch, no Qt.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import sqlite3
from datetime import datetime
from pathlib import Path

import tomli_w

from workbench.errors import JobError, UsageError
from workbench.runs.atomic import _fsync_dir, atomic_write_text
from workbench.runs.layout import _GIVEN_ID, _RUN_ID, DB_NAME, LOCK_NAME
from workbench.runs.ownership import RunOwner, sweep_dead_staging
from workbench.runs.run import Run, _init_db, _timestamp, effective_status


class RunStore:
    """All runs of one workspace, in workspace/runs/<run_id>/."""

    def __init__(self, workspace: str | Path):
        self.workspace = Path(workspace).absolute()
        self.runs_dir = self.workspace / "runs"

    def create_run(self, kind: str, spec: dict, *, task: str, run_id: str | None = None) -> Run:
        """A new run, owned by this process; `run_id` names it (e.g. one id all torchrun ranks agree on),
        otherwise the id is `<time>-<kind>-<random>`. A given id that exists already is a JobError."""
        # Serialize first: a spec that is not TOML-able must not leave a half-made run behind.
        spec_text = tomli_w.dumps(spec)
        safe_kind = re.sub(r"[^A-Za-z0-9._]+", "_", kind).strip("._") or "run"
        if run_id is not None and not _GIVEN_ID.match(run_id):
            raise UsageError(
                f"run id {run_id!r}: use letters, digits, '.', '_' and '-' (up to 100), not starting "
                "with '.' or '-'"
            )
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobError(
                f"Cannot create the runs directory {self.runs_dir}: {exc.strerror or exc}"
            ) from exc
        while True:
            now = datetime.now().astimezone()
            if run_id is not None:
                final = self.runs_dir / run_id
                if final.exists():
                    raise JobError(f"Cannot create run {run_id} in {self.runs_dir}: it exists already")
                break
            run_id = f"{now:%Y%m%d-%H%M%S}-{safe_kind}-{secrets.token_hex(3)}"
            final = self.runs_dir / run_id
            if not final.exists():
                break
        # Built under a hidden name and renamed at the end, so list_runs never sees a half-made run. The
        # owner lock is taken before the rename (flock follows the file), so no reader ever sees it unowned.
        staging = self.runs_dir / f".creating-{run_id}"
        owner = None
        try:
            staging.mkdir()
            (staging / "checkpoints").mkdir()
            (staging / "artifacts").mkdir()
            atomic_write_text(staging / "spec.toml", spec_text)
            _init_db(staging / DB_NAME, kind, task, now.isoformat())
            owner = RunOwner.acquire(staging)
            os.rename(staging, final)
        except (OSError, sqlite3.Error, JobError) as exc:
            if owner is not None:
                owner.release()
            shutil.rmtree(staging, ignore_errors=True)
            raise JobError(f"Cannot create run {run_id} in {self.runs_dir}: {exc}") from exc
        _fsync_dir(self.runs_dir)
        owner.run_dir = final
        return Run(final, owner=owner)

    def _is_inside(self, path: Path) -> bool:
        # A symlink in runs/ that leads out of the workspace is not one of our runs (and never deleted).
        try:
            return path.resolve().parent == self.runs_dir.resolve()
        except OSError:
            return False

    def _run_dirs(self) -> list[Path]:
        if not self.runs_dir.is_dir():
            return []
        return [
            p
            for p in self.runs_dir.iterdir()
            if p.is_dir() and not p.name.startswith(".") and (not p.is_symlink() or self._is_inside(p))
        ]

    def list_runs(self) -> list[dict]:
        """Newest first; a run that cannot be read is listed with status "unreadable", never raised.

        Read-only: listing changes no file, and works on a read-only workspace.
        """
        entries = []
        for run_dir in self._run_dirs():
            try:
                with Run(run_dir, readonly=True) as run:
                    meta = run._meta()
                status, message = effective_status(
                    run_dir, meta.get("status", ""), meta.get("message", ""), meta.get("task")
                )
                entry = {
                    "id": run_dir.name,
                    "kind": meta.get("kind"),
                    "task": meta.get("task"),
                    "status": status,
                    "created": meta.get("created"),
                    "updated": meta.get("updated"),
                    "run_dir": str(run_dir),
                    "message": message,
                }
            except (JobError, OSError, sqlite3.Error) as exc:
                entry = self._unreadable_entry(run_dir, str(exc))
            entries.append(entry)
        entries.sort(key=lambda e: (_timestamp(e["created"]) or 0.0, e["id"]), reverse=True)
        return entries

    @staticmethod
    def _unreadable_entry(run_dir: Path, message: str) -> dict:
        # Recover what the id itself says, so the broken run still sorts and reads sensibly.
        match = _RUN_ID.match(run_dir.name)
        created = None
        if match:
            with contextlib.suppress(ValueError):
                created = datetime.strptime(match[1], "%Y%m%d-%H%M%S").astimezone().isoformat()
        return {
            "id": run_dir.name,
            "kind": match[2] if match else None,
            "task": None,
            "status": "unreadable",
            "created": created,
            "updated": None,
            "run_dir": str(run_dir),
            "message": message,
        }

    def resolve(self, ref: str) -> Path:
        """The run directory `ref` names: a run id, a unique id prefix, or a path to a run directory."""
        ref = str(ref).strip()
        if not ref:
            raise UsageError("No run given: pass a run id, an id prefix or a run directory.")
        if (
            "/" not in ref
            and os.sep not in ref
            and (self.runs_dir / ref).is_dir()
            and not ref.startswith(".")
        ):
            candidate = self.runs_dir / ref
            if candidate.is_symlink() and not self._is_inside(candidate):
                raise UsageError(f"{candidate} is a link to a folder outside the workspace, not a run.")
            return candidate
        as_path = Path(ref).expanduser()
        if as_path.is_dir():
            if not (as_path / DB_NAME).exists() and not (as_path / "spec.toml").exists():
                raise UsageError(f"{ref} is a directory but not a run directory (no {DB_NAME} or spec.toml).")
            return as_path.absolute()
        candidates = sorted(p.name for p in self._run_dirs() if p.name.startswith(ref))
        if not candidates:
            raise UsageError(f"No run matches {ref!r} in {self.runs_dir}.")
        if len(candidates) > 1:
            shown = ", ".join(candidates[:10]) + (
                f" and {len(candidates) - 10} more" if len(candidates) > 10 else ""
            )
            raise UsageError(f"Run {ref!r} is ambiguous: it matches {shown}.")
        return self.runs_dir / candidates[0]

    def open_run(self, ref: str, *, readonly: bool = True) -> Run:
        """Open a run to read (the default: changes nothing but removing a killed job's half-written staging,
        see sweep_dead_staging) or, with readonly=False, to write after claim()."""
        run_dir = self.resolve(ref)
        sweep_dead_staging(run_dir)
        return Run(run_dir, readonly=readonly)

    def delete_run(self, ref: str) -> None:
        """Delete a run directory; works on unreadable runs too, but only inside this workspace.

        A run whose job still lives is refused (RunBusyError, exit code 1): its owner must stop first.
        """
        run_dir = self.resolve(ref)
        if not self._is_inside(run_dir) or run_dir.resolve().parent != self.runs_dir.resolve():
            raise UsageError(f"Refusing to delete {run_dir}: it is not a run in {self.runs_dir}.")
        run_dir = run_dir.resolve()
        # Held through the delete, so no job can start writing into the folder as it goes.
        owner = RunOwner.acquire(run_dir, doing="delete it") if (run_dir / LOCK_NAME).exists() else None
        try:
            shutil.rmtree(run_dir)
        except OSError as exc:
            raise JobError(f"Cannot delete run {run_dir}: {exc}") from exc
        finally:
            if owner is not None:
                owner.release()
