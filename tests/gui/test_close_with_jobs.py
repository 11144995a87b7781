"""Closing the window (or File ▸ Quit) while jobs run asks first, names the jobs, and offers to stop them or
cancel the close; a window attached to a worker started elsewhere may also leave that worker's jobs
running."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fake_worker import FakeWorker
from PySide6.QtWidgets import QApplication, QMessageBox

from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.specs import TrainSpec


@pytest.fixture
def attached(qtbot, tmp_path, settings):
    """(window, fake worker): the window attached to a worker it did not launch, as with `--connect`.

    Not given to qtbot: pytest-qt closes its widgets before fixtures end, and a close with a job running
    would ask; this teardown stops the jobs first.
    """
    worker = FakeWorker(tmp_path)
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    window = MainWindow(manager, tmp_path / "workspace", settings)
    window.show()
    manager.start(wait=False)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=10_000)
    yield window, worker
    if getattr(window, "close_question", None) is not None:
        _answer(window, "Cancel")
    for record in window._user_jobs():
        manager.cancel(record.job_id)
    # A window that left its jobs running has no client any more: nothing to wait for.
    qtbot.waitUntil(lambda: not window._user_jobs() or manager.client is None, timeout=10_000)
    window.close()
    window.deleteLater()
    worker.stop()


@pytest.fixture
def local(attached):
    """The same, as if the window had launched its worker (the fake one runs in this process, not a child)."""
    window, worker = attached
    window.manager.attach_only = False
    return window, worker


def _start_count(window, qtbot):
    record = window.submit_job("debug.count", {"steps": 100000, "delay": 0.01})
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).run_dir is not None, timeout=10_000)
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).text.startswith("step"), timeout=10_000)
    return window.manager.jobs.get(record.job_id)


def _buttons(box: QMessageBox) -> list[str]:
    return [b.text().replace("&", "") for b in box.buttons()]


def _answer(window, button_text: str) -> None:
    """Click `button_text` in the window's close question, as a person would."""
    box = window.close_question
    assert isinstance(box, QMessageBox) and box.isVisible()
    button = next((b for b in box.buttons() if b.text().replace("&", "") == button_text), None)
    assert button is not None, f"no {button_text!r} button in {_buttons(box)}"
    button.click()


def test_closing_with_a_running_job_asks_and_names_it_and_cancel_keeps_all(local, qtbot):
    window, worker = local
    record = _start_count(window, qtbot)
    window.close()
    assert window.isVisible()  # not closed yet: it asked
    box = window.close_question
    assert box is not None and box.isVisible()
    text = box.text()
    assert "1 job is running" in text and "debug.count" in text and Path(record.run_dir).name in text
    assert "step " in text  # its progress, as the Jobs panel shows it
    assert "Stop it and close?" in text  # one job: "it", not "them"
    # The window launched this worker: closing must stop it, so there is nothing to leave running.
    assert sorted(_buttons(box)) == ["Cancel", "Stop jobs and close"]
    assert box.defaultButton().text() == "Cancel"  # Enter keeps the jobs

    window.close()  # asking again while the question is open shows the same question, not a second one
    assert window.close_question is box

    _answer(window, "Cancel")
    assert window.isVisible() and window.close_question is None
    assert window.manager.state == "ready"
    assert window.manager.jobs.get(record.job_id).active
    assert [j["job_id"] for j in worker.kernel.running_jobs()] == [record.job_id]


def test_stop_jobs_and_close_stops_the_jobs_and_the_worker(local, qtbot):
    window, worker = local
    _start_count(window, qtbot)
    window.close()
    _answer(window, "Stop jobs and close")
    assert not window.isVisible()
    assert window.manager.state == "stopped"
    qtbot.waitUntil(
        lambda: worker.kernel._shutdown.is_set() and not worker.kernel.running_jobs(), timeout=10_000
    )


def test_an_attached_worker_can_be_left_running(attached, qtbot):
    window, worker = attached
    record = _start_count(window, qtbot)
    window.close()
    box = window.close_question
    assert box is not None
    assert sorted(_buttons(box)) == ["Cancel", "Leave running", "Stop jobs and close"]
    assert "Leave running" in box.text()  # says what the choice does

    _answer(window, "Leave running")
    assert not window.isVisible()
    assert not worker.kernel._shutdown.is_set()  # no shutdown request was sent
    assert [j["job_id"] for j in worker.kernel.running_jobs()] == [record.job_id]
    # The job goes on: another client attaching to the same worker sees its progress keep coming.
    seen = threading.Event()
    other = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    other.add_listener(
        lambda kind, payload: (
            kind == "message"
            and payload.msg_type == "progress"
            and payload.parent_id == record.job_id
            and seen.set()
        )
    )
    try:
        assert other.start(wait=True)
        qtbot.waitUntil(seen.is_set, timeout=10_000)
    finally:
        other.shutdown()  # this one does stop the worker (and its job): the test is over


def test_stop_jobs_and_close_on_an_attached_worker_stops_them(attached, qtbot):
    window, worker = attached
    _start_count(window, qtbot)
    window.close()
    _answer(window, "Stop jobs and close")
    assert not window.isVisible()
    qtbot.waitUntil(
        lambda: worker.kernel._shutdown.is_set() and not worker.kernel.running_jobs(), timeout=10_000
    )


def test_quit_asks_the_same_question_naming_every_job(local, qtbot):
    window, _worker = local
    # the fake trainer's seed is its per-step delay (ms)
    spec = TrainSpec.from_dict({"epochs": 40, "seed": 50})
    train = window.submit_job("train.classifier", spec.to_dict())
    qtbot.waitUntil(lambda: window.manager.jobs.get(train.job_id).text.startswith("epoch"), timeout=10_000)
    # waits behind the training run
    count = window.submit_job("debug.count", {"steps": 100000, "delay": 0.01})
    qtbot.waitUntil(lambda: window.manager.jobs.get(count.job_id).state == "queued", timeout=10_000)
    file_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&File")
    quit_action = next(a for a in file_menu.actions() if a.text() == "&Quit")
    assert quit_action.shortcut().toString() == "Ctrl+Q"
    quit_action.trigger()
    assert window.isVisible() and window.close_question is not None
    text = window.close_question.text()
    assert "2 jobs are running or waiting" in text and "debug.count: queued" in text
    assert "train.classifier" in text and "/40" in text  # "epoch 1/40": how far the training run is
    _answer(window, "Cancel")
    assert window.isVisible()


def test_closing_with_no_job_running_does_not_ask(local, qtbot, monkeypatch):
    window, _worker = local
    done = window.submit_job("debug.count", {"steps": 3, "delay": 0})
    qtbot.waitUntil(lambda: window.manager.jobs.get(done.job_id).state == "done", timeout=10_000)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: pytest.fail(f"asked: {self.text()}"))
    monkeypatch.setattr(QMessageBox, "open", lambda self: pytest.fail(f"asked: {self.text()}"))
    # What WORKBENCH_EXIT_AFTER_MS does after a launch in CI (app.py): it must quit without a prompt.
    QApplication.closeAllWindows()
    assert not window.isVisible() and window.close_question is None
    assert window.manager.state == "stopped"
