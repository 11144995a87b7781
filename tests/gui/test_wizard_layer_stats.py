"""The training wizard's layer-statistics interval: a field on the Device and speed page, with the spec's help
as its tooltip, and what is set there is what the spec records."""

from __future__ import annotations

from fake_worker import FAKE_DEVICES

from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.specs import TrainSpec


def test_layer_stats_every_is_set_on_the_speed_page(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    field = wizard.speed_page.form.widgets["layer_stats_every"]
    assert field.toolTip() == TrainSpec.field_help("layer_stats_every")
    assert field.value() == 50 and wizard.spec.layer_stats_every == 50
    field.setValue(0)  # 0 turns the statistics off
    assert wizard.spec.layer_stats_every == 0
    assert "layer_stats_every = 0" in wizard.spec.to_toml()
