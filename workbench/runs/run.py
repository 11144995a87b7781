"""One run directory (spec.toml, metrics.db, checkpoints/, artifacts/, report.json) and how a run that its
owner could not finish is marked ended. No torch, no Qt.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path

from workbench.errors import JobError
from workbench.runs.atomic import atomic_write_text
from workbench.runs.layout import DB_NAME, INTERRUPTED, LIVE_STATUSES, SCHEMA_VERSION, STATUSES, _now
from workbench.runs.ownership import RunOwner, _remove_leftovers, _staging_leftovers, run_owner

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


# --- runs ----------------------------------------------------------------------------------------


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
        raise JobError(
            f"{what} {path} is a folder, not a file; move it away and the run reads again."
        ) from None
    except UnicodeDecodeError as exc:
        raise JobError(f"{what} {path} is not UTF-8 text (byte {exc.start}): the file is damaged.") from None
    except OSError as exc:
        raise JobError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def upgrade_run_spec(data: dict) -> dict:
    """A stored run spec as it was meant when written: a run's spec.toml holds every field, so one missing is
    a field added since, whose default may have changed what the run did. dataset.stratify: splits by class
    came with it; a run made before it was split plainly, and its resume, quantization or export must see the
    same splits (a test split of other samples would hold samples it trained on)."""
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


def interrupted_message(run_id: str, task: str | None) -> str:
    resume = (
        f" Resume it with `workbench train --resume {run_id}`." if task and task.startswith("train") else ""
    )
    return (
        "The process running it ended without finishing (it was killed, crashed or the machine stopped); "
        f"metrics and checkpoints up to then are kept.{resume}"
    )


_PROBE = object()


def effective_status(
    run_dir: str | Path, status: str, message: str, task: str | None, owner: dict | None | object = _PROBE
) -> tuple[str, str]:
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


def force_end_own_run(
    run_dir: str | Path, status: str, message: str, *, error_type: str = "JobCancelled"
) -> bool:
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

    def __init__(
        self,
        run_dir: str | Path,
        *,
        readonly: bool = False,
        owner: RunOwner | None = None,
        timeout: float = 10.0,
    ):
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
            return sqlite3.connect(
                f"{self._db_path.as_uri()}?{query}",
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                timeout=self._timeout,
            )

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
                f"Run database {self._db_path} is not a run database (missing tables: "
                f"{', '.join(sorted(missing))})."
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
            raise JobError(
                f"Run report {self.report_path} is not a JSON object (it holds a {type(report).__name__})."
            )
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
        """Every (step, name, value, wall time) row in the order it was written: a resumed run's redone steps
        come after the rows they replace (its `resume` events say from which step)."""
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
                "SELECT name, step, value FROM metrics WHERE rowid IN (SELECT max(rowid) FROM metrics GROUP "
                "BY name)"
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
        status, message = effective_status(
            self.dir, meta.get("status", ""), meta.get("message", ""), self.task, owner
        )
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
