"""Typed views of what each job returns (train, quantize, export, bench) and of a training run's
evaluation.json, read from the JSON dicts the worker writes. Reading never raises on a missing, None or old
key. No torch, no Qt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.task_ids import TaskId, canonical


def as_dict(value) -> dict:
    """`value` when it is a dict, else an empty one: a block an old or failed run never wrote."""
    return value if isinstance(value, dict) else {}


def as_list(value) -> list:
    return value if isinstance(value, list) else []


def number(value) -> int | float | None:
    """A number as written (NaN and inf kept: the readers say "not finite"), else None; a bool is no
    number."""
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def dig(data, *keys, default=None):
    """The value at a path of keys through nested dicts (a spec's ["source"]["run"]), or `default` where a
    step is missing or not a dict. For the dicts that are not job results: specs, messages, settings."""
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return default if data is None else data


# -- training ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Monitor:
    """A task's monitor metric: the result's `monitor` block, or evaluation.json's (which holds `value`)."""

    name: str = ""
    label: str = ""
    higher_is_better: bool | None = None
    best_val: int | float | None = None
    test: int | float | None = None
    value: int | float | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: dict | None) -> Monitor:
        d = as_dict(d)
        better = d.get("higher_is_better")
        return cls(
            name=str(d.get("name") or ""),
            label=str(d.get("label") or ""),
            higher_is_better=better if isinstance(better, bool) else None,
            best_val=number(d.get("best_val")),
            test=number(d.get("test")),
            value=number(d.get("value")),
            raw=d,
        )


@dataclass(frozen=True)
class TrainFinal:
    """The result's `final` block: the last epoch's losses, and the test split's accuracy (or other
    metrics)."""

    train_loss: int | float | None = None
    val_loss: int | float | None = None
    val_accuracy: int | float | None = None
    test_accuracy: int | float | None = None
    test_metrics: dict | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: dict | None) -> TrainFinal:
        d = as_dict(d)
        metrics = d.get("test_metrics")
        return cls(
            train_loss=number(d.get("train_loss")),
            val_loss=number(d.get("val_loss")),
            val_accuracy=number(d.get("val_accuracy")),
            test_accuracy=number(d.get("test_accuracy")),
            test_metrics=metrics if isinstance(metrics, dict) else None,
            raw=d,
        )


@dataclass(frozen=True)
class TrainResult:
    """A training job's result (`train.model`; runs recorded as `train.classifier` hold the same)."""

    raw: dict = field(default_factory=dict, repr=False)
    # the learning task (classification, segmentation, ...); "" for a run from before it was kept
    task: str = ""
    epochs_completed: int | None = None
    final: TrainFinal = field(default_factory=TrainFinal)
    monitor: Monitor = field(default_factory=Monitor)
    best_val_accuracy: int | float | None = None
    best_epoch: int | None = None
    checkpoint: str = ""
    best_checkpoint: str = ""
    evaluation: str = ""  # evaluation.json's path
    device: str = ""

    @classmethod
    def from_dict(cls, d: dict | None) -> TrainResult:
        d = as_dict(d)
        return cls(
            raw=d,
            task=str(d.get("task") or ""),
            epochs_completed=_int(d.get("epochs_completed")),
            final=TrainFinal.from_dict(d.get("final")),
            monitor=Monitor.from_dict(d.get("monitor")),
            best_val_accuracy=number(d.get("best_val_accuracy")),
            best_epoch=_int(d.get("best_epoch")),
            checkpoint=str(d.get("checkpoint") or ""),
            best_checkpoint=str(d.get("best_checkpoint") or ""),
            evaluation=str(d.get("evaluation") or ""),
            device=str(d.get("device") or ""),
        )


@dataclass(frozen=True)
class Evaluation:
    """A training run's evaluation.json (the test split measured at the end): its monitor, metrics,
    classes."""

    raw: dict = field(default_factory=dict, repr=False)
    monitor: Monitor = field(default_factory=Monitor)
    metrics: dict = field(default_factory=dict)
    classes: list = field(default_factory=list)
    split: str = ""

    @classmethod
    def from_dict(cls, d: dict | None) -> Evaluation:
        d = as_dict(d)
        return cls(
            raw=d,
            monitor=Monitor.from_dict(d.get("monitor")),
            metrics=as_dict(d.get("metrics")),
            classes=as_list(d.get("classes")),
            split=str(d.get("split") or ""),
        )


# -- quantize ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantMeasure:
    """One end of the ladder (`fp32` or `quantized`): its "accuracy" (the run's monitor where `metric` names
    one)."""

    accuracy: int | float | None = None
    loss: int | float | None = None
    logit_sqnr_db: int | float | None = None
    metrics: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: dict | None) -> QuantMeasure:
        d = as_dict(d)
        return cls(
            accuracy=number(d.get("accuracy")),
            loss=number(d.get("loss")),
            logit_sqnr_db=number(d.get("logit_sqnr_db")),
            metrics=as_dict(d.get("metrics")),
            raw=d,
        )


@dataclass(frozen=True)
class Rung:
    """One rung of the quantize ladder: its step name and what it measured."""

    step: str = ""
    accuracy: int | float | None = None
    loss: int | float | None = None
    raw: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_dict(cls, d: dict | None) -> Rung:
        d = as_dict(d)
        return cls(
            step=str(d.get("step") or ""),
            accuracy=number(d.get("accuracy")),
            loss=number(d.get("loss")),
            raw=d,
        )


