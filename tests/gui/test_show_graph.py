"""A run's graph is one click away from the Training and Runs tabs: it builds in the Graph tab (fake
worker)."""

from __future__ import annotations

from workbench.runs import RunStore


def _train_run(window) -> str:
    spec = {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}}
    with RunStore(window.workspace).create_run("train", spec, task="train.classifier") as run:
        run.set_status("done")
        return run.id


def _graph_jobs(window):
    return [r for r in window.manager.jobs.all() if r.task == "graph.build"]


def test_the_training_tabs_graph_button_builds_the_runs_graph(fake_window, qtbot, monkeypatch):
    run_id = _train_run(fake_window)
    panel = fake_window.training_panel
    panel.refresh()
    panel.select_run(run_id)
    assert panel.graph_button.isEnabled()
    panel.graph_button.click()
    assert fake_window.current_panel() is fake_window.graph_panel
    (job,) = _graph_jobs(fake_window)
    assert job.spec["source"]["run"] == run_id


def test_the_runs_tabs_menu_shows_a_training_runs_graph(fake_window, qtbot):
    run_id = _train_run(fake_window)
    panel = fake_window.runs_panel
    panel.refresh()
    panel.select_run(run_id)
    actions = {a.text(): a for a in panel.context_menu().actions() if a.text()}
    assert actions["Show graph"].isEnabled()
    actions["Show graph"].trigger()
    assert fake_window.current_panel() is fake_window.graph_panel
    assert [j.spec["source"]["run"] for j in _graph_jobs(fake_window)] == [run_id]
