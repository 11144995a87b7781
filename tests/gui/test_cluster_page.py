"""Run on a cluster: the page follows its fields in the command and the script, copies them, saves the spec
and the script side by side, and opens from the training wizard with the wizard's spec."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from workbench.gui.panels.training.cluster_page import ClusterPage
from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.specs import TrainSpec

RUN_ID = "cluster-20261123-101500-abc123"


@pytest.fixture
def page(qtbot, tmp_path):
    page = ClusterPage(TrainSpec(epochs=7, device="cuda"), tmp_path / "shared ws", run_id=RUN_ID)
    qtbot.addWidget(page)
    page.show()
    return page


def argv(page) -> list[str]:
    return shlex.split(page.command_box.toPlainText())


def test_the_command_follows_the_fields(page, tmp_path):
    workspace = str(tmp_path / "shared ws")
    assert page.folder.text() == str(Path(workspace) / "cluster" / RUN_ID)
    words = argv(page)
    assert words[:3] == ["torchrun", "--nnodes=2", "--nproc-per-node=1"]
    assert words[words.index("train") + 1] == str(Path(workspace) / "cluster" / RUN_ID / "spec.toml")
    assert words[words.index("--workspace") + 1] == workspace
    page.nodes.setValue(16)
    page.nproc.setValue(4)
    page.restarts.setValue(0)
    page.endpoint.setText("head01:29400")
    page.partition.setText("a100")
    page.time.setText("1-00:00:00")
    words = argv(page)
    assert {"--nnodes=16", "--nproc-per-node=4", "--max-restarts=0", "--rdzv-endpoint=head01:29400"} <= set(
        words
    )
    script = page.script_box.toPlainText()
    for line in (
        "#SBATCH --nodes=16",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=a100",
        "#SBATCH --time=1-00:00:00",
    ):
        assert line in script.splitlines()
    page.run_id.setText("my-run")  # the folder follows the run id until it is edited by hand
    assert page.folder.text() == str(Path(workspace) / "cluster" / "my-run")
    assert "--run-id my-run" in page.command_box.toPlainText()
    page.folder.clear()
    page.folder.textEdited.emit("")
    page.folder.setText("/elsewhere")
    page.run_id.setText("other")
    assert page.folder.text() == "/elsewhere"
    assert argv(page)[argv(page).index("train") + 1] == "/elsewhere/spec.toml"
    assert page.note.isHidden()  # trains on cuda: no warning


def test_a_bad_field_is_named_and_nothing_can_be_copied(page):
    page.time.setText("4 hours")
    assert page.error.isVisible() and "time limit" in page.error.text()
    assert page.command_box.toPlainText() == "" and not page.copy_command.isEnabled()
    assert not page.save_button.isEnabled()
    page.time.setText("04:00:00")
    assert page.error.isHidden() and page.copy_command.isEnabled()


def test_copy_puts_the_command_and_the_script_on_the_clipboard(page, qtbot):
    qtbot.mouseClick(page.copy_command, Qt.LeftButton)
    assert QGuiApplication.clipboard().text() == page.command_box.toPlainText() != ""
    qtbot.mouseClick(page.copy_script, Qt.LeftButton)
    assert QGuiApplication.clipboard().text() == page.script_box.toPlainText()
    assert QGuiApplication.clipboard().text().startswith("#!/bin/bash")


def test_save_to_writes_the_spec_and_the_script_that_names_it(page, tmp_path):
    folder = tmp_path / "out dir"
    spec_file, script_file = page.save_to(folder)
    assert (spec_file, script_file) == (folder / "spec.toml", folder / "train.sbatch")
    spec = TrainSpec.from_toml(spec_file.read_text(encoding="utf-8"))
    assert spec == page.spec and spec.epochs == 7
    script = script_file.read_text(encoding="utf-8")
    assert script == page.script_box.toPlainText()
    srun = shlex.split(script[script.index("srun ") :].replace("\\\n", " "))
    assert srun[srun.index("train") + 1] == str(spec_file)  # the command names the spec where it was saved
    assert argv(page)[argv(page).index("train") + 1] == str(spec_file)
    assert str(spec_file) in page.saved.text()


def test_a_cpu_spec_is_flagged(qtbot, tmp_path):
    page = ClusterPage(TrainSpec(device="cpu"), tmp_path)
    qtbot.addWidget(page)
    page.show()
    assert page.note.isVisible() and "CPU" in page.note.text()
    assert page.run_id.text().startswith("cluster-")


def test_the_wizard_opens_it_with_its_spec(qtbot, tmp_path):
    wizard = TrainingWizard(
        DatasetState(),
        FAKE_DEVICES,
        "cpu",
        start=TrainSpec(epochs=3, lr=0.02),
        data_dir=str(tmp_path / "ws" / "data"),
    )
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.restart()
    while wizard.currentPage() is not wizard.review_page:
        wizard.next()
    button = wizard.review_page.cluster
    assert button.isVisible() and button.isEnabled()
    wizard.hyper_page.form.widgets["lr"].setText("0.05")  # an edit on the way is in the page's spec
    qtbot.mouseClick(button, Qt.LeftButton)
    page = wizard.cluster_page
    assert isinstance(page, ClusterPage) and page.isVisible()
    assert page.spec == wizard.spec and page.spec.epochs == 3 and page.spec.lr == 0.05
    assert page.workspace.text() == str(tmp_path / "ws")
    assert wizard.isVisible() and wizard.currentPage() is wizard.review_page  # Start is still the wizard's
    wizard.hyper_page.form.widgets["lr"].setText("-1")
    assert not button.isEnabled()