@dataclass(frozen=True)
class QuantResult:
    """A quantize job's result (`quant.analyze`)."""

    raw: dict = field(default_factory=dict, repr=False)
    fp32: QuantMeasure = field(default_factory=QuantMeasure)
    quantized: QuantMeasure = field(default_factory=QuantMeasure)
    steps: list[Rung] = field(default_factory=list)
    layers: list[dict] = field(default_factory=list)
    # {name, label, higher_is_better, split}; None: accuracy (classification, old runs)
    metric: dict | None = None
    held_out: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict | None) -> QuantResult:
        d = as_dict(d)
        metric = d.get("metric")
        return cls(
            raw=d,
            fp32=QuantMeasure.from_dict(d.get("fp32")),
            quantized=QuantMeasure.from_dict(d.get("quantized")),
            steps=[Rung.from_dict(s) for s in as_list(d.get("steps")) if isinstance(s, dict)],
            layers=[e for e in as_list(d.get("layers")) if isinstance(e, dict)],
            metric=metric if isinstance(metric, dict) else None,
            held_out=as_dict(d.get("held_out")),
            source=as_dict(d.get("source")),
        )

    @property
    def metric_name(self) -> str:
        return str(as_dict(self.metric).get("name") or "")

    @property
    def held_out_split(self) -> str:
        """The split the ladder measured ("test", "validation"), without its sample count."""
        return str(self.held_out.get("split") or "").split(" ")[0]


# -- export --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Parity:
    """An export's parity check against eager PyTorch."""

    raw: dict = field(default_factory=dict, repr=False)
    passed: bool | None = None
    skipped: bool = False
    reason: str = ""
    max_abs_diff: int | float | None = None
    first_divergent_layer: str = ""

    @classmethod
    def from_dict(cls, d: dict | None) -> Parity:
        d = as_dict(d)
        passed = d.get("passed")
        return cls(
            raw=d,
            passed=bool(passed) if passed is not None else None,
            skipped=bool(d.get("skipped")),
            reason=str(d.get("reason") or ""),
            max_abs_diff=number(d.get("max_abs_diff")),
            first_divergent_layer=str(d.get("first_divergent_layer") or ""),
        )

    @property
    def checked(self) -> bool:
        return self.passed is not None and not self.skipped


@dataclass(frozen=True)
class ExportResult:
    """An export job's result (`export.model`)."""

    raw: dict = field(default_factory=dict, repr=False)
    artifact: str = ""
    format: str = ""
    size_bytes: int | None = None
    parity: Parity | None = None  # None: the job wrote no parity block (failed, or from before the check)
    accuracy: dict | None = None  # an int8 export's accuracy in onnxruntime beside the simulated one
    source: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict | None) -> ExportResult:
        d = as_dict(d)
        parity, accuracy = d.get("parity"), d.get("accuracy")
        return cls(
            raw=d,
            artifact=str(d.get("artifact") or ""),
            format=str(d.get("format") or ""),
            size_bytes=_int(d.get("size_bytes")),
            parity=Parity.from_dict(parity) if isinstance(parity, dict) else None,
            accuracy=accuracy if isinstance(accuracy, dict) else None,
            source=as_dict(d.get("source")),
        )


# -- bench ---------------------------------------------------------------------------------------------------

MEASURED = ("done", "ok")  # a row's status when it was measured (the worker's engine says "ok")


@dataclass(frozen=True)
class BenchRow:
    """One backend at one batch size. `latency_ms` holds p50, p90, p99, mean, std and min where measured."""

    raw: dict = field(default_factory=dict, repr=False)
    backend: str = ""
    batch_size: int | None = None
    status: str = ""
    reason: str = ""
    latency_ms: dict = field(default_factory=dict)
    throughput_per_s: int | float | None = None

    @classmethod
    def from_dict(cls, d: dict | None) -> BenchRow:
        d = as_dict(d)
        return cls(
            raw=d,
            backend=str(d.get("backend") or ""),
            batch_size=_int(d.get("batch_size")),
            status=str(d.get("status") or ""),
            reason=str(d.get("reason") or ""),
            latency_ms=as_dict(d.get("latency_ms")),
            throughput_per_s=number(d.get("throughput_per_s")),
        )

    def latency(self, key: str) -> int | float | None:
        """One latency statistic in ms ("p50", "mean", ...), or None where the row has none."""
        return number(self.latency_ms.get(key))

    @property
    def p50(self) -> int | float | None:
        return self.latency("p50")

    @property
    def measured(self) -> bool:
        return self.status in MEASURED


@dataclass(frozen=True)
class BenchResult:
    """A benchmark job's result (`bench.latency`)."""

    raw: dict = field(default_factory=dict, repr=False)
    rows: list[BenchRow] = field(default_factory=list)
    model: str = ""
    device: str = ""
    source: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict | None) -> BenchResult:
        d = as_dict(d)
        return cls(
            raw=d,
            rows=[BenchRow.from_dict(r) for r in as_list(d.get("results")) if isinstance(r, dict)],
            model=str(d.get("model") or ""),
            device=str(d.get("device") or ""),
            source=as_dict(d.get("source")),
        )


RESULT_TYPES = {
    TaskId.TRAIN: TrainResult,
    TaskId.QUANT: QuantResult,
    TaskId.EXPORT: ExportResult,
    TaskId.BENCH: BenchResult,
}


def result_of(task_id: str, d: dict | None):
    """The typed result of a run of `task_id` (the old training id too), or None for a task without one."""
    task = canonical(task_id)
    kind = RESULT_TYPES.get(task) if task is not None else None
    return kind.from_dict(d) if kind is not None else None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
