"""A job can always be stopped: restart asks first and names the jobs it stops, and a job that ignores its
cancel is offered "Force stop", which restarts the worker and marks the run cancelled on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from workbench.runs import Run


def answer_next_dialog(button_text: str, seen: list[str]) -> None:
    """Click `button_text` in the next modal dialog, as a person would, recording what it said."""

    def click() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, click)
            return
        seen.append(box.text())
        for button in box.buttons():
            if button.text().replace("&", "") == button_text:
                button.click()
                return
        raise AssertionError(f"no {button_text!r} button in {[b.text() for b in box.buttons()]}")

    QTimer.singleShot(0, click)


def _start_count(window, qtbot, **spec):
    record = window.submit_job("debug.count", {"steps": 100000, "delay": 0.01, **spec})
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).run_dir is not None, timeout=10_000)
    return window.manager.jobs.get(record.job_id)


def test_restart_with_a_running_job_asks_first_and_names_it(fake_window, qtbot):
    record = _start_count(fake_window, qtbot)
    generation = fake_window.manager._generation
    seen: list[str] = []
    answer_next_dialog("Keep running", seen)
    fake_window.restart_worker()
    assert "debug.count" in seen[0] and Path(record.run_dir).name in seen[0]
    assert fake_window.manager._generation == generation  # nothing was restarted
    assert fake_window.manager.jobs.get(record.job_id).active

    answer_next_dialog("Restart worker", seen)
    fake_window.restart_worker()
    qtbot.waitUntil(lambda: not fake_window.manager.jobs.get(record.job_id).active, timeout=10_000)
    assert fake_window.manager.jobs.get(record.job_id).error_message == "worker restarted by the user"


def test_restart_with_no_job_does_not_ask(fake_window, qtbot, monkeypatch):
    monkeypatch.setattr(QMessageBox, "exec", lambda self: pytest.fail(f"asked: {self.text()}"))
    generation = fake_window.manager._generation
    fake_window.restart_worker()
    assert fake_window.manager._generation > generation


@pytest.mark.slow
def test_a_job_that_ignores_cancel_is_force_stopped_and_its_run_marked(real_window, qtbot):
    window = real_window
    window.jobs_panel.model.cancel_grace_s = 0.5  # ten seconds in the product; the logic is the same
    record = _start_count(window, qtbot, crash_at=20, crash_mode="hang")
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).text.startswith("hanging"), timeout=30_000)
    assert not window.jobs_panel.force_button.isVisible()
    window.jobs_panel.view.selectRow(0)
    window.jobs_panel.cancel_button.click()
    qtbot.waitUntil(window.jobs_panel.force_button.isVisible, timeout=10_000)
    assert window.jobs_panel.force_button.isEnabled()
    assert "not responding to cancel" in window.jobs_panel.model.data(window.jobs_panel.model.index(0, 4))
    assert window.manager.jobs.get(record.job_id).active  # the cancel did not land: the job is hung
    seen: list[str] = []
    answer_next_dialog("Yes", seen)
    window.jobs_panel.force_button.click()
    assert "debug.count" in seen[0]
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).state == "cancelled", timeout=30_000)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=60_000)
    assert not window.jobs_panel.force_button.isVisible()
    with Run(record.run_dir, readonly=True) as run:
        summary = run.summary()
    assert summary["status"] == "cancelled" and "force-stopped" in summary["message"]
    assert summary["report"]["status"] == "cancelled"
