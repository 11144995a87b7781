"""Export and benchmark runs as the Export & Benchmark tab holds them: the report (its contract in
workbench/specs/jobs.py's ExportSpec and BenchSpec) and, for a benchmark, each row's latency samples, filled
live from the job's `bench/<backend>/<batch>:samples` arrays or read back from a finished run. No Qt, no
torch."""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from workbench.errors import WorkbenchError
from workbench.results import BenchRow, ExportResult, dig

SAMPLES_PREFIX = "bench/"
SAMPLES_SUFFIX = ":samples"
SAMPLES_FILE = "samples.npz"
ROWS_KEY = "__rows__"  # in samples.npz: the rows as JSON text
RESULTS_ARRAY = "bench/results"  # the table so far, its rows (every status) in the array's metadata
RESULTS_FILE = "results.json"  # artifacts/results.json: the rows so far, kept by a cancelled job too
MEASURED = ("done", "ok")  # a row's status when it was measured (the worker's engine says "ok")
PERCENTILES = ("p50", "p90", "p99")
CSV_COLUMNS = (
    "backend",
    "batch_size",
    "device",
    "dtype",
    "status",
    "reason",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "mean_ms",
    "std_ms",
    "min_ms",
    "throughput_per_s",
    "peak_memory_bytes",
    "transfer_ms",
)


def measured(row: dict) -> bool:
    return row.get("status") in MEASURED


def finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_ms(value) -> str:
    """A latency for a table cell: three significant digits, never an exponent for the usual range."""
    if not finite_number(value):
        return "—"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def format_rate(value) -> str:
    if not finite_number(value):
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def format_bytes(value) -> str:
    if not finite_number(value):
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{int(value)} B"


def format_diff(value) -> str:
    return f"{value:.3g}" if finite_number(value) else "—"


def sample_stats(samples: np.ndarray, batch_size: int) -> dict:
    """The row numbers the worker reports, computed from a samples array (for rows still being measured)."""
    samples = np.asarray(samples, dtype=np.float64).ravel()
    samples = samples[np.isfinite(samples)]
    if not samples.size:
        return {"latency_ms": {}, "throughput_per_s": None}
    p50, p90, p99 = np.percentile(samples, [50, 90, 99])
    return {
        "latency_ms": {
            "p50": float(p50),
            "p90": float(p90),
            "p99": float(p99),
            "mean": float(samples.mean()),
            "std": float(samples.std()),
            "min": float(samples.min()),
        },
        # at the median, as the worker reports it: one slow iteration does not move it
        "throughput_per_s": batch_size * 1000.0 / float(p50) if p50 > 0 else None,
    }


