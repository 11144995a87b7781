"""Gather a model's life from the workspace: its training run, the quantize runs made from it, the exports of
either and the benchmarks of any of them.

Read-only: every run is opened with `readonly=True`, so building a report changes no run (not even a
database's -wal file). A run that cannot be read is kept with its problem named, never raised: one damaged
benchmark must not cost the user the whole report.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from workbench.errors import JobError, UsageError
from workbench.results import ExportResult, as_dict
from workbench.runs import Run, RunStore, read_text_file
from workbench.task_ids import BENCH_TASK, EXPORT_TASK, QUANT_TASK, is_training

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

QUANTIZE, EXPORT, BENCH = QUANT_TASK, EXPORT_TASK, BENCH_TASK
_MAX_HOPS = 4  # quantize -> export -> bench is three; a longer chain is a loop


@dataclass
class RunRecord:
    """One run as the report shows it: what ran (spec and its text), how it ended and what it said."""

    id: str
    dir: Path
    task: str
    status: str
    message: str = ""
    created: str | None = None
    spec: dict = field(default_factory=dict)
    spec_text: str = ""
    report: dict | None = None
    source_id: str | None = None  # the run it was made from, as a run id
    problems: list[str] = field(default_factory=list)
    report_read: bool = field(default=False, repr=False)

    @property
    def done(self) -> bool:
        return self.status == "done" and isinstance(self.report, dict)


@dataclass
class ModelStory:
    """Everything one report shows, in the order things happened (oldest first within each step)."""

    workspace: Path
    train: RunRecord
    metrics: dict[str, tuple[list[int], list[float]]]
    quantize: list[RunRecord] = field(default_factory=list)
    export: list[RunRecord] = field(default_factory=list)
    bench: list[RunRecord] = field(default_factory=list)
    requested: str = ""  # the run the user named, when it was not the training run itself
    notes: list[str] = field(default_factory=list)

    def by_id(self) -> dict[str, RunRecord]:
        return {r.id: r for r in [self.train, *self.quantize, *self.export, *self.bench]}

    def summary(self) -> dict:
        """The runs the report covers, by step (for `workbench report --json`)."""
        return {
            "train": self.train.id,
            "quantize": [r.id for r in self.quantize],
            "export": [r.id for r in self.export],
            "bench": [r.id for r in self.bench],
        }


def _created_key(record: RunRecord) -> tuple[float, str]:
    try:
        stamp = datetime.fromisoformat(record.created).timestamp() if record.created else 0.0
    except ValueError:
        stamp = 0.0
    return stamp, record.id


def _spec_from_file(run_dir: Path) -> tuple[dict, str]:
    text = read_text_file(run_dir / "spec.toml", "Run spec")
    try:
        return tomllib.loads(text), text
    except ValueError as exc:
        raise JobError(f"Run spec {run_dir / 'spec.toml'} is not valid TOML: {exc}") from exc


class _Resolver:
    """The run id a `source.run` names (an id, a prefix or a folder), or None; each reference resolved once. A
    folder that is gone (a workspace that was copied or moved) still names its run by its last part: run ids
    are unique."""

    def __init__(self, store: RunStore):
        self.store = store
        self._cache: dict[str, str | None] = {}

    def __call__(self, ref: object) -> str | None:
        if not isinstance(ref, str) or not ref.strip():
            return None
        ref = ref.strip()
        if ref not in self._cache:
            try:
                self._cache[ref] = self.store.resolve(ref).name
            except (UsageError, OSError):
                self._cache[ref] = (Path(ref).name or None) if ("/" in ref or os.sep in ref) else None
        return self._cache[ref]


def _source_ref(spec: dict, report: dict | None) -> object:
    # The report's source.run is the folder the job resolved when it ran: exact even if a prefix in the
    # spec has since become ambiguous. The spec's is what the user wrote.
    for holder in (report, spec):
        source = holder.get("source") if isinstance(holder, dict) else None
        if isinstance(source, dict) and isinstance(source.get("run"), str) and source["run"].strip():
            return source["run"]
    return None


def _file_refs(spec: dict) -> list[str]:
    """Files a bench (or export) spec measures: source.file and artifact."""
    refs = []
    source = spec.get("source")
    if isinstance(source, dict) and isinstance(source.get("file"), str) and source["file"].strip():
        refs.append(source["file"].strip())
    if isinstance(spec.get("artifact"), str) and spec["artifact"].strip():
        refs.append(spec["artifact"].strip())
    return refs


def _record(entry: dict, *, full: bool) -> RunRecord:
    """A run from its list_runs entry; with `full`, also its report (the spec is always read)."""
    run_dir = Path(entry["run_dir"])
    record = RunRecord(
        id=entry["id"],
        dir=run_dir,
        task=entry.get("task") or "",
        status=entry.get("status") or "",
        message=entry.get("message") or "",
        created=entry.get("created"),
    )
    try:
        record.spec, record.spec_text = _spec_from_file(run_dir)
    except FileNotFoundError:
        record.problems.append(f"Run spec {run_dir / 'spec.toml'} is missing.")
    except JobError as exc:
        record.problems.append(str(exc))
    if full:
        _read_report(record)
    return record


def _read_report(record: RunRecord) -> None:
    if record.report_read:
        return
    record.report_read = True
    try:
        with Run(record.dir, readonly=True) as run:
            record.report = run.read_report()
    except (JobError, OSError, sqlite3.Error) as exc:
        record.problems.append(str(exc))


def _find_training_run(resolve: _Resolver, entries: dict[str, dict], start: str) -> str:
    """The training run behind `start`: itself, or the run its source.run chain leads to."""
    current = start
    seen = []
    for _ in range(_MAX_HOPS + 1):
        entry = entries.get(current)
        if is_training(as_dict(entry).get("task")):  # train.model, or train.classifier on an older run
            return current
        seen.append(current)
        if entry is None:
            break
        try:
            spec, _ = _spec_from_file(Path(entry["run_dir"]))
        except (JobError, OSError):
            break
        report = None
        try:
            with Run(entry["run_dir"], readonly=True) as run:
                report = run.read_report()
        except (JobError, OSError, sqlite3.Error):
            pass
        parent = resolve(_source_ref(spec, report))
        if parent is None or parent in seen:
            break
        current = parent
    first = entries.get(start) or {}
    what = f"a {first['task']} run" if first.get("task") else "not a training run"
    raise UsageError(
        f"Run {start} is {what}, and no training run is behind it: `workbench report` takes a "
        "training run (its id, a unique id prefix or its folder)."
    )


def collect(workspace: str | Path, run_ref: str) -> ModelStory:
    """The model story of the training run `run_ref` names (or of the training run behind a quantize, export
    or bench run). UsageError (exit code 2) when no such run exists or none is behind it."""
    store = RunStore(workspace)
    run_dir = store.resolve(run_ref)
    if run_dir.parent.name == "runs" and run_dir.parent.resolve() != store.runs_dir.resolve():
        # A run folder of another workspace: its quantize, export and bench runs live beside it, in that one.
        store = RunStore(run_dir.parent.parent)
    entries = {e["id"]: e for e in store.list_runs()}
    named = run_dir.name
    if named not in entries:
        # A run folder outside this workspace: read it where it is; its descendants are looked for here.
        try:
            with Run(run_dir, readonly=True) as run:
                entries[named] = {
                    "id": named,
                    "task": run.task,
                    "status": run.status,
                    "created": None,
                    "run_dir": str(run_dir),
                    "message": run.message,
                }
        except (JobError, OSError, sqlite3.Error) as exc:
            raise UsageError(f"{run_dir} cannot be read as a run: {exc}") from None
    resolve = _Resolver(store)
    train_id = _find_training_run(resolve, entries, named)
    train = _record(entries[train_id], full=True)
    metrics: dict = {}
    try:
        with Run(train.dir, readonly=True) as run:
            metrics = run.read_metrics()
    except (JobError, OSError, sqlite3.Error) as exc:
        train.problems.append(str(exc))
    story = ModelStory(
        workspace=store.workspace, train=train, metrics=metrics, requested=named if named != train_id else ""
    )

    # Only the specs of the steps that can descend from a model are read, each once.
    candidates: dict[str, list[RunRecord]] = {QUANTIZE: [], EXPORT: [], BENCH: []}
    for entry in entries.values():
        if entry.get("task") in candidates and entry["id"] != train_id:
            record = _record(entry, full=False)
            candidates[entry["task"]].append(record)

    def sourced_from(records: list[RunRecord], parents: set[str]) -> list[RunRecord]:
        picked = []
        for record in records:
            ref = _source_ref(record.spec, None)
            source = resolve(ref)
            if ref is not None and source is None:
                # The spec's prefix has become ambiguous: the report names the folder the job really used.
                _read_report(record)
                source = resolve(_source_ref({}, record.report))
            if source in parents:
                record.source_id = source
                _read_report(record)
                picked.append(record)
        return sorted(picked, key=_created_key)

    story.quantize = sourced_from(candidates[QUANTIZE], {train_id})
    story.export = sourced_from(candidates[EXPORT], {train_id, *(r.id for r in story.quantize)})
    lineage = {train_id, *(r.id for r in story.quantize), *(r.id for r in story.export)}
    bench = sourced_from(candidates[BENCH], lineage)
    # A benchmark of an exported file (source.file or artifact inside an export run's folder) belongs too.
    export_ids = {r.id for r in story.export}
    artifacts = {}
    for record in story.export:
        artifact = ExportResult.from_dict(record.report).artifact
        if artifact:
            artifacts[artifact] = record.id
    picked = {r.id for r in bench}
    for record in candidates[BENCH]:
        if record.id in picked:
            continue
        for ref in _file_refs(record.spec):
            owner = artifacts.get(ref) or next((part for part in Path(ref).parts if part in export_ids), None)
            if owner:
                record.source_id = owner
                _read_report(record)
                bench.append(record)
                break
    story.bench = sorted(bench, key=_created_key)
    return story
