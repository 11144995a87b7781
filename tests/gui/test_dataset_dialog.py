"""The dataset dialog: typed values reach the spec's own checks unclamped, the root folder is checked before
OK, and fields a dataset does not use are greyed out with the reason and left out of its spec."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QDialog, QDialogButtonBox

from workbench.errors import SpecError
from workbench.gui.panels.data.dataset_dialog import DatasetDialog
from workbench.specs import DataSpec


@pytest.fixture
def dialog(qtbot, tmp_path):
    dialog = DatasetDialog(DataSpec(), str(tmp_path / "data"))
    qtbot.addWidget(dialog)
    return dialog


def ok_enabled(dialog) -> bool:
    return dialog.buttons.button(QDialogButtonBox.Ok).isEnabled()


def choose(dialog, name: str) -> None:
    dialog.name.setCurrentIndex(dialog.name.findData(name))


def test_a_typed_fraction_out_of_range_is_refused_not_clamped(dialog, qtbot):
    with pytest.raises(SpecError) as expected:
        DataSpec.from_dict({"val_fraction": 1.5})
    dialog.val_fraction.clear()
    qtbot.keyClicks(dialog.val_fraction, "1.5")
    assert dialog.val_fraction.text() == "1.5"  # what was typed, not 0.5
    assert (
        dialog.error.text()
        == str(expected.value)
        == "val_fraction: 1.5 is out of range; must be >= 0 and < 1"
    )
    assert not ok_enabled(dialog)
    dialog.val_fraction.clear()
    qtbot.keyClicks(dialog.val_fraction, "-0.2")
    assert "val_fraction: -0.2 is out of range" in dialog.error.text() and not ok_enabled(dialog)
    dialog.val_fraction.clear()
    qtbot.keyClicks(dialog.val_fraction, "0.25")
    assert dialog.error.text() == "" and ok_enabled(dialog)
    assert dialog.spec().val_fraction == 0.25


def test_an_imagefolder_root_must_be_an_existing_folder_of_class_folders(dialog, tmp_path):
    choose(dialog, "imagefolder")
    # Empty means the workspace's data folder, which does not exist here either.
    assert "workspace's data folder" in dialog.error.text() and "does not exist" in dialog.error.text()
    dialog.root.setText(str(tmp_path / "nowhere"))
    assert dialog.error.text().startswith(f"root: '{tmp_path / 'nowhere'}' does not exist")
    assert not ok_enabled(dialog)
    a_file = tmp_path / "list.txt"
    a_file.write_text("x")
    dialog.root.setText(str(a_file))
    assert "is a file, not a folder" in dialog.error.text() and not ok_enabled(dialog)
    images = tmp_path / "images"
    images.mkdir()
    dialog.root.setText(str(images))
    assert "has no class folders" in dialog.error.text() and not ok_enabled(dialog)
    (images / "cat").mkdir()
    dialog.root.setText(str(images) + "/")
    assert dialog.error.text() == "" and ok_enabled(dialog)
    # The folder can go between typing and OK: OK checks again and keeps the dialog open.
    (images / "cat").rmdir()
    images.rmdir()
    dialog.accept()
    assert dialog.result() != QDialog.Accepted
    assert "does not exist" in dialog.error.text() and not ok_enabled(dialog)


def test_a_torchvision_root_must_exist_unless_it_is_downloaded(dialog, tmp_path):
    choose(dialog, "mnist")
    assert ok_enabled(dialog)  # empty: the worker's own message names the files it needs
    dialog.root.setText(str(tmp_path / "mnist"))
    assert "does not exist" in dialog.error.text() and "tick Download" in dialog.error.text()
    dialog.download.setChecked(True)  # the download creates it
    assert ok_enabled(dialog), dialog.error.text()


@pytest.mark.parametrize("name", ["fake", "digits"])
def test_root_and_download_are_greyed_out_where_unused_and_left_out_of_the_spec(dialog, name):
    choose(dialog, "mnist")
    dialog.root.setText("/data/mnist")
    dialog.download.setChecked(True)
    assert dialog.root.isEnabled() and dialog.download.isEnabled() and dialog.browse.isEnabled()
    choose(dialog, name)
    for widget in (dialog.root, dialog.browse, dialog.download):
        assert not widget.isEnabled()
        assert widget.toolTip().startswith("Not used:")
    assert "no folder to read and nothing to download" in dialog.download.toolTip()
    assert ok_enabled(dialog), dialog.error.text()
    spec = dialog.spec()
    assert spec.name == name and spec.root == "" and spec.download is False
    choose(dialog, "mnist")  # the greyed-out text was kept for this
    assert dialog.spec().root == "/data/mnist" and dialog.spec().download


def test_only_fake_takes_a_size_and_imagefolder_downloads_nothing(dialog, tmp_path):
    dialog.size.setValue(77)
    (tmp_path / "data" / "dog").mkdir(parents=True)  # the workspace's data folder, one class
    choose(dialog, "imagefolder")
    assert dialog.root.isEnabled() and not dialog.download.isEnabled()
    assert "nothing to download" in dialog.download.toolTip()
    assert not dialog.size.isEnabled() and "Only the fake dataset" in dialog.size.toolTip()
    assert ok_enabled(dialog), dialog.error.text()
    assert dialog.spec().size == DataSpec().size  # not the 77 typed for a dataset that does not use it
    choose(dialog, "fake")
    assert dialog.size.isEnabled() and dialog.spec().size == 77


def test_loader_workers_round_trip_auto_and_a_count(dialog):
    assert dialog.num_workers.text() == "auto" and dialog.spec_data()["num_workers"] == "auto"
    dialog.num_workers.setValue(2)
    assert DataSpec.from_dict(dialog.spec_data()).num_workers == 2
    dialog._load(DataSpec.from_dict({"num_workers": "auto"}))
    assert dialog.num_workers.text() == "auto"


def test_the_permission_note_of_a_python_file_shows_whole(qtbot):
    """Opened on a built-in dataset (a one-line note), then switched to a Python file at the dialog's own
    size: the note saying the file's code runs with your permissions wraps and gets the height of all its
    lines."""
    dialog = DatasetDialog(DataSpec(name="digits"))
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    dialog.name.setCurrentIndex(dialog.name.findData("file:"))
    note = dialog.note
    assert "runs with your permissions" in note.text() and note.wordWrap()
    needed = note.heightForWidth(note.width())
    assert needed > note.fontMetrics().lineSpacing() * 2  # several lines at this width
    qtbot.waitUntil(lambda: note.height() >= needed, timeout=2000)
    assert note.minimumHeight() >= needed
