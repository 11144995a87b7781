"""The window's side of the worker: its state on the light and the banner, its jobs in the Jobs panel and the
log, and what the user asks of it (restart, self-test, devices, cancel, force stop)."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMessageBox, QPushButton

from workbench.client import JobRecord
from workbench.gui.job_questions import confirm_stop_jobs, describe_job
from workbench.protocol import Message
from workbench.results import as_dict


class WorkerBanner(QFrame):
    """A plain-words bar over the panels when the worker is gone, with the restart right there."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("workerBanner")
        self.setStyleSheet(
            "#workerBanner { background: #fbe3e1; border: 1px solid #d0342c; border-radius: 4px; }"
            "#workerBanner QLabel { color: #5c1410; }"
        )
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.restart_button = QPushButton("Restart worker", self)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.restart_button)
        self.hide()

    def show_message(self, text: str) -> None:
        self.label.setText(text)
        self.show()


class WorkerControl(QObject):
    """Reacts to the worker's signals for `main` (a MainWindow) and carries the user's requests to it."""

    def __init__(self, main):
        super().__init__(main)
        self.main = main

    def _say(self, text: str, ms: int = 0) -> None:
        self.main.statusBar().showMessage(text, ms)

    def user_jobs(self) -> list[JobRecord]:
        return [r for r in self.main.manager.jobs.active() if not r.internal]

    # -- the user's requests ---------------------------------------------------------------------
    def run_self_test(self) -> None:
        # debug.selftest runs beside any job (the worker's query pool): it never waits behind a training run.
        record = self.main.launcher.submit_job("debug.selftest", {"steps": 200, "delay": 0.01})
        if record:
            self.main.log_panel.append("Started the worker self-test")

    def restart_worker(self) -> None:
        """Restart the worker; when it has jobs, ask first and name them (a restart stops them)."""
        jobs = self.user_jobs()
        if jobs and not confirm_stop_jobs(
            self.main, "Restart the worker?", "Restarting the worker stops", jobs, "Restart worker"
        ):
            return
        self.main.log_panel.append("Restarting the worker…", "warning")
        self.main.banner.hide()
        self.main.manager.restart(wait=False)

    def request_devices(self) -> None:
        main = self.main
        main.queries.query(
            "devices.list",
            {},
            lambda result: main.device_picker.set_devices(result["devices"]),
            lambda error: main.log_panel.append(f"Could not list devices: {error['message']}", "error"),
        )

    def cancel_job(self, job_id: str) -> None:
        manager = self.main.manager
        record = manager.jobs.get(job_id)
        manager.cancel(job_id)
        if record is not None and record.state in ("submitted", "queued"):
            self._say("Cancelled: the job leaves the queue without starting", 4000)
            return
        self.main.jobs_panel.note_cancel_requested(job_id)
        self._say("Cancel requested; the job stops at its next step", 4000)

    def cancel_current_job(self) -> None:
        if not self.main.jobs_panel.cancel_current():
            self._say("No job to cancel: select one in the Jobs panel", 5000)

    def force_stop_job(self, job_id: str) -> None:
        main = self.main
        record = main.manager.jobs.get(job_id)
        if record is None or not record.active:
            return
        others = [r for r in self.user_jobs() if r.job_id != job_id]
        question = (
            f"Force-stop {describe_job(record)}?\n\nIt has not answered its cancel, so the only way to "
            "stop it is to restart the worker. Its run is marked cancelled and can be resumed from its "
            "last checkpoint."
        )
        if others and not confirm_stop_jobs(
            main, "Force stop", question + "\n\nThe restart also stops", others, "Force stop"
        ):
            return
        if (
            not others
            and QMessageBox.question(
                main, "Force stop", question, QMessageBox.Yes | QMessageBox.No, QMessageBox.No
            )
            != QMessageBox.Yes
        ):
            return
        main.log_panel.append(f"Force-stopping {describe_job(record)} by restarting the worker", "warning")
        main.banner.hide()
        main.manager.force_stop(job_id)

    # -- what the worker tells us ----------------------------------------------------------------
    def on_state_changed(self, state: str, detail: str) -> None:
        main, log = self.main, self.main.log_panel
        main.status_light.set_state(state, detail)
        if state == "ready":
            main.banner.hide()
            log.append(f"Worker ready ({detail})" if detail else "Worker ready")
            if not main.device_picker.devices:
                self.request_devices()
            main.navigation.on_worker_ready()
        elif state == "dead":
            text = f"The worker process stopped: {detail.splitlines()[0] if detail else 'unknown reason'}."
            log.append(text, "error")
            if detail.count("\n"):
                log.append(detail, "debug")
            main.banner.show_message(
                text + " Your runs and this window's state are kept; running jobs were "
                "marked failed. Restart the worker to go on."
            )
        elif state == "unresponsive":
            log.append(
                f"The worker is not answering ({detail}); it may be busy in a long "
                "operation. Restart it if this persists.",
                "warning",
            )
        elif state == "restarting":
            main.banner.show_message(f"The worker stopped ({detail}); restarting it automatically…")
        elif state == "starting":
            pass
        else:
            log.append(f"Worker {state}" + (f": {detail}" if detail else ""), "debug")

    def on_job_changed(self, record: JobRecord) -> None:
        if record.internal:
            return  # a panel's own query (devices, thumbnails): answered through QueryRunner
        log = self.main.log_panel
        self.main.jobs_panel.update_job(record)
        if record.active:
            return
        if record.state == "done":
            log.append(f"{record.task} finished" + (f": {record.run_dir}" if record.run_dir else ""))
        elif record.state == "cancelled":
            log.append(f"{record.task} cancelled", "warning")
        else:
            log.append(f"{record.task} failed: {record.error_message}", "error")
            traceback = as_dict(record.result).get("traceback")
            if traceback:
                log.append(traceback, "debug")
        if record.run_dir:
            self.main.navigation.refresh_runs()

    def on_message(self, msg: Message) -> None:
        if msg.msg_type == "log":
            self.main.log_panel.append(msg.content.get("text", ""), msg.content.get("level", "info"))