def row_key(row: dict) -> str:
    return f"{row.get('backend', '')}/{row.get('batch_size', '')}"


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WorkbenchError(f"Cannot read {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise WorkbenchError(f"{path} is not a JSON object")
    return data


def _read_spec(run_dir: Path) -> dict:
    try:
        return tomllib.loads((run_dir / "spec.toml").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _failure(report: dict) -> str:
    error = report.get("error") or {}
    return error.get("message", "") if isinstance(error, dict) else str(error)


@dataclass
class ExportResults:
    """One export run, running or finished."""

    run_id: str = ""
    run_dir: str = ""
    spec: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    error: str = ""  # why it failed or stopped

    @property
    def format(self) -> str:
        return str(self.report.get("format") or self.spec.get("format") or "onnx")

    @property
    def source_run(self) -> str:
        return str(dig(self.spec, "source", "run", default=""))

    @property
    def result(self) -> ExportResult:
        """The report as the typed export result."""
        return ExportResult.from_dict(self.report)

    @property
    def parity(self) -> dict | None:
        parity = self.result.parity
        return parity.raw if parity is not None else None

    @classmethod
    def from_run(cls, run_dir: str | Path) -> ExportResults:
        run_dir = Path(run_dir)
        results = cls(run_id=run_dir.name, run_dir=str(run_dir), spec=_read_spec(run_dir))
        report_path = run_dir / "report.json"
        if report_path.is_file():
            results.report = _read_json(report_path)
            results.error = _failure(results.report)
        return results


@dataclass
class BenchResults:
    """One benchmark run: the rows it reported (or is measuring) and the latency samples behind them."""

    run_id: str = ""
    run_dir: str = ""
    spec: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    samples: dict[str, np.ndarray] = field(default_factory=dict)  # "<backend>/<batch>" -> ms per iteration
    live_rows: dict[str, dict] = field(default_factory=dict)  # rows measured so far, from the arrays
    error: str = ""

    # -- filling in ------------------------------------------------------------------------------------------
    def add_array(self, name: str, array: np.ndarray, meta: dict) -> str | None:
        """Keep what the job sent: a `bench/<backend>/<batch>:samples` array (its row in `meta["row"]`, else
        computed from the samples), or `bench/results` (every row so far in `meta["rows"]`, unavailable ones
        too). Returns the row key it changed ("" for the table), or None when the array is not one of ours."""
        if name == RESULTS_ARRAY:
            for row in meta.get("rows") or []:
                if isinstance(row, dict):
                    self.live_rows[row_key(row)] = {**self.live_rows.get(row_key(row), {}), **row}
            return ""
        if not name.startswith(SAMPLES_PREFIX) or not name.endswith(SAMPLES_SUFFIX):
            return None
        key = name[len(SAMPLES_PREFIX) : -len(SAMPLES_SUFFIX)]
        backend, _, batch = key.rpartition("/")
        given = meta.get("row") if isinstance(meta.get("row"), dict) else {}
        try:
            batch_size = int(given.get("batch_size", meta.get("batch_size", batch)))
        except (TypeError, ValueError):
            return None
        samples = np.asarray(array, dtype=np.float64).ravel()
        self.samples[key] = samples
        row = {
            "backend": meta.get("backend", backend),
            "batch_size": batch_size,
            "device": meta.get("device", self.spec.get("device", "")),
            "dtype": meta.get("dtype", self.spec.get("dtype", "float32")),
            "status": "done",
            "reason": "",
            "peak_memory_bytes": meta.get("peak_memory_bytes"),
            "transfer_ms": meta.get("transfer_ms"),
        }
        row.update(sample_stats(samples, batch_size))
        row.update(given)
        self.live_rows[key] = row
        return key

    # -- reading ---------------------------------------------------------------------------------------------
    @property
    def backends(self) -> list[str]:
        return [str(b) for b in (self.spec.get("backends") or ["eager"])]

    @property
    def batch_sizes(self) -> list[int]:
        return [int(b) for b in (self.spec.get("batch_sizes") or [1])]

    @property
    def reported_rows(self) -> list[dict]:
        rows = self.report.get("results")
        return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []

    def rows(self, *, pending: bool = False) -> list[dict]:
        """Every row: the report's when there is one, else those measured so far; with `pending`, the rows the
        spec plans that have not come yet too (status "pending"), in the order they will be measured."""
        if self.reported_rows:
            return self.reported_rows
        if not pending:
            return list(self.live_rows.values())
        rows = []
        for backend in self.backends:
            for batch in self.batch_sizes:
                key = f"{backend}/{batch}"
                rows.append(
                    self.live_rows.get(key)
                    or {
                        "backend": backend,
                        "batch_size": batch,
                        "device": self.spec.get("device", ""),
                        "dtype": self.spec.get("dtype", "float32"),
                        "status": "pending",
                        "reason": "Not measured yet",
                        "latency_ms": {},
                    }
                )
        rows += [row for key, row in self.live_rows.items() if row not in rows]
        return rows

    def done_rows(self) -> list[dict]:
        return [r for r in self.rows() if measured(r) and BenchRow.from_dict(r).p50]

    def samples_of(self, row: dict) -> np.ndarray | None:
        samples = self.samples.get(row_key(row))
        return samples if samples is not None and samples.size else None

    @property
    def label(self) -> str:
        return self.run_id or "this benchmark"

    def source_text(self) -> str:
        source = self.spec.get("source") or {}
        return str(
            source.get("run")
            or source.get("file")
            or self.spec.get("artifact")
            or dig(self.spec, "model", "name", default="")
        )

    # -- from disk and out again -----------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run_dir: str | Path) -> BenchResults:
        """A benchmark run read back: report.json, spec.toml and artifacts/samples.npz (when present)."""
        run_dir = Path(run_dir)
        results = cls(run_id=run_dir.name, run_dir=str(run_dir), spec=_read_spec(run_dir))
        report_path = run_dir / "report.json"
        if report_path.is_file():
            results.report = _read_json(report_path)
            results.error = _failure(results.report)
        path = run_dir / "artifacts" / SAMPLES_FILE
        rows_text = ""
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as data:
                    for name in data.files:
                        if name == ROWS_KEY:
                            rows_text = str(data[name])
                        elif not name.startswith("__"):
                            results.samples[name] = np.asarray(data[name], dtype=np.float64)
            except (OSError, ValueError, KeyError) as exc:
                raise WorkbenchError(
                    f"Cannot read the latency samples of run {run_dir.name} ({path}): {exc}"
                ) from exc
        if not results.reported_rows:  # a cancelled or failed job: the rows it finished, if it kept them
            results.live_rows = {
                row_key(r): r for r in _saved_rows(run_dir / "artifacts" / RESULTS_FILE, rows_text)
            }
        return results

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CSV_COLUMNS)
        for row in self.rows():
            latency = row.get("latency_ms") or {}
            writer.writerow(
                [
                    row.get("backend", ""),
                    row.get("batch_size", ""),
                    row.get("device", ""),
                    row.get("dtype", ""),
                    row.get("status", ""),
                    row.get("reason", "") or "",
                    *(_csv_number(latency.get(k)) for k in ("p50", "p90", "p99", "mean", "std", "min")),
                    _csv_number(row.get("throughput_per_s")),
                    _csv_number(row.get("peak_memory_bytes")),
                    _csv_number(row.get("transfer_ms")),
                ]
            )
        return out.getvalue()

    def json_data(self) -> dict:
        return {"run_id": self.run_id, "run_dir": self.run_dir, "spec": self.spec, "results": self.rows()}

    def save(self, path: str | Path) -> Path:
        """Write the rows as CSV (a .csv path) or JSON (anything else); raises WorkbenchError when it
        cannot."""
        path = Path(path)
        text = (
            self.csv_text()
            if path.suffix.lower() == ".csv"
            else json.dumps(self.json_data(), indent=2) + "\n"
        )
        try:
            path.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise WorkbenchError(f"Cannot write {path}: {exc.strerror or exc}") from exc
        return path


def _saved_rows(path: Path, rows_text: str) -> list[dict]:
    text = rows_text
    if not text and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data.get("results") if isinstance(data, dict) else data
            return [r for r in rows or [] if isinstance(r, dict)]
        except (OSError, ValueError, AttributeError):
            return []
    try:
        rows = json.loads(text) if text else []
    except ValueError:
        return []
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _csv_number(value) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return repr(float(value)) if finite_number(value) else ""
