"""A run that failed before its first step (#21 part 6.4): the Training tab says why above its panes, and
offers Edit and retry (the wizard on its spec) rather than a Resume with nothing to resume from."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.specs import TrainSpec


@pytest.fixture
def window(fake_window, qtbot):
    qtbot.waitUntil(lambda: bool(fake_window.device_picker.devices), timeout=10_000)
    return fake_window


def test_a_run_failing_before_its_first_step_says_why_and_offers_edit_and_retry(window, qtbot, monkeypatch):
    panel = window.training_panel
    window.start_training(TrainSpec.from_dict({"model": {"name": "file:/tmp/broken.py:Net"}, "epochs": 2}))
    qtbot.waitUntil(lambda: len(panel.runs) == 1 and not panel.job_of_run, timeout=10_000)
    run_id = next(iter(panel.runs))
    assert panel.runs[run_id]["status"] == "failed"
    panel.select_run(run_id)
    assert panel.failure.isVisibleTo(panel)
    text = panel.failure.text()
    assert text.startswith("This run failed before its first step: ") and "SyntaxError" in text
    assert "Edit and retry" in text
    assert "the run failed" in panel.evaluation.title.text()
    button = panel.resume_button
    assert (
        button.text() == "Edit and retry…" and button.isEnabled() and "nothing to resume" in button.toolTip()
    )
    assert not panel.resume_selected()  # the menu's Resume does not resume it either

    opened = []
    monkeypatch.setattr(TrainingWizard, "exec", lambda self: opened.append(self) or 0)
    with qtbot.waitSignal(panel.train_again_requested, timeout=5000) as signal:
        qtbot.mouseClick(button, Qt.LeftButton)
    assert signal.args[0]["model"]["name"] == "file:/tmp/broken.py:Net"
    assert len(opened) == 1 and opened[0].model_page.model_name() == "file:/tmp/broken.py:Net"
    assert len(panel.runs) == 1  # nothing resumed, nothing started

    # A run that did not fail: no banner, and a stopped one keeps its Resume.
    window.start_training(TrainSpec.from_dict({"epochs": 1}))
    qtbot.waitUntil(lambda: len(panel.runs) == 2 and not panel.job_of_run, timeout=10_000)
    done = next(r for r in panel.runs if r != run_id)
    panel.select_run(done)
    assert not panel.failure.isVisibleTo(panel) and panel.resume_button.text() == "Resume"
