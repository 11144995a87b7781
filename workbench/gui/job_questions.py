"""The questions the window asks before an action that stops jobs (a restart, a force stop, a close): each
names the jobs it would stop, and its default answer keeps them running."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QMessageBox

from workbench.client import JobRecord
from workbench.gui.window_chrome import WINDOW_TITLE

# The answers to the close question.
STOP_AND_CLOSE, LEAVE_RUNNING, CANCEL_CLOSE = "stop", "leave", "cancel"


def describe_job(record: JobRecord) -> str:
    """One line naming a job for a question the user must answer: its task, run and progress."""
    where = f" (run {Path(record.run_dir).name})" if record.run_dir else ""
    # "epoch 3/40": what the Jobs panel shows
    text = f", {record.text}" if record.text and record.active else ""
    progress = f", {record.fraction:.0%} done" if record.fraction is not None else ""
    return f"{record.task}{where}: {record.state}{text}{progress}"


def job_lines(jobs: list[JobRecord]) -> str:
    return "\n".join(f"  • {describe_job(r)}" for r in jobs[:8]) + (
        f"\n  … and {len(jobs) - 8} more" if len(jobs) > 8 else ""
    )


def confirm_stop_jobs(parent, title: str, lead: str, jobs: list[JobRecord], action: str) -> bool:
    """Ask before an action that stops `jobs`, naming each; the default answer keeps them running."""
    names = job_lines(jobs)
    box = QMessageBox(
        QMessageBox.Warning,
        title,
        f"{lead} {'this job' if len(jobs) == 1 else f'these {len(jobs)} jobs'}:\n{names}\n\n"
        "A stopped run is marked on disk; a training run can be resumed from its last checkpoint.",
        parent=parent,
    )
    go = box.addButton(action, QMessageBox.DestructiveRole)
    keep = box.addButton("Keep running", QMessageBox.RejectRole)
    box.setDefaultButton(keep)
    box.exec()
    return box.clickedButton() is go


def close_question(parent, jobs: list[JobRecord], worker_elsewhere: str = "") -> QMessageBox:
    """The question asked before closing with `jobs` unfinished, naming each; Cancel is the default.

    With `worker_elsewhere` (how to name a worker this window attached to rather than launched) it also
    offers "Leave running": close only the window, and leave that worker and its jobs going.
    """
    waiting = any(r.state != "running" for r in jobs)
    verb = "running or waiting" if waiting else "running"
    one = len(jobs) == 1
    count = "1 job is" if one else f"{len(jobs)} jobs are"
    them, they = ("it", "It runs") if one else ("them", "They run")
    text = f"{count} {verb}:\n{job_lines(jobs)}\n\n"
    if worker_elsewhere:
        text += (
            f'{they} on {worker_elsewhere}, which this window did not start. "Leave running" closes only '
            f'the window; the worker goes on with {them}. "Stop jobs and close" stops {them} and the worker.'
            "\n\nA stopped training run can be resumed from its last checkpoint."
        )
    else:
        text += f"A stopped training run can be resumed from its last checkpoint.\n\nStop {them} and close?"
    box = QMessageBox(QMessageBox.Warning, f"Close {WINDOW_TITLE}?", text, parent=parent)
    box.addButton("Stop jobs and close", QMessageBox.DestructiveRole).setObjectName(STOP_AND_CLOSE)
    if worker_elsewhere:
        box.addButton("Leave running", QMessageBox.AcceptRole).setObjectName(LEAVE_RUNNING)
    cancel = box.addButton("Cancel", QMessageBox.RejectRole)
    cancel.setObjectName(CANCEL_CLOSE)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    return box
