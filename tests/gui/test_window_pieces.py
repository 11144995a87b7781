"""The window's pieces working together: a workspace change reaches the built tabs and leaves the others
unbuilt, and the Training and Jobs menus say why when there is nothing selected to act on."""

from __future__ import annotations

from pathlib import Path


def _menu_action(window, menu_text: str, action_text: str):
    menu = next(a.menu() for a in window.menuBar().actions() if a.text() == menu_text)
    return next(a for a in menu.actions() if a.text() == action_text)


def test_a_new_workspace_reaches_the_built_tabs_and_the_queries_only(fake_window, tmp_path):
    window = fake_window
    window.show_tab(window.runs_panel)  # builds the Runs tab; Graph, Quantization and Export stay unbuilt
    other = tmp_path / "other workspace"
    window.set_workspace(other)
    assert window.workspace == other.resolve()
    assert window.settings.get("workspace") == str(window.workspace)
    assert window.queries.workspace == window.workspace
    assert window.runs_panel.store.workspace == window.workspace
    assert window.statusBar().currentMessage() == f"Workspace: {window.workspace}"
    assert not window.navigation.graph_tab.is_built and not window.navigation.export_tab.is_built


def test_stop_and_resume_with_no_run_selected_say_so(fake_window, qtbot):
    window = fake_window
    _menu_action(window, "&Training", "&Stop selected run").trigger()
    assert window.statusBar().currentMessage() == "Select a running run in the Training tab to stop it"
    _menu_action(window, "&Training", "&Resume selected run").trigger()
    assert "Select a stopped, failed or interrupted run" in window.statusBar().currentMessage()


def test_cancel_job_with_no_job_says_so(fake_window):
    _menu_action(fake_window, "&Jobs", "&Cancel job").trigger()
    assert fake_window.statusBar().currentMessage() == "No job to cancel: select one in the Jobs panel"


def test_the_jobs_panel_open_run_selects_the_run_in_the_runs_tab(fake_window, qtbot):
    window = fake_window
    record = window.submit_job("debug.count", {"steps": 2, "delay": 0})
    qtbot.waitUntil(lambda: window.manager.jobs.get(record.job_id).state == "done", timeout=15_000)
    run_dir = window.manager.jobs.get(record.job_id).run_dir
    window.jobs_panel.open_run_requested.emit(run_dir)
    assert window.current_panel() is window.runs_panel
    assert window.runs_panel.selected_run_id() == Path(run_dir).name
