"""The training wizard's TensorBoard checkbox: off by default, with the spec's help as its tooltip, and
ticking it puts tensorboard = true into the spec the wizard builds."""

from __future__ import annotations

from fake_worker import FAKE_DEVICES
from PySide6.QtWidgets import QCheckBox

from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.specs import TrainSpec


def test_the_tensorboard_checkbox_sets_the_spec(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    box = wizard.hyper_page.form.widgets["tensorboard"]
    assert isinstance(box, QCheckBox) and not box.isChecked() and wizard.spec.tensorboard is False
    assert "torch-workbench[tensorboard]" in TrainSpec.field_help("tensorboard")
    box.setChecked(True)
    assert wizard.spec.tensorboard is True
    assert "tensorboard = true" in wizard.spec.to_toml()
