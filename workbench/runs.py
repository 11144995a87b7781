"""The durable run store: run directories under workspace/runs, their SQLite metrics/events, atomic file writes.

Stdlib and tomli_w only: no torch, no Qt, no numpy (the GUI, the worker and the command line all read runs).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import tomli_w

from workbench.errors import JobError, UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

try:
    import fcntl
except ImportError:  # Windows: no flock; runs are then not guarded against a second writer
    fcntl = None

STATUSES = ("created", "running", "done", "failed", "cancelled")
# What a reader may see besides STATUSES: derived from a free owner lock, never stored.
INTERRUPTED = "interrupted"
LIVE_STATUSES = ("created", "running")
SCHEMA_VERSION = 1
DB_NAME = "metrics.db"
LOCK_NAME = ".owner.lock"
_RUN_ID = re.compile(r"^(\d{8}-\d{6})-(.+)-([0-9a-f]{6})$")
_GIVEN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")


# --- atomic writes -----------------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), hence best effort.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: str | Path) -> Iterator[IO[bytes]]:
    """Yield a binary file that replaces `path` only if the body finishes; otherwise `path` is untouched."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        # Same directory as the target so os.replace is a rename, never a copy across file systems.
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # 0o666 so the umask applies, as for an ordinary file
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2) + "\n")


# --- runs ----------------------------------------------------------------------------------------


def _now() -> str:
    return datetime.now().astimezone().isoformat()


def _timestamp(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def _list_files(directory: Path) -> list[str]:
    # Hidden names are atomic_writer's temp files (or the user's dotfiles): not results.
    if not directory.is_dir():
        return []
    return sorted(
        p.relative_to(directory).as_posix()
        for p in directory.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts)
    )


