"""One quantize run's results as the Quantization tab holds them: the report (its contract in
workbench/specs/jobs.py's QuantSpec) and the arrays, filled live from the job's messages or read back from a
finished run. No Qt, no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

from workbench.errors import WorkbenchError
from workbench.results import QuantResult, dig

ARRAY_PREFIX = "quant/"
HISTOGRAMS_FILE = "histograms.npz"
META_KEY = "__meta__"


@dataclass
class TensorArrays:
    """What the plots draw for one quantizer (`layer`'s weight or its output activation)."""

    layer: str
    tensor: str  # "weight" or "activation"
    counts: np.ndarray  # (bins,) int64
    edges: np.ndarray  # (bins + 1,) float64, uniform
    # (E, 5): lo, hi, sqnr_db, clipping_mse, rounding_mse per estimator; row 0 is the one in use
    ranges: np.ndarray
    estimators: list[str]  # E names: "chosen", then "minmax", "mse", "percentile", "cross_entropy", "bn", ...
    error: np.ndarray | None = None  # (2, bins): summed squared clipping error, summed squared rounding error
    # (E, C, 2) per-channel lo, hi per estimator (per-channel weights)
    channel_ranges: np.ndarray | None = None
    cle_ranges: np.ndarray | None = None  # (2, C, 2) per-channel min, max before and after CLE
    chosen: str = ""  # the range method in use ("mse", ...)
    sampled: bool = False  # activations are a sample of the calibration set's values
    values: int = 0  # how many values the histogram counts
    # the weights' rounding in use ("adaround": learned, so its SQNR is not nearest's)
    rounding: str = "nearest"


def bit_widths(spec: dict) -> str:
    """A quantize spec's bit widths: "W8A8", or for a mixed-precision run every width its layers use, e.g.
    "W2/8 mixed A8" ("" when the spec names none)."""
    weights, activations = spec.get("weights") or {}, spec.get("activations") or {}
    if not weights.get("bits") or not activations.get("bits"):
        return ""
    layers = [
        int(item["bits"])
        for item in dig(spec, "mixed_precision", "layers", default=[])
        if isinstance(item, dict) and isinstance(item.get("bits"), int)
    ]
    w = sorted({int(weights["bits"]), *layers})
    a = sorted({int(activations["bits"]), *layers})
    mixed = " mixed " if len(w) > 1 or len(a) > 1 else ""
    return f"W{'/'.join(map(str, w))}{mixed}A{'/'.join(map(str, a))}"


@dataclass
class QuantResults:
    """A quantize run, complete or filling in. `report` follows the QuantSpec report contract; arrays are kept
    under their names without the "quant/" prefix, with the metadata they came with."""

    run_id: str = ""
    run_dir: str = ""
    spec: dict = field(default_factory=dict)
    report: dict = field(default_factory=dict)
    arrays: dict[str, tuple[np.ndarray, dict]] = field(default_factory=dict)
    ladder: list[dict] = field(default_factory=list)  # {step, accuracy, loss}, rung by rung
    planned: list[str] = field(default_factory=list)  # the rungs the job will make
    # What "accuracy" holds for a task other than classification, {name, label, higher_is_better}, from the
    # live ladder's metadata until the report brings its own; None: accuracy.
    live_metric: dict | None = None
    notes: list[str] = field(default_factory=list)  # what the ladder says under its title (module-level, ...)

    # -- filling in ------------------------------------------------------------------------------------------
    def add_array(self, name: str, array: np.ndarray, meta: dict) -> bool:
        """Keep an array the job sent (names start "quant/"); True when it was one of ours."""
        if not name.startswith(ARRAY_PREFIX):
            return False
        name = name[len(ARRAY_PREFIX) :]
        if name == "ladder":
            steps = list(meta.get("steps") or [])
            self.ladder = [
                {"step": step, "accuracy": float(row[0]), "loss": float(row[1])}
                for step, row in zip(steps, np.asarray(array).reshape(-1, 2))
            ]
            self.planned = list(meta.get("planned") or self.planned)
            if isinstance(meta.get("metric"), dict):
                self.live_metric = dict(meta["metric"])
            self.notes = [str(n) for n in meta.get("notes") or []]
            return True
        self.arrays[name] = (np.asarray(array), dict(meta))
        return True

    def set_report(self, report: dict) -> None:
        self.report = dict(report)
        if report.get("steps"):
            self.ladder = list(report["steps"])
            self.planned = self.planned or [s["step"] for s in self.ladder]
        if isinstance(report.get("module_level"), dict) and not self.notes:
            self.notes = ["module-level: functional ops stay float"]

    # -- reading ---------------------------------------------------------------------------------------------
    @property
    def result(self) -> QuantResult:
        """The report as the typed quantize result."""
        return QuantResult.from_dict(self.report)

    @property
    def layers(self) -> list[dict]:
        return list(self.report.get("layers") or [])

    def layer(self, name: str, tensor: str) -> dict | None:
        return next((e for e in self.layers if e.get("name") == name and e.get("tensor") == tensor), None)

    def tensor(self, layer: str, tensor: str) -> TensorArrays | None:
        """The arrays of one quantizer, or None while they have not come (they come after the ladder)."""
        key = f"{layer}:{tensor}"
        parts = {
            part: self.arrays.get(f"{key}:{part}")
            for part in ("counts", "edges", "ranges", "error", "channel_ranges", "cle_ranges")
        }
        if parts["counts"] is None or parts["edges"] is None or parts["ranges"] is None:
            return None
        ranges, meta = parts["ranges"]
        return TensorArrays(
            layer=layer,
            tensor=tensor,
            counts=parts["counts"][0],
            edges=parts["edges"][0],
            ranges=ranges,
            estimators=list(meta.get("estimators") or [f"range {i}" for i in range(len(ranges))]),
            error=parts["error"][0] if parts["error"] else None,
            channel_ranges=parts["channel_ranges"][0] if parts["channel_ranges"] else None,
            cle_ranges=parts["cle_ranges"][0] if parts["cle_ranges"] else None,
            chosen=str(meta.get("chosen", "")),
            sampled=bool(meta.get("sampled", False)),
            values=int(meta.get("values", 0)),
            rounding=str(meta.get("rounding") or "nearest"),
        )

    @property
    def metric(self) -> dict | None:
        """The report's metric block (a task's monitor: what every "accuracy" of this run holds), or None for
        accuracy (classification, and every run from before it)."""
        result = self.result
        metric = result.metric
        if metric is None:
            return self.live_metric
        split = result.held_out_split
        label = str(metric.get("label") or "")
        if "split" not in metric and split and label.startswith("val "):
            # Written before the label named the split measured: every split was called "val".
            return {**metric, "label": f"{split} {label[4:]}", "split": split}
        return metric

    @property
    def fp32_accuracy(self) -> float | None:
        accuracy = self.result.fp32.accuracy
        if accuracy is not None:
            return float(accuracy)
        first = next((s for s in self.ladder if s.get("step") == "fp32"), None)
        return float(first["accuracy"]) if first else None

    @property
    def label(self) -> str:
        scheme = bit_widths(self.spec)
        return f"{scheme} {self.run_id}".strip()

    # -- from disk -------------------------------------------------------------------------------------------
    @classmethod
    def from_run(cls, run_dir: str | Path) -> QuantResults:
        """A finished quantize run read back: report.json, spec.toml and artifacts/histograms.npz. Raises
        WorkbenchError naming the file when the run holds no quantization result."""
        run_dir = Path(run_dir)
        report_path = run_dir / "report.json"
        try:
            report = json.loads(report_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise WorkbenchError(f"Cannot read {report_path}: {exc}") from exc
        if not isinstance(report, dict):
            raise WorkbenchError(f"{report_path} is not a JSON object")
        if "layers" not in report:
            error = report.get("error") or {}
            why = f": {error.get('message')}" if isinstance(error, dict) and error.get("message") else ""
            raise WorkbenchError(
                f"Run {run_dir.name} holds no quantization result ({report.get('status', 'unfinished')}{why})"
            )
        results = cls(run_id=run_dir.name, run_dir=str(run_dir))
        try:
            results.spec = tomllib.loads((run_dir / "spec.toml").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass  # the spec only labels the run (W4A8); the report is what is drawn
        results.set_report(report)
        path = run_dir / "artifacts" / HISTOGRAMS_FILE
        if path.is_file():
            try:
                with np.load(path, allow_pickle=False) as data:
                    meta = json.loads(str(data[META_KEY])) if META_KEY in data.files else {}
                    for name in data.files:
                        if name != META_KEY:
                            results.arrays[name] = (data[name], meta.get(name, {}))
            except (OSError, ValueError, KeyError) as exc:
                raise WorkbenchError(
                    f"Cannot read the histograms of run {run_dir.name} ({path}): {exc}"
                ) from exc
        return results
