"""How a run is named wherever a person picks or reads one: "resnet18 · fake · 94.4 % · 27 Nov 06:24", the id
in its tooltip, from the run's spec and report (a quantize or export run takes its model and data from its
source run).

No Qt: the Runs tab, the Graph tab's "Build from" and the quantize, export and bench wizards all label runs
here.
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass
from datetime import datetime

from workbench.errors import WorkbenchError
from workbench.results import QuantResult, TrainResult, as_dict, dig
from workbench.task_ids import with_aliases

# Runs a wizard or "Build from" can start from: a failed or unreadable run has no model worth picking.
UNUSABLE = ("failed", "unreadable")
# Monitors that are fractions of 1, written as percentages.
_PERCENT = {"acc", "accuracy", "top5", "map", "miou", "iou", "dice", "f1"}


def short_model(name: str) -> str:
    """A model's or dataset's short name: torchvision:resnet18 -> resnet18, file:/long/path/net.py:Net -> Net,
    lightning:/long/path/model.py:DigitsData -> DigitsData, timm:resnet18 -> resnet18, hf:/long/path/bert-tiny
    (or the hub id org/bert-tiny) -> bert-tiny, others as they are."""
    if name.startswith(("torchvision:", "timm:")):
        return name.split(":")[-1]
    if name.startswith("hf:"):
        return name[len("hf:") :].rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or "hf"
    for kind in ("file", "lightning"):
        if name.startswith(f"{kind}:"):
            return name.rsplit(":", 1)[-1] or kind
    return name


def format_metric(name: str, value) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        return ""
    if name.lower() in _PERCENT:
        return f"{value:.1%}".replace("%", " %")
    return f"{name} {value:.4g}"


def format_date(created: str | None) -> str:
    try:
        when = datetime.fromisoformat(created or "")
    except ValueError:
        return ""
    # The year only when it is not this one: labels stay short for the runs of the last months.
    return when.strftime("%d %b %H:%M" if when.year == datetime.now().year else "%d %b %Y")


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    task: str = ""
    status: str = ""
    model: str = ""  # the short name
    model_full: str = ""
    dataset: str = ""  # the short name
    dataset_full: str = ""
    metric: str = ""  # the key metric as written ("94.4 %", "W8A8 93.9 %", "mae 0.41")
    metric_about: str = ""  # what the key metric is ("test accuracy")
    date: str = ""
    learns: str = ""  # a training run's task as a person says it (segmentation, lightning); "" for other runs

    @property
    def label(self) -> str:
        parts = [p for p in (self.model, self.dataset, self.metric, self.date) if p]
        return " · ".join(parts) if parts else self.run_id

    @property
    def tooltip(self) -> str:
        lines = [self.run_id, f"{self.task} · {self.status}".strip(" ·")]
        if self.model_full:
            lines.append(f"model {self.model_full}")
        if self.dataset_full and self.dataset_full != self.dataset:
            lines.append(f"dataset {self.dataset_full}")
        if self.metric and self.metric_about:
            lines.append(f"{self.metric_about}: {self.metric}")
        return "\n".join(line for line in lines if line)

    @property
    def usable_source(self) -> bool:
        return self.status not in UNUSABLE


def named_metric(name: str, value, label: str = "") -> str:
    """format_metric with the metric's name in front of a percentage too ("acc 90.7 %", "mIoU 81.2 %"), so a
    label read alone (a source picker's entry) says what the number is."""
    text = format_metric(name, value)
    if not text or name.lower() not in _PERCENT:
        return text
    short = (
        "acc"
        if name.lower() in ("acc", "accuracy")
        else label.split(" ", 1)[-1]
        if label.startswith(("val ", "test "))
        else label or name
    )
    return f"{short} {text}"


def _train_metric(report: dict, last: dict | None) -> tuple[str, str]:
    result = TrainResult.from_dict(report)
    name, label = result.monitor.name or "acc", result.monitor.label or "accuracy"
    for value, about in (
        (result.monitor.test, f"test {label}"),
        (result.monitor.best_val, f"best validation {label}"),
    ):
        text = named_metric(name, value, label)
        if text:
            return text, about
    text = named_metric("acc", result.final.test_accuracy)
    if text:
        return text, "test accuracy"
    # No report yet (running, stopped): the last validation value it logged.
    point = as_dict(last).get(f"val/{name}")
    text = named_metric(name, point[1], label) if point else ""
    return (text, f"last validation {label}") if text else ("", "")


def identify(
    entry: dict,
    spec: dict | None,
    report: dict | None,
    *,
    last: dict | None = None,
    source: RunIdentity | None = None,
) -> RunIdentity:
    """A run's identity from what the store gave: its list entry, spec, report, last metrics, and for a run
    made from another run (quantize, export, bench) that run's identity."""
    spec, report = spec or {}, report or {}
    task = entry.get("task") or ""
    model_full, dataset = dig(spec, "model", "name", default=""), dig(spec, "dataset", "name", default="")
    metric = about = ""
    if task.startswith("train."):
        metric, about = _train_metric(report, last)
    elif task == "quant.analyze":
        weights, activations = spec.get("weights") or {}, spec.get("activations") or {}
        scheme = (
            f"W{weights.get('bits', '?')}A{activations.get('bits', '?')}" if weights or activations else ""
        )
        # "accuracy" holds the run's monitor where its report names one (val MAE, mIoU): written as that
        # metric.
        quant = QuantResult.from_dict(report)
        measure = as_dict(quant.metric)
        value = named_metric(
            quant.metric_name or "acc", quant.quantized.accuracy, str(measure.get("label") or "")
        )
        metric = " ".join(p for p in (scheme, value) if p)
        about = f"quantized {measure.get('label') or measure.get('name') or 'accuracy'}"
    elif task.startswith("export."):
        metric, about = str(spec.get("format") or ""), "format"
    if source is not None and (source.model_full or source.dataset_full):
        # A run made from another run (quantize, export, bench) uses that run's model and data: its own spec's
        # model and dataset are the defaults it was written with (cnn on digits), not what it holds.
        model_full, dataset = source.model_full or model_full, source.dataset_full or dataset
    return RunIdentity(
        run_id=entry["id"],
        task=task,
        status=entry.get("status") or "",
        model=short_model(model_full),
        model_full=model_full,
        dataset=short_model(dataset),
        dataset_full=dataset,
        metric=metric,
        metric_about=about,
        date=format_date(entry.get("created")),
        learns=_learns(task, model_full, spec, report),
    )


def _learns(task: str, model: str, spec: dict, report: dict) -> str:
    """What a training run learns: every task's runs share the id train.model, which says nothing of it. The
    report's task is the one resolved from task=auto; a LightningModule's own loss decides, so it reads
    lightning."""
    if not task.startswith("train."):
        return ""
    if model.startswith("lightning:"):
        return "lightning"
    learned = report.get("task") or spec.get("task") or ""
    return "" if learned == "auto" else str(learned)


class RunIdentities:
    """Identities read from a run store, each read once per version of its run (its `updated` time), so a list
    refreshed every few seconds does not reopen every run."""

    def __init__(self, store):
        self.store = store
        self._cache: dict[str, tuple[object, RunIdentity]] = {}

    def of(self, entry: dict) -> RunIdentity:
        key = (entry.get("updated"), entry.get("status"))
        cached = self._cache.get(entry["id"])
        if cached is not None and cached[0] == key:
            return cached[1]
        identity = self._read(entry)
        self._cache[entry["id"]] = (key, identity)
        return identity

    def _read(self, entry: dict) -> RunIdentity:
        if entry.get("status") == "unreadable":
            return identify(entry, None, None)
        try:
            with self.store.open_run(entry["id"]) as run:
                spec, report = run.read_spec(), run.read_report() or {}
                last = (
                    run.last_metrics() if entry.get("task", "").startswith("train.") and not report else None
                )
        except (WorkbenchError, OSError, ValueError, sqlite3.Error):
            return identify(entry, None, None)
        source = None
        source_id = dig(spec, "source", "run")
        if source_id and source_id != entry["id"]:
            source = self._source(source_id)
        return identify(entry, spec, report, last=last, source=source)

    def _source(self, run_id: str, seen: frozenset = frozenset()) -> RunIdentity | None:
        """The model and data of the run `run_id`, following its own source (a bench of a quantize run of a
        training run names the training run's)."""
        cached = self._cache.get(run_id)
        if cached is not None:
            return cached[1]
        try:
            with self.store.open_run(run_id) as run:
                spec = run.read_spec()
        except (WorkbenchError, OSError, ValueError, sqlite3.Error):
            return None
        source_id = dig(spec, "source", "run")
        seen = seen | {run_id}
        source = self._source(source_id, seen) if source_id and source_id not in seen else None
        return identify({"id": run_id}, spec, None, source=source)

    def sources(self, entries, tasks) -> list[tuple[dict, RunIdentity]]:
        """The runs of `tasks` a person can start from (failed and unreadable ones left out), newest first."""
        tasks = with_aliases(tasks)  # a training run recorded as train.classifier is a source too
        picked = []
        for entry in entries:
            if entry.get("task") in tasks and entry.get("status") not in UNUSABLE:
                picked.append((entry, self.of(entry)))
        return picked
