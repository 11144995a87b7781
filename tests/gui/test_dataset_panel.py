"""The dataset panel against a fake worker that speaks the real protocol (torch-free data tasks)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QDialogButtonBox

from workbench.gui.panels.data.dataset_dialog import DatasetDialog
from workbench.gui.panels.data.thumbnails import INDEX_ROLE, LABEL_ROLE, PAGE_SIZE
from workbench.gui.settings import Settings
from workbench.specs import DataSpec


@pytest.fixture
def panel(fake_window, qtbot):
    fake_window.show_tab(fake_window.dataset_panel)
    panel = fake_window.dataset_panel
    qtbot.waitUntil(lambda: panel.info is not None and panel.model.total > 0, timeout=30_000)
    return panel


def test_loads_counts_classes_and_first_page(panel, qtbot):
    assert panel.model.total == 1500
    assert panel.class_combo.count() == 11  # "all classes" + 10
    assert "train 1,500" in panel.summary.text()
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    index = panel.model.index(7)
    assert index.data(INDEX_ROLE) == 7 and index.data(LABEL_ROLE) == 7
    assert index.data(Qt.DisplayRole) == "class 7"
    pixmap = index.data(Qt.DecorationRole)
    assert pixmap.width() == panel.zoom.value()
    assert set(panel.class_chart.bars) == {"train", "val", "test"}


def test_class_and_split_filters(panel, qtbot):
    panel.class_combo.setCurrentIndex(panel.class_combo.findData(3))
    qtbot.waitUntil(lambda: panel.model.total == 150, timeout=30_000)
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    labels = {panel.model.index(row).data(LABEL_ROLE) for row in range(20)}
    assert labels == {3}
    # The pixel value encodes the sample index: the image really is sample 13 of class 3.
    image = panel.model.image_at(1)
    assert image.pixelColor(5, 5).red() == 13
    panel.split_combo.setCurrentIndex(panel.split_combo.findData("val"))
    qtbot.waitUntil(lambda: panel.model.total == 30, timeout=30_000)
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    assert panel.model.image_at(0).pixelColor(0, 0).red() == 1  # split marker of "val"


def test_stale_replies_are_dropped(panel, qtbot):
    model = panel.model
    spec = panel.state.spec.to_dict()
    model.configure(spec, "train", 1)
    model.configure(spec, "train", 2)  # the user changed the filter before the first reply came
    qtbot.waitUntil(lambda: 0 in model.cached_pages, timeout=30_000)
    qtbot.wait(300)  # give the stale reply time to arrive, too
    assert model.total == 150
    assert {model.index(r).data(LABEL_ROLE) for r in range(10)} == {2}


def _wait_for_the_whole_layout(grid, qtbot) -> None:
    """Until the grid's scroll range stops growing: a loaded machine lays a batch out per event-loop turn,
    slowly."""
    seen = []

    def settled():
        seen.append(grid.verticalScrollBar().maximum())
        qtbot.wait(150)
        return seen[-1] > 0 and grid.verticalScrollBar().maximum() == seen[-1]

    qtbot.waitUntil(settled, timeout=20_000)


def test_only_visible_pages_are_fetched(panel, qtbot):
    panel.zoom.setValue(24)
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    # it lays items out in batches; jump only once it reached the end
    _wait_for_the_whole_layout(panel.grid, qtbot)
    panel.grid.scrollToBottom()
    last_page = (panel.model.total - 1) // PAGE_SIZE
    qtbot.waitUntil(lambda: last_page in panel.model.cached_pages, timeout=30_000)
    qtbot.wait(200)
    # Pages the view jumped over were never asked for.
    assert 3 not in panel.model.cached_pages and 3 not in panel.model.in_flight


def test_sample_view_shows_clicked_sample(panel, qtbot):
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    panel.grid.setCurrentIndex(panel.model.index(5))
    qtbot.waitUntil(lambda: (panel.sample_view.result or {}).get("index") == 5, timeout=30_000)
    view = panel.sample_view
    assert "train #5" in view.title.text() and "class 5" in view.title.text()
    assert "1×12×12" in view.details.text()
    assert len(view.histogram.getPlotItem().listDataItems()) == 1
    assert not view.reroll_button.isEnabled()  # no augmentation chosen
    assert view.image.pixmap() is not None and not view.image.pixmap().isNull()


def test_augmentation_before_after_and_reroll(panel, qtbot):
    panel.state.set_spec(DataSpec.from_dict({"augment": ["hflip"]}))
    qtbot.waitUntil(lambda: panel.info is not None and 0 in panel.model.cached_pages, timeout=30_000)
    panel.grid.setCurrentIndex(panel.model.index(2))
    qtbot.waitUntil(lambda: (panel.sample_view.result or {}).get("index") == 2, timeout=30_000)
    view = panel.sample_view
    assert view.reroll_button.isEnabled() and "hflip" in view.transform_note.text()
    before = np.asarray(view.result["image"])
    after = np.asarray(view.result["augmented"])
    assert not np.array_equal(before, after)
    old = view.result
    view.reroll_button.click()
    qtbot.waitUntil(lambda: view.result is not old, timeout=30_000)


def test_zoom_changes_thumbnail_size(panel, qtbot):
    qtbot.waitUntil(lambda: 0 in panel.model.cached_pages, timeout=30_000)
    panel.zoom.setValue(120)
    assert panel.model.index(0).data(Qt.DecorationRole).width() == 120
    assert panel.grid.iconSize().width() == 120


def test_missing_dataset_error_is_shown(panel, qtbot):
    panel.state.set_spec(DataSpec.from_dict({"name": "cifar10"}))
    qtbot.waitUntil(lambda: "could not be loaded" in panel.summary.text(), timeout=30_000)
    assert panel.error.isVisible()
    assert "CIFAR-10 files are missing" in panel.error.text()


def test_calibration_subset_goes_to_state_and_persists(panel, tmp_path):
    panel.calibration_count.setValue(512)
    panel.calibration_seed.setValue(7)
    assert (panel.state.calibration_count, panel.state.calibration_seed) == (512, 7)
    panel.window().close()
    reread = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    assert (reread.get("calibration_count"), reread.get("calibration_seed")) == (512, 7)


def test_dataset_dialog_validates_inline(qtbot):
    dialog = DatasetDialog(DataSpec(), "/tmp/ws/data")
    qtbot.addWidget(dialog)
    ok = dialog.buttons.button(QDialogButtonBox.Ok)
    assert ok.isEnabled() and dialog.error.text() == ""
    dialog.val_fraction.setValue(0.6)
    dialog.test_fraction.setValue(0.5)
    assert not ok.isEnabled() and "val_fraction" in dialog.error.text()
    dialog.test_fraction.setValue(0.1)
    dialog.image_size.setText("abc")
    assert not ok.isEnabled() and "image_size" in dialog.error.text()
    dialog.image_size.setText("32,32")
    dialog.normalize.setCurrentText("custom")
    dialog.mean.setText("0.5")
    dialog.std.setText("0")
    assert not ok.isEnabled() and "std" in dialog.error.text()
    dialog.std.setText("0.2")
    dialog.name.setCurrentIndex(dialog.name.findData("fake"))
    # hflip, p=0.5 (after the change: augmentation is per dataset)
    dialog.augment.item(1, 0).setCheckState(Qt.Checked)
    assert dialog.size.isEnabled()
    assert ok.isEnabled(), dialog.error.text()
    spec = dialog.spec()
    assert spec.name == "fake" and spec.image_size == [32, 32] and spec.val_fraction == 0.6
    assert spec.normalize == {"mean": [0.5], "std": [0.2]}
    assert spec.augment == [{"name": "hflip", "p": 0.5}]
    assert "Folder holding the dataset" in dialog.root.toolTip()


def test_dataset_choice_persists(qtbot, tmp_path, panel):
    panel.state.set_spec(DataSpec.from_dict({"name": "fake", "size": 50}))
    window = panel.window()
    window.close()
    reread = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    assert DataSpec.from_json(reread.get("dataset_spec")).size == 50


@pytest.mark.slow
def test_real_worker_shows_digits(qtbot, real_window):
    """The real worker and scikit-learn's digits: counts, thumbnails with pixels, a sample with a
    histogram."""
    window = real_window
    window.show_tab(window.dataset_panel)
    panel = window.dataset_panel
    qtbot.waitUntil(lambda: panel.info is not None and 0 in panel.model.cached_pages, timeout=60_000)
    assert panel.info["classes"] == [str(i) for i in range(10)]
    assert sum(panel.info["num_samples"].values()) == 1797
    assert panel.model.total == panel.info["num_samples"]["train"]
    image = panel.model.image_at(0)
    assert (image.width(), image.height()) == (8, 8)
    qtbot.waitUntil(lambda: panel.sample_view.result is not None, timeout=30_000)
    counts = np.asarray(panel.sample_view.result["histogram"]["counts"])
    assert counts.shape == (1, 32) and counts.sum() == 64


def test_a_new_dataset_that_fails_to_load_is_taken_back(panel, qtbot, tmp_path):
    before = panel.state.spec
    assert set(panel.class_chart.bars) == {"train", "val", "test"}
    panel.state.set_spec(DataSpec.from_dict({"name": "cifar10"}))
    qtbot.waitUntil(lambda: panel.state.spec == before and panel.info is not None, timeout=30_000)
    assert "<b>cifar10</b> could not be loaded, so <b>digits</b> is still the dataset" in panel.summary.text()
    assert "train 1,500" in panel.summary.text()  # and the dataset that stayed is shown in full
    assert panel.error.isVisible()
    assert panel.error.text().startswith("cifar10 could not be loaded: CIFAR-10 files are missing")
    assert set(panel.class_chart.bars) == {"train", "val", "test"}
    qtbot.waitUntil(lambda: panel.model.total == 1500, timeout=30_000)
    # What the window remembers is the dataset that loaded, not the one that failed.
    panel.window().close()
    reread = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    assert DataSpec.from_json(reread.get("dataset_spec")) == before
