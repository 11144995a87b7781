"""The training wizard's dataset does not go stale (#21 part 6.3): a dataset chosen with Change dataset… that
fails to load says why in the wizard itself; augmentation and an image folder's root stay with their
dataset."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from workbench.gui.panels.data.dataset_dialog import DatasetDialog
from workbench.gui.panels.training import wizard as wizard_module
from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.specs import DataSpec


@pytest.fixture
def window(fake_window, qtbot):
    qtbot.waitUntil(lambda: bool(fake_window.device_picker.devices), timeout=10_000)
    panel = fake_window.dataset_panel
    qtbot.waitUntil(lambda: panel.info is not None, timeout=30_000)
    return fake_window


class _ChosenDialog:
    """Stands in for the Choose dataset dialog: OK on a given spec."""

    spec_given = None

    def __init__(self, spec, data_dir, parent):
        pass

    def exec(self) -> bool:
        return True

    def spec(self) -> DataSpec:
        return self.spec_given


def test_a_chosen_dataset_that_fails_to_load_says_why_in_the_wizard(window, qtbot, monkeypatch):
    before = window.dataset_state.spec
    wizard = TrainingWizard(window.dataset_state, window.device_picker.devices, "cpu", parent=window)
    qtbot.addWidget(wizard)
    page = wizard.dataset_page
    assert page.refusal.isHidden()
    monkeypatch.setattr(wizard_module, "DatasetDialog", _ChosenDialog)
    # its files are missing (the fake says so)
    _ChosenDialog.spec_given = DataSpec.from_dict({"name": "cifar10"})
    page._on_change_clicked()
    qtbot.waitUntil(lambda: not page.refusal.isHidden(), timeout=15_000)
    assert "cifar10</b> could not be loaded, so the dataset above stays" in page.refusal.text()
    assert "CIFAR-10 files are missing" in page.refusal.text()
    qtbot.waitUntil(lambda: window.dataset_state.spec == before and page.spec == before, timeout=15_000)
    assert f"<b>{before.name}</b>" in page.summary.text()
    # The status bar says the failure, and that the previous dataset is what is shown; never "digits loaded"
    # alone.
    qtbot.waitUntil(lambda: "still shown" in window.statusBar().currentMessage(), timeout=15_000)
    assert window.statusBar().currentMessage() == (
        f"Dataset cifar10 could not be loaded; the previous dataset, {before.name}, is still shown"
    )
    # A choice that loads clears the message.
    _ChosenDialog.spec_given = DataSpec.from_dict({"name": "fake"})
    page._on_change_clicked()
    assert page.refusal.isHidden()
    qtbot.waitUntil(
        lambda: window.dataset_panel.info is not None and window.dataset_panel.info["dataset"] == "fake",
        timeout=15_000,
    )
    qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "Dataset fake loaded", timeout=15_000)
    assert page.refusal.isHidden()


def _checked(dialog) -> list[str]:
    return [
        dialog.augment.item(r, 0).text()
        for r in range(dialog.augment.rowCount())
        if dialog.augment.item(r, 0).checkState() == Qt.Checked
    ]


def test_augmentation_and_an_image_folders_root_stay_with_their_dataset(qtbot, tmp_path):
    (tmp_path / "images" / "cat").mkdir(parents=True)
    spec = DataSpec.from_dict(
        {"name": "imagefolder", "root": str(tmp_path / "images"), "augment": [{"name": "hflip", "p": 0.3}]}
    )
    dialog = DatasetDialog(spec, str(tmp_path / "data"))
    qtbot.addWidget(dialog)
    assert _checked(dialog) == ["hflip"]
    dialog.name.setCurrentIndex(dialog.name.findData("mnist"))
    assert dialog.root.text() == "" and _checked(dialog) == []
    assert dialog.spec_data()["augment"] == [] and dialog.spec_data()["root"] == ""
    dialog.name.setCurrentIndex(dialog.name.findData("imagefolder"))  # back: its own settings return
    assert dialog.root.text() == str(tmp_path / "images") and _checked(dialog) == ["hflip"]
    assert dialog.spec().augment == spec.augment

    spec = DataSpec.from_dict({"name": "mnist", "root": str(tmp_path), "augment": [{"name": "rotation"}]})
    dialog = DatasetDialog(spec, str(tmp_path / "data"))
    qtbot.addWidget(dialog)
    dialog.name.setCurrentIndex(dialog.name.findData("fashion_mnist"))
    # A torchvision root may hold several datasets, so it stays; the augmentation does not.
    assert dialog.root.text() == str(tmp_path) and _checked(dialog) == []
    dialog.name.setCurrentIndex(dialog.name.findData("imagefolder"))
    assert dialog.root.text() == ""  # an MNIST folder is no image folder
    dialog.name.setCurrentIndex(dialog.name.findData("digits"))
    dialog.augment.item(0, 0).setCheckState(Qt.Checked)
    dialog.name.setCurrentIndex(dialog.name.findData("fake"))
    assert _checked(dialog) == []
