"""A double-click on one of the evaluation's mistakes opens that sample in the Data tab: its thumbnail is the
one highlighted in the grid (not the first), and the model's prediction is shown with it."""

from __future__ import annotations

from workbench.specs import TrainSpec


def test_a_mistake_opens_in_the_data_tab_highlighted_with_its_prediction(fake_window, qtbot):
    qtbot.waitUntil(lambda: bool(fake_window.device_picker.devices), timeout=10_000)
    fake_window.start_training(TrainSpec.from_dict({"epochs": 1, "lr": 0.01}))
    panel = fake_window.training_panel
    qtbot.waitUntil(lambda: len(panel.runs) == 1 and not panel.job_of_run, timeout=15_000)
    panel.select_run(next(iter(panel.runs)))
    qtbot.waitUntil(lambda: panel.evaluation.gallery.count() == 6, timeout=10_000)
    gallery = panel.evaluation.gallery
    gallery.itemActivated.emit(gallery.item(3))  # the fake's mistake #3: test sample 3, true 3, predicted 4
    data = fake_window.dataset_panel
    assert fake_window.current_panel() is data
    assert data.current_split() == "test"
    qtbot.waitUntil(
        lambda: data.grid.currentIndex().isValid() and data.grid.currentIndex().row() == 3, timeout=10_000
    )
    qtbot.waitUntil(
        lambda: data.sample_view.result is not None and data.sample_view.result["index"] == 3, timeout=10_000
    )
    title = data.sample_view.title.text()
    assert "predicted" in title and "confidence" in title and "true class" in title
    # Page 0 arriving later must not move the highlight back to the first thumbnail.
    qtbot.wait(300)
    assert data.grid.currentIndex().row() == 3 and data.sample_view.result["index"] == 3
