"""Closing the window with jobs unfinished: the question is asked without blocking, the close is redone once
it is answered, and the worker is stopped or, when the window only attached to it, left running."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QMessageBox

from workbench.client import JobRecord
from workbench.gui.job_questions import CANCEL_CLOSE, LEAVE_RUNNING, STOP_AND_CLOSE, close_question


class CloseGuard(QObject):
    """Decides, for `main` (a MainWindow), whether a close may go ahead and what becomes of the worker."""

    def __init__(self, main):
        super().__init__(main)
        self.main = main
        self.answer: str | None = None  # how the user answered the close question, once they have
        self.question: QMessageBox | None = None  # the question, while it is open

    def must_wait(self) -> bool:
        """True when the close must wait for the user's answer (the question is then open)."""
        if self.main._quitting or self.answer is not None:
            return False
        jobs = self._jobs_a_close_would_stop()
        if not jobs:
            return False
        # Asked without blocking: the close is refused now and redone once the user has answered.
        self._ask(jobs)
        return True

    def close_stopping_jobs(self) -> None:
        """Close without asking, stopping whatever runs (as "Stop jobs and close" would)."""
        self.answer = STOP_AND_CLOSE
        self.main.close()

    def let_go_of_worker(self) -> None:
        """Shut the worker down, or only disconnect from it when the user chose to leave it running:
        WorkerManager.shutdown() would send it a shutdown request, which cancels its jobs."""
        if self.answer == LEAVE_RUNNING:
            self.main.manager.detach()
        else:
            self.main.manager.shutdown()

    def _jobs_a_close_would_stop(self) -> list[JobRecord]:
        # A worker that is dead or stopped has no jobs left to stop: its jobs were already marked failed.
        manager = self.main.manager
        return self.main.worker_control.user_jobs() if manager.state in ("ready", "unresponsive") else []

    def _worker_elsewhere(self) -> str:
        """How to name the worker when this window attached to it rather than launching it; else ''."""
        manager = self.main.manager
        if not manager.attach_only:
            return ""  # our own child: it cannot outlive the window (it watches our pid)
        conn = getattr(manager.client, "conn", None)
        if conn is not None and conn.needs_curve:  # a network address: another machine
            return f"the worker at {conn.ip}"
        return "a worker started outside this window"

    def _ask(self, jobs: list[JobRecord]) -> None:
        if self.question is not None:  # closed again while asking: the same question, not a second one
            self.question.raise_()
            self.question.activateWindow()
            return
        box = self.question = close_question(self.main, jobs, self._worker_elsewhere())
        box.finished.connect(lambda _result: self._on_answered(box))
        box.open()

    def _on_answered(self, box: QMessageBox) -> None:
        clicked = box.clickedButton()
        answer = clicked.objectName() if clicked is not None else CANCEL_CLOSE
        self.question = None
        box.deleteLater()
        if answer in (STOP_AND_CLOSE, LEAVE_RUNNING):
            self.answer = answer
            self.main.close()
