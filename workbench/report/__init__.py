"""One self-contained HTML report per model: train → quantize → export → benchmark.

`build_report(workspace, run)` returns the page; `write_report(workspace, run, output)` writes it atomically
(by default to `<training run>/artifacts/report.html`). No torch, no Qt: the GUI and the command line both
call it, and it only reads runs.
"""

from __future__ import annotations

from pathlib import Path

from workbench.errors import JobError, UsageError
from workbench.report.collect import ModelStory, RunRecord, collect
from workbench.report.render import render_html
from workbench.runs import atomic_write_text

__all__ = [
    "ModelStory",
    "RunRecord",
    "build_report",
    "collect",
    "default_output",
    "render_html",
    "write_report",
]

REPORT_NAME = "report.html"


def build_report(workspace: str | Path, run_ref: str) -> str:
    """The HTML report of the training run `run_ref` names (an id, a unique id prefix or its folder; a
    quantize, export or bench run stands for the training run behind it). UsageError when there is no such
    run."""
    return render_html(collect(workspace, run_ref))


def default_output(story: ModelStory) -> Path:
    return story.train.dir / "artifacts" / REPORT_NAME


def write_report(workspace: str | Path, run_ref: str, output: str | Path | None = None) -> Path:
    """Write the report (atomically: a reader never sees half a page) and return where it went. `output` may
    be a file or an existing folder (the file is then `<run id>-report.html` in it); default: the training
    run's artifacts/report.html."""
    return write_story(collect(workspace, run_ref), output)


def write_story(story: ModelStory, output: str | Path | None = None) -> Path:
    if output is None or str(output) == "":
        path = default_output(story)
    else:
        path = Path(output).expanduser()
        if path.is_dir():
            path = path / f"{story.train.id}-report.html"
    path = path.absolute()
    if path.suffix.lower() not in (".html", ".htm"):
        raise UsageError(f"--output {path}: the report is an HTML page; give a file name ending in .html")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, render_html(story))
    except OSError as exc:
        raise JobError(f"Cannot write the report to {path}: {exc.strerror or exc}") from None
    return path
