"""The model report as one self-contained HTML page: inline CSS, inline SVG charts, no scripts, no fonts or
images by URL, so it opens the same offline, in a mail attachment or printed.

Every value from a run (spec, report.json, metric and layer names) is user data: it is escaped, and read
defensively (a report.json of an unexpected shape shows "–", never breaks the page).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from workbench import __version__
from workbench.report import svg
from workbench.report.collect import ModelStory, RunRecord
from workbench.report.svg import Series, esc, finite

LADDER_NAMES = {
    "fp32": "FP32",
    "fold_bn": "fold BatchNorm",
    "cle": "cross-layer equalisation",
    "weight_ranges": "weights quantized",
    "adaround": "AdaRound",
    "bias_correction": "bias correction",
    "activation_ranges": "activations quantized",
    "qat": "QAT",
    "mixed_precision": "mixed precision",
}
NOT_MEASURED = {"unavailable", "failed", "error", "skipped", "cancelled", "timeout"}
OPEN_CARDS = 3  # quantize runs shown open; more are folded (the best and the newest stay open)

CSS = """
:root { --ink:#1d1d1f; --muted:#5f6368; --rule:#d9d9de; --soft:#f6f6f8; --ok:#17663a; --ok-bg:#e3f4e8;
        --bad:#a1120d; --bad-bg:#fde7e5; --na:#5f6368; --na-bg:#ececef; --accent:#0b5cad; }
* { box-sizing: border-box; }
html { background: #fff; }
body { margin: 0 auto; max-width: 1120px; padding: 28px 36px 60px; color: var(--ink); background: #fff;
       font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { border-bottom: 2px solid var(--ink); padding-bottom: 12px; margin-bottom: 18px; }
header .kicker { text-transform: uppercase; letter-spacing: .08em; font-size: 11px; color: var(--muted); }
h1 { font-size: 26px; margin: 2px 0 6px; }
h2 { font-size: 19px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--rule); }
h3 { font-size: 15px; margin: 18px 0 6px; }
.meta { color: var(--muted); margin: 0; }
.meta b { color: var(--ink); font-weight: 600; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 12px; }
code { background: var(--soft); padding: 1px 4px; border-radius: 3px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-variant-numeric: tabular-nums; }
th, td { text-align: left; padding: 4px 10px 4px 0; border-bottom: 1px solid var(--rule); vertical-align: top; }
th { font-weight: 600; font-size: 12px; color: var(--muted); border-bottom: 1px solid var(--ink); }
td.num, th.num { text-align: right; padding-right: 14px; white-space: nowrap; }
table.wide { width: 100%; }
table.kv th { color: var(--muted); font-weight: 500; border-bottom: 1px solid var(--rule); width: 210px; font-size: 13px; }
table.kv td { font-size: 14px; }
.chip { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; font-weight: 600; white-space: nowrap; }
.chip.ok { color: var(--ok); background: var(--ok-bg); }
.chip.bad { color: var(--bad); background: var(--bad-bg); }
.chip.na { color: var(--na); background: var(--na-bg); }
.good { color: var(--ok); } .bad { color: var(--bad); }
.muted { color: var(--muted); }
.nowrap { white-space: nowrap; }
.empty { color: var(--muted); background: var(--soft); border-left: 3px solid var(--rule); padding: 8px 12px; margin: 8px 0; }
.problem { color: var(--bad); background: var(--bad-bg); padding: 6px 10px; margin: 6px 0; border-radius: 3px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(480px, 1fr)); gap: 10px 22px; margin: 8px 0; }
.charts > div { min-width: 0; }
svg.chart { max-width: 100%; height: auto; display: block; }
.card { border: 1px solid var(--rule); border-radius: 6px; padding: 4px 16px 8px; margin: 12px 0; }
.card > summary { cursor: pointer; padding: 8px 0; font-weight: 600; }
.card > summary .muted { font-weight: 400; }
details.spec { margin: 6px 0; }
details.spec > summary { cursor: pointer; color: var(--accent); font-size: 13px; }
details.spec pre { background: var(--soft); border: 1px solid var(--rule); padding: 10px 12px; overflow-x: auto;
                   max-height: 420px; white-space: pre; margin: 6px 0; }
footer { margin-top: 40px; padding-top: 8px; border-top: 1px solid var(--rule); color: var(--muted); font-size: 12px; }
@media print {
  body { max-width: none; padding: 0 8mm; font-size: 11pt; }
  .card, table, svg.chart { break-inside: avoid; }
  h2 { break-after: avoid; }
}
"""  # noqa: E501


# --- reading values defensively ----------------------------------------------------------------------


def _get(obj: object, *keys: object) -> object:
    for key in keys:
        if isinstance(obj, dict):
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def _num(value: object) -> float | None:
    return float(value) if finite(value) else None


def _dicts(value: object) -> list[dict]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


# --- formatting ------------------------------------------------------------------------------------------


def _pct(value: object, digits: int = 2) -> str:
    v = _num(value)
    return "–" if v is None else f"{v * 100:.{digits}f} %"


def _pp(delta: float | None) -> str:
    if delta is None:
        return "–"
    sign = "+" if delta > 0.00005 else ("−" if delta < -0.00005 else "±")
    return f"{sign}{abs(delta) * 100:.2f} pp"


# A quantize run of a task other than classification carries a `metric` block: every "accuracy" of its
# report holds that task's monitor (MAE, mIoU), named by its label and direction ("val MAE ↓") and shown as a
# plain number; a report without one is accuracy, in percent.


def _metric(record: RunRecord) -> dict | None:
    metric = _get(record.report, "metric")
    return metric if isinstance(metric, dict) and metric.get("label") else None


def _metric_name(metric: dict | None) -> str:
    """ "accuracy", or "val MAE ↓" with the metric's direction."""
    if metric is None:
        return "accuracy"
    return f"{_str(metric.get('label'))} {'↑' if metric.get('higher_is_better', True) else '↓'}"


def _mval(value: object, metric: dict | None, digits: int = 2) -> str:
    """A measured value: 93.12 % for accuracy, 4 significant digits for another metric."""
    if metric is None:
        return _pct(value, digits)
    v = _num(value)
    return "–" if v is None else f"{v:.4g}"


def _mdelta(delta: float | None, metric: dict | None) -> str:
    """A change against FP32: in percentage points for accuracy, in the metric's own units else."""
    if metric is None or delta is None:
        return _pp(delta)
    return f"{'+' if delta > 0 else '−' if delta < 0 else '±'}{abs(delta):.3g}"


def _kept(value: float | None, fp32: float | None, metric: dict | None, share: float = 0.01) -> bool:
    """Whether `value` is no worse than FP32 by more than `share` (accuracy: points; another metric: a share
    of its FP32 value), in the metric's direction: a lower-is-better metric gets worse by rising."""
    if value is None or fp32 is None:
        return True
    if metric is None:
        return value - fp32 >= -share
    sign = 1.0 if metric.get("higher_is_better", True) else -1.0
    return sign * (value - fp32) >= -share * abs(fp32)


def _fmt(value: object, digits: int = 3) -> str:
    v = _num(value)
    return "–" if v is None else svg.fmt_number(v, digits)


def _ms(value: object) -> str:
    v = _num(value)
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:,.0f}"


