"""The Training tab's first run: an empty state that points a new user at one button, which trains a CNN on
the bundled digits and then gives way to the runs table and live curves."""

from __future__ import annotations

from workbench.task_ids import TRAIN_TASK


def test_empty_training_tab_offers_one_button_that_starts_a_digits_cnn(fake_window, qtbot):
    panel = fake_window.training_panel
    fake_window.show_tab(panel)
    assert panel.showing_empty_state
    assert panel.quick_start_button.isVisible()
    assert "digits" in panel.quick_start_button.text() and "10 s" in panel.quick_start_button.text()
    panel.quick_start_button.click()
    jobs = [r for r in fake_window.manager.jobs.all() if r.task == TRAIN_TASK]
    assert len(jobs) == 1
    spec = jobs[0].spec
    assert spec["model"]["name"] == "cnn" and spec["dataset"]["name"] == "digits" and spec["epochs"] == 5
    qtbot.waitUntil(lambda: not panel.showing_empty_state, timeout=15_000)
    assert panel.table.rowCount() == 1 and panel.curves.isVisible()


def test_a_workspace_with_runs_opens_on_the_runs_not_the_empty_state(fake_window, qtbot):
    from workbench.runs import RunStore

    with RunStore(fake_window.workspace).create_run("train", {"epochs": 1}, task="train.classifier") as run:
        run.set_status("done")
    panel = fake_window.training_panel
    panel.refresh()
    assert not panel.showing_empty_state
    assert panel.table.rowCount() == 1


def test_train_again_opens_the_wizard_on_the_selected_runs_spec(fake_window, qtbot, monkeypatch):
    from workbench.gui.panels.training import wizard as wizards
    from workbench.runs import RunStore

    spec = {"epochs": 7, "lr": 0.02, "model": {"name": "mlp"}, "dataset": {"name": "digits"}}
    with RunStore(fake_window.workspace).create_run("train", spec, task="train.classifier") as run:
        run.set_status("done")
    panel = fake_window.training_panel
    panel.refresh()
    panel.select_run(run.id)
    assert panel.again_button.isEnabled()
    opened = []

    class Recorder(wizards.TrainingWizard):
        def exec(self):
            opened.append(self)
            return 0

    monkeypatch.setattr(wizards, "TrainingWizard", Recorder)
    panel.again_button.click()
    (wizard,) = opened
    built = wizard.rebuild()
    assert built.epochs == 7 and built.lr == 0.02 and built.model.name == "mlp"


def _two_runs(fake_window):
    from workbench.runs import RunStore

    ids = []
    for model in ("cnn", "mlp"):
        spec = {"epochs": 2, "model": {"name": model}, "dataset": {"name": "digits"}}
        with RunStore(fake_window.workspace).create_run("train", spec, task="train.classifier") as run:
            run.log_metrics([(s, "train/loss", 1.0 / (s + 1), 0.0) for s in range(5)])
            run.set_status("done")
            ids.append(run.id)
    fake_window.training_panel.refresh()
    return ids


def test_clicking_a_row_keeps_the_runs_ticked_for_overlay(fake_window, qtbot):
    first, second = _two_runs(fake_window)
    panel = fake_window.training_panel
    panel.set_shown(first, True)
    panel.set_shown(second, True)
    panel.select_run(first)
    panel.select_run(second)
    assert set(panel.shown_runs()) == {first, second}


def test_the_legend_names_runs_by_model_dataset_and_id_tail(fake_window, qtbot):
    first, _ = _two_runs(fake_window)
    panel = fake_window.training_panel
    panel.set_shown(first, True)
    label = panel.curves.label(first)
    assert "cnn" in label and "digits" in label and first[-6:] in label
