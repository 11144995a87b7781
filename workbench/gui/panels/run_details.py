"""A run's summary (`Run.summary()`) as readable HTML: status, where it lives, last metrics, the spec as
key = value rows, the report's figures, files, and any problems reading it: a pure function of the summary."""

from __future__ import annotations

import html
import math
from datetime import datetime

from workbench.gui.theme import JOB_STATE_COLOURS, state_colour

LIST_LIMIT = 8  # longer lists (confusion matrices, per-class tables) are summarised, not printed


def _flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(value, dict):
        rows: list[tuple[str, object]] = []
        for key in value:
            rows += _flatten(value[key], f"{prefix}.{key}" if prefix else str(key))
        return rows
    return [(prefix, value)]


def _format(value) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.6g}"
    if isinstance(value, list):
        if len(value) > LIST_LIMIT or any(isinstance(v, (list, dict)) for v in value):
            return f"({len(value)} items)"
        return ", ".join(_format(v) for v in value)
    if value is None:
        return "—"
    return str(value)


def _when(iso: str | None) -> str:
    if not iso:
        return "—"
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return iso


def _table(rows: list[tuple[str, str]]) -> str:
    cells = "".join(
        f"<tr><td style='padding-right:14px; color:#888'>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
        for k, v in rows
    )
    return f"<table cellspacing='0' cellpadding='1'>{cells}</table>"


def describe_run_html(summary: dict) -> str:
    status = summary.get("status") or "unknown"
    colour = state_colour(status)
    parts = [
        f"<h3 style='margin-bottom:2px'>{html.escape(summary.get('id', ''))}</h3>",
        f"<p style='margin-top:0'><b style='color:{colour}'>{html.escape(status)}</b>",
    ]
    if summary.get("message"):
        parts.append(f" — {html.escape(summary['message'])}")
    parts.append("</p>")
    owner = summary.get("owner")
    facts = [
        ("Task", summary.get("task") or "—"),
        ("Created", _when(summary.get("created"))),
        ("Updated", _when(summary.get("updated"))),
        ("Folder", summary.get("run_dir") or "—"),
    ]
    if owner:
        facts.append(("Written by", f"pid {owner.get('pid')} on {owner.get('host', '?')}"))
    parts.append(_table(facts))
    if summary.get("problems"):
        items = "".join(f"<li>{html.escape(p)}</li>" for p in summary["problems"])
        parts.append(
            f"<h4 style='color:{JOB_STATE_COLOURS['failed']}'>Problems reading this run</h4><ul>{items}</ul>"
        )
    last = summary.get("last_metrics") or {}
    if last:
        parts.append("<h4>Last metrics</h4>")
        parts.append(
            _table(
                [(name, f"{_format(value)}   (step {step})") for name, (step, value) in sorted(last.items())]
            )
        )
    report = summary.get("report")
    if isinstance(report, dict):
        shown = {k: v for k, v in report.items() if k not in ("run_dir", "status", "traceback")}
        error = shown.pop("error", None)
        if error:
            parts.append(
                f"<h4>Error</h4><p>{html.escape(str(error.get('type', 'Error')))}: "
                f"{html.escape(str(error.get('message', '')))}</p>"
            )
        rows = [(k, _format(v)) for k, v in _flatten(shown)]
        if rows:
            parts.append("<h4>Report</h4>" + _table(rows))
    if summary.get("spec"):
        parts.append("<h4>Spec</h4>" + _table([(k, _format(v)) for k, v in _flatten(summary["spec"])]))
    for title, key in (("Checkpoints", "checkpoints"), ("Artifacts", "artifacts")):
        files = summary.get(key) or []
        if files:
            parts.append(f"<h4>{title}</h4><p>{'<br>'.join(html.escape(f) for f in files)}</p>")
    return "".join(parts)
