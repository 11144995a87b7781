"""The Runs tab and the window's menus: live refresh, readable details, double-click and context menu,
a folder that cannot be opened says so, and shortcuts that live on window-wide menu actions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QAbstractButton, QApplication, QMessageBox
from test_stopping_jobs import answer_next_dialog

from workbench.gui.panels import runs_panel
from workbench.gui.panels.run_details import describe_run_html
from workbench.runs import RunStore


def _finished_train_run(workspace, status="done", **report):
    with RunStore(workspace).create_run(
        "train",
        {"epochs": 3, "model": {"name": "cnn"}, "dataset": {"name": "digits", "augment": {"flip": True}}},
        task="train.classifier",
    ) as run:
        run.log_metrics([(10, "train_loss", 0.25, 0.0), (10, "val_accuracy", 0.97, 0.0)])
        run.write_report(
            {"status": status, "epochs_completed": 3, "final": {"test_accuracy": 0.981}, **report}
        )
        run.set_status(status)
        return run.id, str(run.dir)


def _show_runs_tab(window):
    window.show_tab(window.runs_panel)


def test_runs_started_elsewhere_appear_without_refresh(fake_window, qtbot, tmp_path):
    _show_runs_tab(fake_window)
    assert fake_window.runs_panel.model.runs == []
    workspace = fake_window.workspace
    # A run made by another process (the CLI, say) while the tab is shown.
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from workbench.runs import RunStore; "
            "r = RunStore(sys.argv[1]).create_run('diag', {}, task='debug.count'); r.set_status('done'); "
            "r.close()",
            str(workspace),
        ],
        check=True,
        timeout=60,
    )
    qtbot.waitUntil(lambda: len(fake_window.runs_panel.model.runs) == 1, timeout=10_000)
    assert fake_window.runs_panel.model.runs[0]["status"] == "done"


def test_refresh_keeps_the_selection_and_does_not_reset_an_unchanged_list(fake_window, qtbot):
    run_id, _ = _finished_train_run(fake_window.workspace)
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(run_id)
    assert not panel.refresh_if_changed()
    assert panel.selected_run_id() == run_id


def test_details_are_readable_not_raw_json(fake_window, qtbot):
    run_id, run_dir = _finished_train_run(fake_window.workspace)
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(run_id)
    text = panel.details.toPlainText()
    assert "done" in text and "train_loss" in text and "0.25" in text and "(step 10)" in text
    assert "final.test_accuracy" in text and "0.981" in text
    assert "dataset.augment.flip" in text and "model.name" in text
    assert "{" not in text  # no JSON braces: key = value rows


def test_details_name_problems_and_errors():
    html_text = describe_run_html(
        {
            "id": "r1",
            "status": "failed",
            "message": "loss is NaN",
            "run_dir": "/x",
            "problems": ["Run spec /x/spec.toml is a folder, not a file"],
            "report": {"error": {"type": "JobError", "message": "loss is NaN at step 3"}},
            "last_metrics": {},
            "spec": None,
        }
    )
    assert "Problems reading this run" in html_text and "spec.toml is a folder" in html_text
    assert "JobError: loss is NaN at step 3" in html_text


def test_double_click_opens_a_training_run_in_the_training_tab(fake_window, qtbot):
    run_id, _ = _finished_train_run(fake_window.workspace)
    _show_runs_tab(fake_window)
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(run_id)
    panel.view.doubleClicked.emit(panel.view.currentIndex())
    assert fake_window.current_panel() is fake_window.training_panel
    assert fake_window.training_panel.selected_run_id() == run_id
    assert run_id in fake_window.training_panel.shown_runs()


def test_context_menu_offers_the_run_actions(fake_window, qtbot):
    done_id, _ = _finished_train_run(fake_window.workspace)
    failed_id, failed_dir = _finished_train_run(fake_window.workspace, status="failed")
    early_id, _ = _finished_train_run(fake_window.workspace, status="failed")  # failed before any checkpoint
    (Path(failed_dir) / "checkpoints" / "model.pt").write_bytes(b"")  # a checkpoint to resume from
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(early_id)
    actions = {a.text(): a for a in panel.context_menu().actions() if a.text()}
    assert not actions["Resume from last checkpoint"].isEnabled()
    panel.select_run(done_id)
    actions = {a.text(): a for a in panel.context_menu().actions() if a.text()}
    assert {
        "Open in its tab",
        "Resume from last checkpoint",
        "Show folder",
        "Copy folder path",
        "Copy summary as JSON",
        "Delete…",
    } <= set(actions)
    assert not actions["Resume from last checkpoint"].isEnabled()  # done: nothing to resume
    panel.select_run(failed_id)
    actions = {a.text(): a for a in panel.context_menu().actions() if a.text()}
    assert actions["Resume from last checkpoint"].isEnabled()
    with qtbot.waitSignal(panel.resume_requested, timeout=5000) as signal:
        actions["Resume from last checkpoint"].trigger()
    assert signal.args[0].endswith(failed_id) and signal.args[1]["epochs"] == 3
    actions["Copy folder path"].trigger()
    assert QApplication.clipboard().text().endswith(failed_id)


def test_open_folder_without_a_file_manager_shows_the_path_with_copy(fake_window, qtbot):
    run_id, run_dir = _finished_train_run(fake_window.workspace)
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(run_id)
    seen: list[str] = []

    def copy_then_close() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, copy_then_close)
            return
        seen.append(box.text())
        [copy] = [b for b in box.buttons() if b.text() == "Copy path"]
        copy.click()
        seen.append("still open" if box.isVisible() else "closed")
        box.button(QMessageBox.Close).click()

    QTimer.singleShot(0, copy_then_close)
    panel.open_button.click()  # the offscreen platform has no file manager, like a bare server
    assert "No file manager" in seen[0] and run_dir in seen[0]
    assert seen[1] == "still open"
    assert QApplication.clipboard().text() == run_dir


def test_deleting_a_live_run_from_the_runs_tab_is_refused_and_says_why(fake_window, qtbot):
    store = RunStore(fake_window.workspace)
    live = store.create_run("train", {}, task="train.classifier")  # this process owns it: a live run
    try:
        live.set_status("running")
        panel = fake_window.runs_panel
        panel.refresh()
        panel.select_run(live.id)
        seen: list[str] = []
        answer_next_dialog("Yes", seen)  # "Delete run …?"
        answer_next_dialog("OK", seen)  # "Run not deleted"
        panel.delete_button.click()
        qtbot.waitUntil(lambda: len(seen) == 2, timeout=5000)
        assert "stop it first" in seen[1]
        assert live.dir.is_dir()
    finally:
        live.close()


def test_shortcuts_are_window_wide_menu_actions_and_listed_in_help(fake_window):
    by_keys = {}
    for top in fake_window.menuBar().actions():
        for action in top.menu().actions():
            if not action.shortcut().isEmpty():
                by_keys.setdefault(action.shortcut().toString(), []).append(action.text().replace("&", ""))
    assert by_keys["Ctrl+T"] == ["New training run…"]
    assert by_keys["Ctrl+D"] == ["Choose dataset…"]
    assert by_keys["Ctrl+."] == ["Cancel job"]
    assert all(len(names) == 1 for names in by_keys.values()), by_keys  # no ambiguous shortcuts
    # No button in any tab carries the same keys (an ambiguous shortcut fires neither).
    buttons = {
        b.shortcut().toString(): b.text()
        for b in fake_window.findChildren(QAbstractButton)
        if not b.shortcut().isEmpty()
    }
    assert not set(buttons) & set(by_keys), buttons
    assert "Ctrl+Shift+T" not in by_keys
    listed = dict(fake_window.shortcut_rows())
    assert listed["Ctrl+T"] == "Training ▸ New training run…" and "Ctrl+." in listed
    menus = [a.text().replace("&", "") for a in fake_window.menuBar().actions()]
    assert "Help" in menus
    help_items = [a.text().replace("&", "") for a in fake_window.menuBar().actions()[-1].menu().actions()]
    assert "Keyboard shortcuts" in help_items and any("Read me" in t for t in help_items)


def test_menu_cancel_cancels_the_only_running_job(fake_window, qtbot):
    record = fake_window.submit_job("debug.count", {"steps": 100000, "delay": 0.01})
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(record.job_id).state == "running", timeout=10_000)
    fake_window._cancel_current_job()
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(record.job_id).state == "cancelled", timeout=10_000)
    assert QKeySequence("Ctrl+.").toString() == "Ctrl+."


def test_the_task_column_says_what_a_training_run_learns(fake_window):
    segmentation, _ = _finished_train_run(fake_window.workspace, task="segmentation")
    # a report from before tasks: the spec's task (auto)
    plain, _ = _finished_train_run(fake_window.workspace)
    with RunStore(fake_window.workspace).create_run(
        "train", {"model": {"name": "lightning:/p/m.py:Net"}}, task="train.classifier"
    ) as run:
        run.set_status("done")
        lightning = run.id
    panel = fake_window.runs_panel
    panel.refresh()
    model = panel.model
    column = [key for key, _title in runs_panel.COLUMNS].index("task")
    shown = {run["id"]: model.data(model.index(row, column)) for row, run in enumerate(model.runs)}
    assert shown[segmentation] == "segmentation" and shown[lightning] == "lightning"
    assert shown[plain] == "train.classifier"  # task=auto, no report naming it: the id, as before
    row = next(r for r, run in enumerate(model.runs) if run["id"] == segmentation)
    assert "train.classifier" in model.data(model.index(row, column), Qt.ToolTipRole)
    assert all(run["task"] == "train.classifier" for run in model.runs)  # the id itself is unchanged