def read_text_file(path: Path, what: str) -> str:
    """A run's UTF-8 text file; FileNotFoundError passes through, every other problem is named."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise JobError(f"{what} {path} is a folder, not a file; move it away and the run reads again.") from None
    except UnicodeDecodeError as exc:
        raise JobError(f"{what} {path} is not UTF-8 text (byte {exc.start}): the file is damaged.") from None
    except OSError as exc:
        raise JobError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def upgrade_run_spec(data: dict) -> dict:
    """A stored run spec as it was meant when written: a run's spec.toml holds every field, so one missing is a field
    added since, whose default may have changed what the run did. dataset.stratify: splits by class came with
    it; a run made before it was split plainly, and its resume, quantization or export must see the same splits (a
    test split of other samples would hold samples it trained on)."""
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and "stratify" not in dataset:
        dataset["stratify"] = False
    return data


def _real(value: float | None) -> float:
    # SQLite stores NaN as NULL; the only NULLs in metrics.value come from NaN.
    return math.nan if value is None else value


def _init_db(db_path: Path, kind: str, task: str, created: str) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(
            f"""
            BEGIN;
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE metrics(step INTEGER, name TEXT, value REAL, time REAL);
            CREATE INDEX metrics_name_step ON metrics(name, step);
            CREATE TABLE events(time REAL, type TEXT, content TEXT);
            PRAGMA user_version = {SCHEMA_VERSION};
            COMMIT;
            """
        )
        meta = {
            "kind": kind,
            "task": task,
            "created": created,
            "updated": created,
            "status": "created",
            "message": "",
        }
        with _transaction(conn):
            conn.executemany("INSERT INTO meta VALUES (?, ?)", meta.items())
    finally:
        conn.close()


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        # SQLite may already have rolled back (disk full, I/O error); a second ROLLBACK would hide the cause.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# --- ownership -------------------------------------------------------------------------------------
# A run has one owner: the process that runs its job holds an exclusive flock on <run>/.owner.lock for
# as long as the job lives. The kernel drops the lock when that process dies, however it dies (SIGKILL,
# os._exit, a segfault), so "running" with a free lock can only mean the run was interrupted.


class RunBusyError(JobError):
    """Another live process owns the run: a second writer or a delete must wait for it or stop it."""


def _describe_owner(info: dict) -> str:
    parts = [f"pid {info['pid']}" if info.get("pid") else "", f"on {info['host']}" if info.get("host") else "",
             f"since {info['since']}" if info.get("since") else ""]
    return " ".join(p for p in parts if p) or "another process"


def _read_owner_info(fd: int) -> dict:
    try:
        data = os.pread(fd, 4096, 0)
        info = json.loads(data.decode("utf-8")) if data else {}
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


class RunOwner:
    """The exclusive lock that makes this process the one writer of a run; `release()` (or exit) frees it."""

    def __init__(self, run_dir: Path, fd: int | None):
        self.run_dir = run_dir
        self._fd = fd

    @classmethod
    def acquire(cls, run_dir: str | Path, *, wait: float = 0.5, doing: str = "write to it") -> RunOwner:
        """Take the lock, retrying for `wait` seconds; raises RunBusyError naming the live owner."""
        run_dir = Path(run_dir)
        if fcntl is None:
            return cls(run_dir, None)
        path = run_dir / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise JobError(f"Cannot lock run {run_dir.name} ({path}): {exc.strerror or exc}") from exc
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # A reader's brief shared probe (run_owner) also blocks us: retry before calling it busy.
                if time.monotonic() < deadline:
                    time.sleep(0.02)
                    continue
                info = _read_owner_info(fd)
                os.close(fd)
                raise RunBusyError(
                    f"Run {run_dir.name} is in use by a running job ({_describe_owner(info)}); "
                    f"stop it first, or wait for it to finish, before you {doing}."
                ) from None
            except OSError as exc:
                os.close(fd)
                raise JobError(f"Cannot lock run {run_dir.name} ({path}): {exc.strerror or exc}") from exc
        info = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
        with contextlib.suppress(OSError):  # who holds it is for messages only
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode("utf-8"), 0)
        return cls(run_dir, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor drops the flock


def run_owner(run_dir: str | Path) -> dict | None:
    """{pid, host, since} of the live process that owns the run, or None when nobody does.

    Read-only: a shared, non-blocking probe of the lock, which works on a read-only workspace too.
    """
    if fcntl is None:
        return None
    try:
        fd = os.open(Path(run_dir) / LOCK_NAME, os.O_RDONLY)
    except OSError:
        return None  # no lock file: a run made before locks existed, or a half-made one; nobody owns it
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_owner_info(fd)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _staging_leftovers(run_dir: Path) -> list[Path]:
    """Hidden staging folders (an export's `.model.onnx.<random>/`) and temp files (`.last.pt.<hex>.tmp`)
    that only a job killed mid-write leaves behind: a finished write renames or removes its own."""
    found = []
    for folder in (run_dir, run_dir / "artifacts", run_dir / "checkpoints"):
        try:
            items = list(folder.iterdir())
        except OSError:
            continue
        for item in items:
            if not item.name.startswith(".") or item.name.startswith(".creating-"):
                continue
            if (item.is_dir() and not item.is_symlink() and folder.name == "artifacts") or (
                    item.name.endswith(".tmp") and item.is_file()):
                found.append(item)
    return found


def _remove_leftovers(items: list[Path]) -> None:
    for item in items:
        with contextlib.suppress(OSError):  # a read-only workspace keeps them: they are hidden and harmless
            if item.is_dir():
                shutil.rmtree(item)
            else:
                item.unlink()


def sweep_dead_staging(run_dir: str | Path) -> None:
    """Remove what a killed job left half-written in its run, once nobody owns the run any more.

    Looks first and touches nothing when there is nothing to remove, so reading a clean run still changes nothing;
    the lock is held while removing, so a live job's staging is never taken from under it.
    """
    run_dir = Path(run_dir)
    leftovers = _staging_leftovers(run_dir)
    if not leftovers or fcntl is None:
        return
    try:
        fd = os.open(run_dir / LOCK_NAME, os.O_RDONLY)  # read-only: flock needs no write access, the file stays
    except OSError:
        return  # no lock file: nothing tells whether a job still writes there, so leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return  # a live job owns the run: its staging is in use
    try:
        _remove_leftovers(leftovers)
    finally:
        os.close(fd)


def interrupted_message(run_id: str, task: str | None) -> str:
    resume = f" Resume it with `workbench train --resume {run_id}`." if task and task.startswith("train") else ""
    return ("The process running it ended without finishing (it was killed, crashed or the machine stopped); "
            f"metrics and checkpoints up to then are kept.{resume}")


_PROBE = object()


def effective_status(run_dir: str | Path, status: str, message: str, task: str | None,
                     owner: dict | None | object = _PROBE) -> tuple[str, str]:
    """What a reader should show: a live status whose owner is gone reads as interrupted. Pass `owner` (from
    run_owner) when the caller has it already, so the lock is probed once."""
    if owner is _PROBE:
        owner = run_owner(run_dir) if status in LIVE_STATUSES else None
    if status in LIVE_STATUSES and owner is None:
        return INTERRUPTED, interrupted_message(Path(run_dir).name, task)
    return status, message


def _record_end(run: Run, status: str, message: str, error_type: str) -> bool:
    if run.status not in LIVE_STATUSES:
        return False  # it ended properly after all; its own report is the truth
    error = {"type": error_type, "message": message}
    run.log_event("error", error)
    report = {"run_dir": str(run.dir), "status": status, "error": error}
    with contextlib.suppress(JobError, OSError):
        report = {**(run.read_report() or {}), **report}
    run.write_report(report)
    run.set_status(status, message)
    return True


def mark_run_ended(run_dir: str | Path, status: str, message: str, *, error_type: str = "WorkerDied") -> bool:
    """Record on disk how a run ended when its owner could not (its worker was killed or force-stopped).

    Takes the owner lock first, so a run whose job still lives is never touched; returns whether it wrote.
    """
    try:
        # The dead worker's lock is dropped as its process is reaped; a little patience covers the gap.
        owner = RunOwner.acquire(run_dir, wait=3.0, doing="mark it ended")
    except JobError:
        return False
    try:
        with Run(run_dir, owner=owner) as run:
            return _record_end(run, status, message, error_type)
    except (JobError, OSError, sqlite3.Error):
        return False
    finally:
        owner.release()


def force_end_own_run(run_dir: str | Path, status: str, message: str, *, error_type: str = "JobCancelled") -> bool:
    """The owner's last word before a hard exit: mark its own run ended, best effort and quickly.

    The lock is this process's own, so it is not taken again; the stuck job may hold the database's
    write lock, so this waits one second at most. If it cannot write, the exit frees the owner lock
    and readers see the run as interrupted: still the truth.
    """
    try:
        with Run(run_dir, timeout=1.0) as run:
            return _record_end(run, status, message, error_type)
    except Exception:  # noqa: BLE001 - nothing may stop the exit that follows
        return False


class Run:
    """One run directory: spec.toml, metrics.db, checkpoints/, artifacts/, report.json.

    Safe to share between threads; several processes may read while one writes (WAL). A reader opens
    it with `readonly=True` and changes nothing, not even the database file's size or mode; the writer
    holds a RunOwner (from `claim()` or the store's `create_run`).
    """

    def __init__(self, run_dir: str | Path, *, readonly: bool = False, owner: RunOwner | None = None,
                 timeout: float = 10.0):
        self.dir = Path(run_dir).absolute()
        self._timeout = timeout
        self.id = self.dir.name
        self.readonly = readonly
        self._owner = owner
        self._db_path = self.dir / DB_NAME
        self._lock = threading.RLock()
        if not self._db_path.is_file():
            raise JobError(f"Run database {self._db_path} is missing.")
        try:
            self._conn = self._connect()
        except sqlite3.Error as exc:
            raise JobError(f"Run database {self._db_path} cannot be opened: {exc}") from exc
        try:
            self._check_schema()
            meta = self._meta()
        except BaseException:
            self._conn.close()
            raise
        self.kind = meta.get("kind", "")
        self.task = meta.get("task", "")

    def _connect(self) -> sqlite3.Connection:
        def connect(query: str) -> sqlite3.Connection:
            return sqlite3.connect(f"{self._db_path.as_uri()}?{query}", uri=True, check_same_thread=False,
                                   isolation_level=None, timeout=self._timeout)

        if not self.readonly:
            # mode=rw: opening must never create an empty database in place of a missing one.
            return connect("mode=rw")
        wal = self._db_path.with_name(DB_NAME + "-wal")
        try:
            wal_has_data = wal.stat().st_size > 0
        except OSError:
            wal_has_data = False
        if not wal_has_data and run_owner(self.dir) is None:
            # Nobody writes and every commit is in the main file: read it as immutable, which creates no
            # -wal/-shm files beside it (a reader must leave a finished run's folder exactly as it was).
            return connect("mode=ro&immutable=1")
        # A live writer, or commits still in the WAL (a killed job): only a WAL-aware read sees them all.
        conn = connect("mode=ro")
        try:
            conn.execute("PRAGMA user_version").fetchone()
            return conn
        except sqlite3.OperationalError:
            # A WAL database on a read-only file system has no -shm to share and cannot make one; nobody
            # can be writing there, so reading it as immutable is both possible and exact.
            conn.close()
            return connect("mode=ro&immutable=1")

    def _check_schema(self) -> None:
        try:
            # The first statement reads the header: a damaged or foreign file fails here.
            if not self.readonly:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:
            raise JobError(f"Run database {self._db_path} is damaged or not a run database: {exc}") from exc
        missing = {"meta", "metrics", "events"} - tables
        if missing:
            raise JobError(
                f"Run database {self._db_path} is not a run database (missing tables: {', '.join(sorted(missing))})."
            )
        if version > SCHEMA_VERSION:
            raise JobError(
                f"Run database {self._db_path} was written by a newer workbench (schema {version})."
            )

    # ownership

    def claim(self, *, doing: str = "write to it") -> None:
        """Become the run's one writer (for a resume); raises RunBusyError while another job owns it."""
        if self.readonly:
            raise ValueError("a run opened read-only cannot be claimed")
        if self._owner is None or not self._owner.held:
            self._owner = RunOwner.acquire(self.dir, doing=doing)
            _remove_leftovers(_staging_leftovers(self.dir))  # ours now: what a killed writer left is dead

    @property
    def owned(self) -> bool:
        return self._owner is not None and self._owner.held

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._conn
            except sqlite3.ProgrammingError:
                raise  # misuse (e.g. a closed run), not a problem with the file
            except sqlite3.DatabaseError as exc:
                raise JobError(f"Run database {self._db_path} cannot be used: {exc}") from exc

    # paths

    @property
    def spec_path(self) -> Path:
        return self.dir / "spec.toml"

    @property
    def report_path(self) -> Path:
        return self.dir / "report.json"

    @property
    def checkpoints_dir(self) -> Path:
        return self.dir / "checkpoints"

    @property
    def artifacts_dir(self) -> Path:
        return self.dir / "artifacts"

    # writing

    def log_metrics(self, rows: Iterable[tuple[int, str, float, float]]) -> None:
        """Append (step, name, value, wall time) rows in one transaction; callers batch."""
        rows = [(int(step), str(name), float(value), float(t)) for step, name, value, t in rows]
        if not rows:
            return
        with self._db() as conn, _transaction(conn):
            conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?)", rows)
            self._touch(conn)

    def log_event(self, type: str, content: dict) -> None:
        # default=str: an event about a Path or a dtype must not make the job fail.
        text = json.dumps(content, default=str)
        with self._db() as conn, _transaction(conn):
            conn.execute("INSERT INTO events VALUES (?, ?, ?)", (datetime.now().timestamp(), type, text))
            self._touch(conn)

    def set_status(self, status: str, message: str = "") -> None:
        if status not in STATUSES:
            raise ValueError(f"unknown run status {status!r}; expected one of {', '.join(STATUSES)}")
        with self._db() as conn, _transaction(conn):
            conn.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)", [("status", status), ("message", message)]
            )
            self._touch(conn)

    def _touch(self, conn: sqlite3.Connection) -> None:
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('updated', ?)", (_now(),))

    def write_report(self, report: dict) -> None:
        # default=str: a stray Path or dtype in a result must not cost the user the whole report.
        atomic_write_text(self.report_path, json.dumps(report, indent=2, default=str) + "\n")

    # reading

    def _meta(self) -> dict[str, str]:
        with self._db() as conn:
            return dict(conn.execute("SELECT key, value FROM meta"))

    @property
    def status(self) -> str:
        return self._meta().get("status", "")

    @property
    def message(self) -> str:
        return self._meta().get("message", "")

    def read_report(self) -> dict | None:
        try:
            text = read_text_file(self.report_path, "Run report")
        except FileNotFoundError:
            return None
        try:
            report = json.loads(text)
        except ValueError as exc:
            raise JobError(f"Run report {self.report_path} is not valid JSON: {exc}") from exc
        if not isinstance(report, dict):
            raise JobError(f"Run report {self.report_path} is not a JSON object (it holds a {type(report).__name__}).")
        return report

    def read_spec(self) -> dict:
        """The run's spec.toml as data, with what a default that changed since meant when the run was made."""
        try:
            text = read_text_file(self.spec_path, "Run spec")
        except FileNotFoundError as exc:
            raise JobError(f"Run spec {self.spec_path} is missing.") from exc
        try:
            return upgrade_run_spec(tomllib.loads(text))
        except ValueError as exc:
            raise JobError(f"Run spec {self.spec_path} is not valid TOML: {exc}") from exc

    def read_metrics(
        self, name: str | None = None, since_rowid: int = 0
    ) -> dict[str, tuple[list[int], list[float]]]:
        """{name: (steps, values)} in step order; NaN and inf come back as floats."""
        with self._db() as conn:
            return self._select_metrics(conn, name, since_rowid)

    def read_metric_rows(self) -> list[tuple[int, str, float, float]]:
        """Every (step, name, value, wall time) row in the order it was written: a resumed run's redone steps come
        after the rows they replace (its `resume` events say from which step)."""
        with self._db() as conn:
            rows = conn.execute("SELECT step, name, value, time FROM metrics ORDER BY rowid").fetchall()
        return [(step, name, _real(value), t) for step, name, value, t in rows]

    @staticmethod
    def _select_metrics(conn: sqlite3.Connection, name: str | None, since_rowid: int) -> dict:
        if name is None:
            rows = conn.execute(
                "SELECT name, step, value FROM metrics WHERE rowid > ? ORDER BY name, step, rowid",
                (since_rowid,),
            )
        else:
            rows = conn.execute(
                "SELECT name, step, value FROM metrics WHERE name = ? AND rowid > ? ORDER BY step, rowid",
                (name, since_rowid),
            )
        out: dict[str, tuple[list[int], list[float]]] = {}
        for metric, step, value in rows:
            steps, values = out.setdefault(metric, ([], []))
            steps.append(step)
            values.append(_real(value))
        return out

    def last_metrics(self) -> dict[str, tuple[int, float]]:
        """{name: (step, value)} of the most recently logged row of each metric."""
        with self._db() as conn:
            rows = conn.execute(
                "SELECT name, step, value FROM metrics WHERE rowid IN (SELECT max(rowid) FROM metrics GROUP BY name)"
            ).fetchall()
        return {name: (step, _real(value)) for name, step, value in sorted(rows)}

    def events(self, type: str | None = None) -> list[dict]:
        query = "SELECT time, type, content FROM events"
        args: tuple = ()
        if type is not None:
            query, args = query + " WHERE type = ?", (type,)
        with self._db() as conn:
            rows = conn.execute(query + " ORDER BY rowid", args).fetchall()
        return [{"time": t, "type": kind, "content": json.loads(content)} for t, kind, content in rows]

    def summary(self) -> dict:
        """Everything `workbench runs show` prints; a broken spec or report is reported, not raised."""
        meta = self._meta()
        owner = run_owner(self.dir)
        status, message = effective_status(self.dir, meta.get("status", ""), meta.get("message", ""), self.task,
                                           owner)
        problems = []
        spec = report = None
        try:
            spec = self.read_spec()
        except JobError as exc:
            problems.append(str(exc))
        try:
            report = self.read_report()
        except (JobError, OSError) as exc:
            problems.append(str(exc))
        with self._db() as conn:
            event_count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        return {
            "id": self.id,
            "kind": self.kind,
            "task": self.task,
            "status": status,
            "message": message,
            "owner": owner,
            "created": meta.get("created"),
            "updated": meta.get("updated"),
            "run_dir": str(self.dir),
            "spec": spec,
            "report": report,
            "last_metrics": self.last_metrics(),
            "checkpoints": _list_files(self.checkpoints_dir),
            "artifacts": _list_files(self.artifacts_dir),
            "event_count": event_count,
            "problems": problems,
        }

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            if self._owner is not None:
                self._owner.release()  # after the database is closed: the next owner finds it quiet

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Run({str(self.dir)!r})"


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
            raise UsageError(f"run id {run_id!r}: use letters, digits, '.', '_' and '-' (up to 100), not starting "
                             "with '.' or '-'")
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
        return [p for p in self.runs_dir.iterdir()
                if p.is_dir() and not p.name.startswith(".") and (not p.is_symlink() or self._is_inside(p))]

    def list_runs(self) -> list[dict]:
        """Newest first; a run that cannot be read is listed with status "unreadable", never raised.

        Read-only: listing changes no file, and works on a read-only workspace.
        """
        entries = []
        for run_dir in self._run_dirs():
            try:
                with Run(run_dir, readonly=True) as run:
                    meta = run._meta()
                status, message = effective_status(run_dir, meta.get("status", ""), meta.get("message", ""),
                                                   meta.get("task"))
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
        """Open a run to read (the default: changes nothing but removing a killed job's half-written staging, see
        sweep_dead_staging) or, with readonly=False, to write after claim()."""
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