def _bytes(value: object) -> str:
    v = _num(value)
    if v is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


def _date(iso: str | None) -> str:
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M") if iso else "–"
    except ValueError:
        return iso or "–"


def _chip(text: str, kind: str) -> str:
    return f'<span class="chip {kind}">{esc(text)}</span>'


def _status_chip(status: str) -> str:
    kind = {"done": "ok", "failed": "bad", "interrupted": "bad", "unreadable": "bad"}.get(status, "na")
    return _chip(status or "unknown", kind)


def _table(
    headers: Iterable[str],
    rows: Iterable[Iterable[str | tuple[str, int]]],
    *,
    numeric: Iterable[int] = (),
    cls: str = "wide",
) -> str:
    """A table from already-escaped cells; `numeric` columns are right-aligned. A cell (html, n) spans n
    columns and ends its row."""
    numeric = set(numeric)
    head = "".join(
        f'<th class="num">{h}</th>' if i in numeric else f"<th>{h}</th>" for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            if isinstance(cell, tuple):
                cells.append(f'<td colspan="{cell[1]}">{cell[0]}</td>')
                break
            cells.append(f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _kv(rows: Iterable[tuple[str, str]]) -> str:
    return (
        '<table class="kv">'
        + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
        + "</table>"
    )


def _empty(text_html: str) -> str:
    return f'<p class="empty">{text_html}</p>'


def _problems(record: RunRecord) -> str:
    out = "".join(f'<p class="problem">{esc(p)}</p>' for p in record.problems)
    if record.status != "done":
        message = f": {esc(record.message)}" if record.message else ""
        out += f'<p class="problem">This run is {esc(record.status or "in an unknown state")}{message}</p>'
    return out


def _spec_details(record: RunRecord, what: str) -> str:
    text = record.spec_text or "(no spec.toml)"
    return (
        f'<details class="spec"><summary>{esc(what)} spec: <span '
        f'class="mono">{esc(record.id)}</span>/spec.toml'
        f"</summary><pre>{esc(text)}</pre></details>"
    )


def _short(run_id: str) -> str:
    return run_id.rsplit("-", 1)[-1] if "-" in run_id else run_id


# --- what each step did ------------------------------------------------------------------------------------


def quant_label(record: RunRecord, *, long: bool = False) -> str:
    """W4A8, or with `long` the recipe: "W4 per-channel mse · A8 mse · CLE · bias correction (empirical)"."""
    spec = record.spec
    w_bits, a_bits = _get(spec, "weights", "bits"), _get(spec, "activations", "bits")
    mixed = _get(spec, "mixed_precision", "layers")
    short = f"W{w_bits if w_bits is not None else '?'}A{a_bits if a_bits is not None else '?'}"
    if isinstance(mixed, list) and mixed:
        short += " mixed"
    if not long:
        return short
    parts = [
        f"W{w_bits} {_str(_get(spec, 'weights', 'granularity')).replace('_', '-')} "
        f"{_str(_get(spec, 'weights', 'range'))}".strip(),
        f"A{a_bits} {_str(_get(spec, 'activations', 'range'))}".strip(),
    ]
    if _get(spec, "fold_bn") is False:
        parts.append("no BN folding")
    if _get(spec, "cle") is True:
        parts.append("CLE")
    if _get(spec, "adaround", "enabled") is True:
        parts.append("AdaRound")
    bias = _get(spec, "bias_correction")
    if isinstance(bias, str) and bias != "none":
        parts.append(f"bias correction ({bias})")
    qat_epochs = _num(_get(spec, "qat", "epochs"))
    if qat_epochs:
        parts.append(f"QAT {qat_epochs:g} epochs")
    if isinstance(mixed, list) and mixed:
        parts.append(f"{len(mixed)} layers at higher precision")
    return " · ".join(parts)


def _bits(record: RunRecord) -> float:
    w_bits, a_bits = (
        _num(_get(record.spec, "weights", "bits")),
        _num(_get(record.spec, "activations", "bits")),
    )
    return (w_bits or 32) + (a_bits or 32)


def _created(record: RunRecord) -> str:
    return record.created or record.id


def _run_name(story: ModelStory, run_id: str | None) -> str:
    """How a source shows: "training run", "quantize W4A8 #3051bf", "export onnx #0a1b2c"."""
    if run_id is None:
        return "–"
    if run_id == story.train.id:
        return "training run"
    record = story.by_id().get(run_id)
    if record is None:
        return esc(run_id)
    if record in story.quantize:
        return f'quantize {esc(quant_label(record))} <span class="muted">#{esc(_short(run_id))}</span>'
    if record in story.export:
        return (
            f"export {esc(_str(_get(record.report, 'format')) or _str(_get(record.spec, 'format')))} "
            f'<span class="muted">#{esc(_short(run_id))}</span>'
        )
    return esc(run_id)


def _bench_results(record: RunRecord) -> list[dict]:
    return _dicts(_get(record.report, "results"))


def _measured(result: dict) -> bool:
    return (
        _str(result.get("status")).lower() not in NOT_MEASURED
        and _num(_get(result, "latency_ms", "p50")) is not None
    )


def _parity(record: RunRecord) -> tuple[str, str]:
    """(verdict chip, plain verdict): passed, FAILED, not checked."""
    passed = _get(record.report, "parity", "passed")
    if passed is True:
        return _chip("parity passed", "ok"), "passed"
    if passed is False:
        return _chip("parity FAILED", "bad"), "failed"
    if record.status != "done":
        return _chip(
            record.status or "unknown", "bad" if record.status in ("failed", "interrupted") else "na"
        ), record.status
    return _chip("not checked", "na"), "not checked"


def _fp32_accuracy(story: ModelStory) -> tuple[float | None, str]:
    final = _get(story.train.report, "final")
    for key, what in (("test_accuracy", "test split"), ("val_accuracy", "validation split")):
        value = _num(_get(final, key))
        if value is not None:
            return value, what
    for record in story.quantize:
        value = _num(_get(record.report, "fp32", "accuracy"))
        if value is not None and _metric(record) is None:  # a task's monitor (MAE) is not an accuracy
            return value, "quantize run's held-out set"
    return None, ""


# --- sections -----------------------------------------------------------------------------------------------


def _header(story: ModelStory) -> str:
    spec, report = story.train.spec, story.train.report
    model = _str(_get(spec, "model", "name")) or "model"
    dataset = _str(_get(spec, "dataset", "name")) or "its data"
    facts = [
        f'training run <b class="mono">{esc(story.train.id)}</b>',
        f"trained <b>{esc(_date(story.train.created))}</b>",
    ]
    params = _num(_get(report, "parameters", "total"))
    if params is not None:
        facts.append(f"<b>{params:,.0f}</b> parameters")
    epochs = _get(report, "epochs_completed")
    device = _get(report, "device")
    if epochs is not None:
        facts.append(f"<b>{esc(epochs)}</b> epochs" + (f" on <b>{esc(device)}</b>" if device else ""))
    facts.append(f"status {_status_chip(story.train.status)}")
    note = ""
    if story.requested:
        note = (
            f'<p class="meta">You named run <span class="mono">{esc(story.requested)}</span>; this is the '
            "report of the model it came from.</p>"
        )
    return (
        f'<header><div class="kicker">Torch Workbench · model report</div>'
        f'<h1>{esc(model)} <span class="muted">on</span> {esc(dataset)}</h1>'
        f'<p class="meta">{" · ".join(facts)}</p>{note}</header>'
    )


def _summary(story: ModelStory) -> str:
    rows: list[tuple[str, str]] = []
    fp32, where = _fp32_accuracy(story)
    rows.append(
        (
            "FP32 accuracy",
            f'<b>{_pct(fp32)}</b> <span class="muted">({esc(where)})</span>'
            if fp32 is not None
            else '<span class="muted">not measured</span>',
        )
    )
    best_val = _num(_get(story.train.report, "best_val_accuracy"))
    if best_val is not None:
        epoch = _get(story.train.report, "best_epoch")
        rows.append(
            (
                "Best validation accuracy",
                _pct(best_val)
                + (f' <span class="muted">(epoch {esc(epoch)})</span>' if epoch is not None else ""),
            )
        )
    quant = [(r, _num(_get(r.report, "quantized", "accuracy"))) for r in story.quantize if r.done]
    quant = [(r, a) for r, a in quant if a is not None]
    if quant:
        # One model's quantize runs measure one task's metric; best is its direction's best (lowest for MAE).
        metric = _metric(quant[0][0])
        sign = -1.0 if metric is not None and not metric.get("higher_is_better", True) else 1.0
        # Ties go to the smaller model (fewer bits), then the newer run.
        best, acc = max(
            quant, key=lambda item: (round(sign * item[1], 6), -_bits(item[0]), _created(item[0]))
        )
        ref = _num(_get(best.report, "fp32", "accuracy"))
        ref = ref if ref is not None else (fp32 if metric is None else None)
        drop = acc - ref if ref is not None else None
        cls = "good" if drop is not None and _kept(acc, ref, metric) else "bad"
        rows.append(
            (
                f"Best quantized {_metric_name(metric)}",
                f'<b>{_mval(acc, metric)}</b> <span class="{cls}">{_mdelta(drop, metric)}</span> with '
                f"{esc(quant_label(best, long=True))}"
                f' <span class="muted">(#{esc(_short(best.id))}, best of {len(quant)})</span>',
            )
        )
    else:
        rows.append(("Best quantized accuracy", '<span class="muted">no quantize runs yet</span>'))
    if story.export:
        chips = []
        for record in story.export:
            chip, _ = _parity(record)
            fmt = _str(_get(record.report, "format")) or _str(_get(record.spec, "format")) or "export"
            chips.append(f'<span class="mono">{esc(fmt)}</span> {chip}')
        rows.append(("Exports", " &nbsp; ".join(chips)))
    else:
        rows.append(("Exports", '<span class="muted">none yet</span>'))
    measured = []
    for record in story.bench:
        for result in _bench_results(record):
            if _measured(result):
                measured.append(result)
    if measured:
        batch1 = [r for r in measured if r.get("batch_size") == 1] or measured
        fastest = min(batch1, key=lambda r: _num(_get(r, "latency_ms", "p50")))
        rows.append(
            (
                "Best latency",
                f"<b>{_ms(_get(fastest, 'latency_ms', 'p50'))} ms</b> p50 "
                f'<span class="muted">({esc(fastest.get("backend"))}, batch '
                f"{esc(fastest.get('batch_size'))}, "
                f"{esc(fastest.get('device'))}, {esc(fastest.get('dtype'))})</span>",
            )
        )
        with_tp = [r for r in measured if _num(r.get("throughput_per_s")) is not None]
        if with_tp:
            top = max(with_tp, key=lambda r: _num(r.get("throughput_per_s")))
            rows.append(
                (
                    "Best throughput",
                    f"<b>{_fmt(top.get('throughput_per_s'))}</b> samples/s "
                    f'<span class="muted">({esc(top.get("backend"))}, batch {esc(top.get("batch_size"))}, '
                    f"{esc(top.get('device'))})</span>",
                )
            )
    else:
        rows.append(("Best latency", '<span class="muted">not benchmarked yet</span>'))
    return '<h2 id="summary">Summary</h2>' + _kv(rows)


def _metric_kind(name: str) -> str:
    base = name.rsplit("/", 1)[-1].lower()
    if "loss" in base:
        return "loss"
    if base in ("acc", "accuracy", "top1", "top5") or "acc" in base:
        return "accuracy"
    if base in ("lr", "learning_rate"):
        return "learning rate"
    return "other"


def _metric_color(name: str, index: int) -> str:
    lowered = name.lower()
    if "val" in lowered:
        return svg.PALETTE[1]
    if "test" in lowered:
        return svg.PALETTE[2]
    if "train" in lowered:
        return svg.PALETTE[0]
    return svg.color(index + 3)


def _training(story: ModelStory) -> str:
    record = story.train
    out = ['<h2 id="training">Training</h2>', _problems(record)]
    metrics = {name: data for name, data in story.metrics.items() if name != "epoch"}
    groups: dict[str, list[str]] = {}
    for name in sorted(metrics):
        groups.setdefault(_metric_kind(name), []).append(name)
    for kind, names in groups.items():
        per_step = [n for n in names if not n.startswith("epoch/")]
        if per_step:  # per-epoch averages repeat the per-step curves: keep the finer ones
            groups[kind] = per_step
    charts = []
    order = ["loss", "accuracy", "learning rate"] + sorted(
        k for k in groups if k not in ("loss", "accuracy", "learning rate")
    )
    for kind in order:
        names = groups.get(kind)
        if not names:
            continue
        if kind == "other":
            for name in names[:4]:
                steps, values = metrics[name]
                charts.append(
                    svg.line_chart(
                        [Series(name, steps, values, color=svg.color(4))], title=name, x_label="step"
                    )
                )
            continue
        series = [
            Series(
                name,
                metrics[name][0],
                metrics[name][1],
                color=_metric_color(name, i),
                markers=len(metrics[name][0]) <= 12,
            )
            for i, name in enumerate(names[:6])
        ]
        y_format = (lambda v: f"{v * 100:.0f} %") if kind == "accuracy" else svg.fmt_number
        lowest = min((v for n in names for v in metrics[n][1] if finite(v)), default=0.0)
        # Losses and learning rates read best from zero; accuracy is left to its own range.
        y_range = (0.0, None) if kind in ("loss", "learning rate") and lowest >= 0 else (None, None)
        charts.append(
            svg.line_chart(
                series, title=kind.capitalize(), x_label="step", y_format=y_format, y_range=y_range
            )
        )
    if charts:
        out.append('<div class="charts">' + "".join(f"<div>{c}</div>" for c in charts) + "</div>")
    else:
        out.append(_empty("This run logged no metrics, so there are no curves to draw."))
    report = record.report or {}
    final = _get(report, "final")
    finals, rows = [], []
    if isinstance(final, dict):
        for key, value in final.items():
            shown = _pct(value) if "acc" in key else _fmt(value, 4)
            finals.append((_str(key).replace("_", " "), shown))
    facts = [
        ("epochs completed", _get(report, "epochs_completed")),
        ("optimizer steps", _get(report, "global_steps")),
        ("best epoch", _get(report, "best_epoch")),
        ("early stopped", _get(report, "early_stopped")),
        ("device", _get(report, "device")),
        ("mixed precision (amp)", _get(report, "amp")),
        ("trainable parameters", _get(report, "parameters", "trainable")),
    ]
    for key, value in facts:
        if isinstance(value, bool):
            rows.append((key, "yes" if value else "no"))
        elif value is not None and not isinstance(value, (dict, list)):
            rows.append(
                (key, esc(f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value))
            )
    speed = _num(_get(report, "throughput", "train_samples_per_s"))
    if speed is not None:
        rows.append(("training speed", f"{_fmt(speed)} samples/s"))
    elapsed = _num(_get(report, "elapsed_s"))
    if elapsed is not None:
        rows.append(("wall time", f"{elapsed:.1f} s" if elapsed < 120 else f"{elapsed / 60:.1f} min"))
    tables = ([f"<div><h3>Final metrics</h3>{_kv(finals)}</div>"] if finals else []) + (
        [f"<div><h3>How it ran</h3>{_kv(rows)}</div>"] if rows else []
    )
    if tables:
        out.append('<div class="charts">' + "".join(tables) + "</div>")
    out.append(_spec_details(record, "Training"))
    return "".join(out)


def _ladder_chart(record: RunRecord) -> str:
    steps = _dicts(_get(record.report, "steps"))
    labels, values = [], []
    for step in steps:
        name = _str(step.get("step"))
        labels.append(LADDER_NAMES.get(name, name.replace("_", " ")))
        values.append(_num(step.get("accuracy")))
    if not labels:
        return ""
    good = [v for v in values if v is not None]
    fp32 = _num(_get(record.report, "fp32", "accuracy"))
    metric = _metric(record)
    if metric is not None:
        name = _metric_name(metric)
        colors = [svg.PALETTE[0] if _kept(v, fp32, metric, 0.0005) else svg.PALETTE[1] for v in values]
        return svg.bar_chart(
            labels,
            [v if v is not None else math.nan for v in values],
            title=f"{name} ladder",
            value_label=f"held-out {name}",
            colors=colors,
            value_format=lambda v: f"{v:.4g}",
            reference=(fp32, f"FP32 {_str(metric.get('label'))}") if fp32 is not None else None,
        )
    lo = 0.0
    if good and min(good) > 0.3:
        spread = max(good) - min(good)
        lo = max(0.0, math.floor((min(good) - max(spread * 0.6, 0.01)) * 100) / 100)
    colors = [
        svg.PALETTE[0] if (v is None or fp32 is None or v >= fp32 - 0.0005) else svg.PALETTE[1]
        for v in values
    ]
    return svg.bar_chart(
        labels,
        [v if v is not None else math.nan for v in values],
        title="Accuracy ladder",
        value_label="held-out accuracy" + (f" (axis starts at {lo * 100:.0f} %)" if lo > 0 else ""),
        domain=(lo, min(1.0, max(good) + 0.002) if good and lo > 0 else None),
        colors=colors,
        value_format=lambda v: f"{v * 100:.2f} %",
        tick_format=lambda v: f"{v * 100:g} %",
        reference=(fp32, "FP32 accuracy") if fp32 is not None else None,
    )


def _worst_layers(record: RunRecord, count: int = 5) -> str:
    layers = [
        layer for layer in _dicts(_get(record.report, "layers")) if _num(layer.get("sqnr_db")) is not None
    ]
    if not layers:
        return '<p class="muted">No per-layer SQNR in this run\'s report.</p>'
    layers.sort(key=lambda layer: _num(layer.get("sqnr_db")))
    rows = []
    for layer in layers[:count]:
        held = _num(_get(layer, "error", "held_out", "accumulated", "sqnr_db"))
        rows.append(
            [
                f'<span class="mono">{esc(layer.get("name") or layer.get("layer") or "?")}</span>',
                esc(layer.get("tensor") or ""),
                esc(layer.get("bits") if layer.get("bits") is not None else "–"),
                esc(_str(layer.get("granularity")).replace("_", "-")),
                esc(layer.get("range_method") or ""),
                f"<b>{_fmt(layer.get('sqnr_db'), 3)}</b>",
                _fmt(held, 3),
                _fmt(layer.get("cosine"), 5),
            ]
        )
    return (
        f'<h3>Worst layers by SQNR <span class="muted">({min(count, len(layers))} of {len(layers)} '
        "tensors)</span></h3>"
        + _table(
            [
                "layer",
                "tensor",
                "bits",
                "granularity",
                "range",
                "SQNR dB",
                '<span title="the model output so far, every layer up to here quantized, on held-out data">'
                "output SQNR dB</span>",
                "cosine",
            ],
            rows,
            numeric=(2, 5, 6, 7),
            cls="",
        )
    )


def _sensitivity(record: RunRecord) -> str:
    rows = _dicts(_get(record.report, "sensitivity"))
    if not rows:
        return ""
    fp32 = _num(_get(record.report, "fp32", "accuracy"))
    metric = _metric(record)
    # The most sensitive layer is the one that, quantized alone, leaves the worst value: the lowest accuracy,
    # or the highest value of a lower-is-better metric.
    sign = -1.0 if metric is not None and not metric.get("higher_is_better", True) else 1.0
    worst = min(
        rows,
        key=lambda r: sign * _num(r.get("only_this")) if _num(r.get("only_this")) is not None else math.inf,
    )
    body = []
    for row in rows:
        mark = ' <span class="bad">most sensitive</span>' if row is worst and len(rows) > 1 else ""
        only = _num(row.get("only_this"))
        body.append(
            [
                f'<span class="mono">{esc(row.get("layer"))}</span>{mark}',
                _mval(only, metric),
                _mdelta(only - fp32, metric) if only is not None and fp32 is not None else "–",
                _mval(row.get("all_but_this"), metric),
            ]
        )
    title = (
        "Sensitivity"
        if metric is None
        else f'Sensitivity <span class="muted">({esc(_metric_name(metric))})</span>'
    )
    return f"<h3>{title}</h3>" + _table(
        ["layer", "only this quantized", "vs FP32", "all but this quantized"], body, numeric=(1, 2, 3), cls=""
    )


def _mixed(record: RunRecord) -> str:
    mp = _get(record.report, "mixed_precision")
    if not isinstance(mp, dict):
        return ""
    layers = mp.get("layers")
    names = []
    for item in layers if isinstance(layers, list) else []:
        if isinstance(item, dict):
            label = _str(item.get("layer") or item.get("name") or "?")
            names.append(label + (f" → {item['bits']} bits" if item.get("bits") is not None else ""))
        else:
            names.append(_str(item))
    met = mp.get("met")
    verdict = (
        _chip("target met", "ok") if met is True else _chip("target missed", "bad") if met is False else ""
    )
    metric = _metric(record)
    allowed = _num(mp.get("target_drop"))
    if metric is None:
        target = f"at most {_pp(allowed)} below FP32".replace("+", "") if allowed is not None else "–"
    else:  # in the metric's own units; a lower-is-better metric may rise by that much
        side = "below" if metric.get("higher_is_better", True) else "above"
        target = f"at most {allowed:.4g} {side} FP32" if allowed is not None else "–"
    rows = [
        (f"{_metric_name(metric)} target", target),
        ("layers kept at higher precision", esc(", ".join(names)) if names else "none needed"),
        (_metric_name(metric), f"{_mval(mp.get('accuracy'), metric)} {verdict}"),
        (
            "size",
            f'{_bytes(mp.get("size_bytes"))} <span class="muted">(FP32 '
            f"{_bytes(mp.get('fp32_size_bytes'))})</span>",
        ),
    ]
    return "<h3>Mixed precision</h3>" + _kv(rows)


def _quant_card(story: ModelStory, record: RunRecord, *, open_: bool) -> str:
    report = record.report or {}
    fp32 = _num(_get(report, "fp32", "accuracy"))
    acc = _num(_get(report, "quantized", "accuracy"))
    drop = acc - fp32 if acc is not None and fp32 is not None else None
    metric = _metric(record)
    shown = _mval(acc, metric) if metric is None else f"{esc(_metric_name(metric))} {_mval(acc, metric)}"
    head = (
        f'{esc(quant_label(record))} <span class="muted">#{esc(_short(record.id))} · '
        f"{esc(quant_label(record, long=True))}"
        f" · {_date(record.created)}</span> · {shown} "
    )
    if drop is not None:
        head += (
            f'<span class="{"good" if _kept(acc, fp32, metric) else "bad"}">{_mdelta(drop, metric)}</span>'
        )
    if record.status != "done":
        head += " " + _status_chip(record.status)
    parts = [f'<details class="card"{" open" if open_ else ""}><summary>{head}</summary>', _problems(record)]
    if record.done:
        facts = [
            ("run", f'<span class="mono">{esc(record.id)}</span>'),
            (
                "FP32 → quantized" + ("" if metric is None else f" ({esc(_metric_name(metric))})"),
                f"{_mval(fp32, metric)} → <b>{_mval(acc, metric)}</b> ({_mdelta(drop, metric)})",
            ),
            ("logit SQNR", f"{_fmt(_get(report, 'quantized', 'logit_sqnr_db'))} dB"),
        ]
        calibration, held_out = (
            _num(_get(report, "calibration", "samples")),
            _num(_get(report, "held_out", "samples")),
        )
        if calibration is not None:
            facts.append(("calibration", f"{calibration:,.0f} samples"))
        if held_out is not None:
            facts.append(
                (
                    f"{'accuracy' if metric is None else esc(_metric_name(metric))} measured on",
                    f"{held_out:,.0f} samples ({esc(_get(report, 'held_out', 'split') or 'held-out')})",
                )
            )
        ladder = _ladder_chart(record)
        parts.append(
            '<div class="charts">'
            + f"<div>{_kv(facts)}</div>"
            + (f"<div>{ladder}</div>" if ladder else "")
            + "</div>"
        )
        parts.append(_worst_layers(record))
        parts.append(_sensitivity(record))
        parts.append(_mixed(record))
    parts.append(_spec_details(record, "Quantize"))
    parts.append("</details>")
    return "".join(parts)


def _quantization(story: ModelStory) -> str:
    out = ['<h2 id="quantization">Quantization</h2>']
    if not story.quantize:
        out.append(
            _empty(
                f"No quantize runs of this model yet: <code>workbench quantize --set source.run="
                f"{esc(story.train.id)}</code>"
            )
        )
        return "".join(out)
    rows, labels, values, bar_colors = [], [], [], []
    for record in story.quantize:
        report = record.report or {}
        fp32 = _num(_get(report, "fp32", "accuracy"))
        acc = _num(_get(report, "quantized", "accuracy"))
        drop = acc - fp32 if acc is not None and fp32 is not None else None
        layers = [layer for layer in _dicts(report.get("layers")) if _num(layer.get("sqnr_db")) is not None]
        worst = min(layers, key=lambda layer: _num(layer.get("sqnr_db"))) if layers else None
        worst_text = (
            (
                f'<span class="nowrap"><span class="mono">{esc(worst.get("name"))}</span> '
                f"{esc(worst.get('tensor') or '')} {_fmt(worst.get('sqnr_db'))} dB</span>"
            )
            if worst
            else "–"
        )
        metric = _metric(record)
        drop_html = (
            f'<span class="{"good" if _kept(acc, fp32, metric) else "bad"}">{_mdelta(drop, metric)}</span>'
            if drop is not None
            else "–"
        )
        rows.append(
            [
                f'<span class="mono">#{esc(_short(record.id))}</span>',
                esc(quant_label(record, long=True)),
                _status_chip(record.status),
                _mval(acc, metric) if metric is None else f"{_mval(acc, metric)} {esc(_metric_name(metric))}",
                drop_html,
                _fmt(_get(report, "quantized", "logit_sqnr_db")),
                worst_text,
            ]
        )
        if acc is not None:
            labels.append(f"{quant_label(record)} #{_short(record.id)}")
            values.append(acc)
            bar_colors.append(svg.PALETTE[0] if _kept(acc, fp32, metric, 0.0005) else svg.PALETTE[1])
    out.append(
        _table(
            ["run", "recipe", "status", "quantized acc.", "vs FP32", "logit SQNR dB", "worst tensor"],
            rows,
            numeric=(3, 4, 5),
        )
    )
    metrics = {_metric_name(_metric(r)) for r in story.quantize if r.done}
    if len(values) >= 2 and metrics != {"accuracy"}:
        # A task's monitor on its own scale, from zero, named with its direction; no FP32 line across runs.
        chart = svg.bar_chart(
            labels,
            values,
            title=f"Quantized {' / '.join(sorted(metrics))} by run",
            width=760,
            value_label="held-out " + " / ".join(sorted(metrics)),
            value_format=lambda v: f"{v:.4g}",
            colors=bar_colors,
            bar_height=16,
        )
        out.append(f'<div style="max-width:760px">{chart}</div>')
    elif len(values) >= 2:
        fp32, _ = _fp32_accuracy(story)
        lo = 0.0
        if min(values) > 0.3:
            lo = max(
                0.0, math.floor((min(values) - max((max(values) - min(values)) * 0.6, 0.01)) * 100) / 100
            )
        chart = svg.bar_chart(
            labels,
            values,
            title="Quantized accuracy by run",
            width=760,
            value_label="held-out accuracy" + (f" (axis starts at {lo * 100:.0f} %)" if lo > 0 else ""),
            domain=(lo, min(1.0, max(values + ([fp32] if fp32 else [])) + 0.002) if lo > 0 else None),
            value_format=lambda v: f"{v * 100:.2f} %",
            tick_format=lambda v: f"{v * 100:g} %",
            colors=bar_colors,
            reference=(fp32, "FP32 accuracy") if fp32 is not None else None,
            bar_height=16,
        )
        out.append(f'<div style="max-width:760px">{chart}</div>')
    # The best and the newest open; with few runs, all of them.
    done = [(r, _num(_get(r.report, "quantized", "accuracy"))) for r in story.quantize if r.done]

    def better(record: RunRecord, value: float) -> float:  # a lower-is-better metric's best is its lowest
        metric = _metric(record)
        return -value if metric is not None and not metric.get("higher_is_better", True) else value

    best = max(
        (item for item in done if item[1] is not None),
        key=lambda item: (round(better(*item), 6), -_bits(item[0]), _created(item[0])),
        default=(None, None),
    )[0]
    open_ids = (
        {r.id for r in story.quantize}
        if len(story.quantize) <= OPEN_CARDS
        else {story.quantize[-1].id, best.id if best else ""}
    )
    if len(story.quantize) > OPEN_CARDS:
        out.append(
            '<p class="muted">The best and the newest quantize runs are open below; click any other to '
            "unfold it.</p>"
        )
    out.extend(_quant_card(story, record, open_=record.id in open_ids) for record in story.quantize)
    return "".join(out)


def _export(story: ModelStory) -> str:
    out = ['<h2 id="export">Export and parity</h2>']
    if not story.export:
        out.append(
            _empty(
                f"No export runs of this model yet: <code>workbench export --set source.run="
                f"{esc(story.train.id)}</code>"
            )
        )
        return "".join(out)
    rows = []
    for record in story.export:
        report = record.report or {}
        parity = _get(report, "parity") if isinstance(_get(report, "parity"), dict) else {}
        chip, verdict = _parity(record)
        artifact = _str(report.get("artifact"))
        divergent = parity.get("first_divergent_layer")
        fmt = _str(report.get("format")) or _str(_get(record.spec, "format"))
        if record.status != "done":
            why = record.message or _str(_get(report, "error", "message"))
            rows.append(
                [
                    f'<span class="mono">#{esc(_short(record.id))}</span>',
                    _run_name(story, record.source_id),
                    f'<span class="mono">{esc(fmt)}</span>',
                    (f'{chip} <span class="muted">{esc(why)}</span>', 8),
                ]
            )
            continue
        rows.append(
            [
                f'<span class="mono">#{esc(_short(record.id))}</span>',
                _run_name(story, record.source_id),
                f'<span class="mono">{esc(fmt)}</span>',
                '<span class="mono" '
                f'title="{esc(artifact)}">{esc(Path(artifact).name) if artifact else "–"}</span>',
                _bytes(report.get("size_bytes")),
                chip,
                _fmt(parity.get("max_abs_diff")),
                _fmt(parity.get("max_rel_diff")),
                _fmt(parity.get("tolerance")),
                f'<span class="mono bad">{esc(divergent)}</span>'
                if divergent
                else (
                    '<span class="muted" '
                    f'title="{esc(parity.get("first_divergent_layer_reason") or "")}">not found'
                    "</span>"
                    if verdict == "failed"
                    else '<span class="muted">–</span>'
                ),
                _pct(
                    report.get("accuracy")
                    if not isinstance(report.get("accuracy"), dict)
                    else _get(report, "accuracy", "exported")
                ),
            ]
        )
    out.append(
        _table(
            [
                "run",
                "from",
                "format",
                "artifact",
                "size",
                "parity",
                "max abs diff",
                "max rel diff",
                "tolerance",
                "first divergent layer",
                "accuracy",
            ],
            rows,
            numeric=(4, 6, 7, 8, 10),
        )
    )
    for record in story.export:
        problems = "".join(
            f'<p class="problem">Export #{esc(_short(record.id))}: {esc(p)}</p>' for p in record.problems
        )
        out.append(problems)
    out.extend(_spec_details(record, f"Export #{_short(record.id)}") for record in story.export)
    return "".join(out)


def _bench_block(story: ModelStory, record: RunRecord) -> str:
    results = _bench_results(record)
    devices = sorted({_str(r.get("device")) for r in results if r.get("device")})
    dtypes = sorted({_str(r.get("dtype")) for r in results if r.get("dtype")})
    head = (
        f'<h3>Benchmark <span class="mono">#{esc(_short(record.id))}</span> '
        f'<span class="muted">of the {_run_name(story, record.source_id)}'
        f"{' · ' + esc(', '.join(devices)) if devices else ''}"
        f"{' · ' + esc(', '.join(dtypes)) if dtypes else ''}"
        f" · {_date(record.created)}</span></h3>"
    )
    parts = [head, _problems(record)]
    report = record.report if isinstance(record.report, dict) else {}
    shape = report.get("input_shape")
    about = [
        _str(report.get("model")),
        "input " + "×".join(_str(d) for d in shape) if isinstance(shape, list) and shape else "",
        _str(report.get("device")) if isinstance(report.get("device"), str) else "",
        f"{report['threads']} threads" if finite(report.get("threads")) else "",
    ]
    about = [a for a in about if a]
    if about:
        parts.append(f'<p class="meta">{esc(" · ".join(about))}</p>')
    measured = [r for r in results if _measured(r)]
    if not results:
        if record.done:
            parts.append(_empty("This benchmark has no results."))
    if measured:
        # One line per backend; per backend, device and dtype when one run measured several.
        several_devices = len({_str(r.get("device")) for r in measured}) > 1
        several_dtypes = len({_str(r.get("dtype")) for r in measured}) > 1

        def line_of(r: dict) -> str:
            return (
                _str(r.get("backend"))
                + (f" {_str(r.get('device'))}" if several_devices else "")
                + (f" {_str(r.get('dtype'))}" if several_dtypes else "")
            )

        backends = list(dict.fromkeys(line_of(r) for r in measured))
        batches = sorted({r["batch_size"] for r in measured if finite(r.get("batch_size"))})
        series, throughput = [], []
        for i, backend in enumerate(backends):
            rows = sorted(
                (r for r in measured if line_of(r) == backend and finite(r.get("batch_size"))),
                key=lambda r: r["batch_size"],
            )
            xs = [r["batch_size"] for r in rows]
            ys = [_num(_get(r, "latency_ms", "p50")) for r in rows]
            hover = [
                f"{backend}, batch {r['batch_size']}: p50 {_ms(_get(r, 'latency_ms', 'p50'))} ms, "
                f"p90 {_ms(_get(r, 'latency_ms', 'p90'))} ms, p99 {_ms(_get(r, 'latency_ms', 'p99'))} ms"
                for r in rows
            ]
            series.append(Series(backend, xs, ys, color=svg.color(i), markers=True, labels=hover))
            by_batch = {r["batch_size"]: _num(r.get("throughput_per_s")) for r in rows}
            throughput.append(
                (backend, [by_batch.get(b) if by_batch.get(b) is not None else math.nan for b in batches])
            )
        charts = [
            svg.line_chart(
                series,
                title="Latency (p50) against batch size",
                x_label="batch size",
                y_label="ms",
                log_x=True,
                log_y=True,
                x_ticks=batches,
                x_format=lambda v: f"{v:g}",
                y_format=lambda v: f"{v:g}",
            )
        ]
        if any(finite(v) for _, vs in throughput for v in vs):
            charts.append(
                svg.grouped_bar_chart(
                    [f"batch {b:g}" for b in batches], throughput, title="Throughput", y_label="samples/s"
                )
            )
        parts.append('<div class="charts">' + "".join(f"<div>{c}</div>" for c in charts) + "</div>")
    if results:
        rows = []
        order = {
            backend: i for i, backend in enumerate(dict.fromkeys(_str(r.get("backend")) for r in results))
        }
        for r in sorted(
            results,
            key=lambda r: (
                order[_str(r.get("backend"))],
                r.get("batch_size") if finite(r.get("batch_size")) else 0,
            ),
        ):
            lat = r.get("latency_ms") if isinstance(r.get("latency_ms"), dict) else {}
            status = _str(r.get("status")) or "ok"
            ok = _measured(r)
            chip = _chip(status, "ok" if ok else "bad" if status.lower() in ("failed", "error") else "na")
            if not ok:
                reason = f'<span class="muted">{esc(r.get("reason") or "")}</span>'
                rows.append(
                    [
                        f'<span class="mono">{esc(r.get("backend"))}</span>',
                        esc(r.get("batch_size")),
                        esc(r.get("device") or ""),
                        esc(r.get("dtype") or ""),
                        (f"{chip} {reason}", 8),
                    ]
                )
                continue
            mean, std = _num(lat.get("mean")), _num(lat.get("std"))
            rows.append(
                [
                    f'<span class="mono">{esc(r.get("backend"))}</span>',
                    esc(r.get("batch_size")),
                    esc(r.get("device") or ""),
                    esc(r.get("dtype") or ""),
                    chip,
                    f"<b>{_ms(lat.get('p50'))}</b>",
                    _ms(lat.get("p90")),
                    _ms(lat.get("p99")),
                    f"{_ms(mean)} ± {_ms(std)}" if mean is not None and std is not None else _ms(mean),
                    _ms(lat.get("min")),
                    _fmt(r.get("throughput_per_s")),
                    _bytes(r.get("peak_memory_bytes")),
                ]
            )
        parts.append(
            _table(
                [
                    "backend",
                    "batch",
                    "device",
                    "dtype",
                    "status",
                    "p50 ms",
                    "p90 ms",
                    "p99 ms",
                    "mean ± std ms",
                    "min ms",
                    "samples/s",
                    "peak memory",
                ],
                rows,
                numeric=(1, 5, 6, 7, 8, 9, 10, 11),
            )
        )
        if isinstance(report.get("memory"), str) and report["memory"]:
            parts.append(f'<p class="muted">Peak memory: {esc(report["memory"])}</p>')
    parts.append(_spec_details(record, f"Benchmark #{_short(record.id)}"))
    return "".join(parts)


def _bench(story: ModelStory) -> str:
    out = ['<h2 id="benchmark">Latency and throughput</h2>']
    if not story.bench:
        out.append(
            _empty(
                f"No benchmark runs of this model yet: <code>workbench bench --set source.run="
                f"{esc(story.train.id)}</code> (or of an export or quantize run of it)"
            )
        )
        return "".join(out)
    out.extend(_bench_block(story, record) for record in story.bench)
    return "".join(out)


def render_html(story: ModelStory, *, generated: datetime | None = None) -> str:
    """The whole page for a collected model story."""
    generated = generated or datetime.now().astimezone()
    model = _str(_get(story.train.spec, "model", "name")) or "model"
    title = f"{model} · model report · {story.train.id}"
    body = [
        _header(story),
        _summary(story),
        _training(story),
        _quantization(story),
        _export(story),
        _bench(story),
    ]
    footer = (
        f"<footer>Made by Torch Workbench {esc(__version__)} on {esc(generated.strftime('%Y-%m-%d %H:%M'))} "
        "from "
        f'the workspace <span class="mono">{esc(story.workspace)}</span>: 1 training run, '
        f"{len(story.quantize)} quantize, {len(story.export)} export and {len(story.bench)} benchmark runs. "
        f"Regenerate it with <code>workbench report {esc(story.train.id)}</code>.</footer>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # No network at all: nothing here may load anything, even if a later edit tried.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src '
        "'unsafe-inline'; "
        'img-src data:">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + footer
        + "</body></html>\n"
    )
