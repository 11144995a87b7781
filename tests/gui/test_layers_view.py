"""The Training tab's Layers view (#21 part 2) on a real run's records: a gradient heatmap of layers x steps,
a dead layer flagged with its name, a click on a cell showing its histograms against the first step, live
steps appended, and "Show on graph" asking for the statistic's overlay."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import one_json, wb
from PySide6.QtCore import QPointF, Qt
from stored_models import DEAD_NET

from workbench.gui.panels.training.layers_view import LayersView
from workbench.layer_records import SCALARS, record_paths


@pytest.fixture(scope="module")
def dead_run(tmp_path_factory):
    """A real digits run of the dead-layer model, trained by `workbench train` in a process of its own: the
    GUI's process never loads torch (and torch's triton beside QtWebEngine crashed it)."""
    folder = tmp_path_factory.mktemp("dead")
    (folder / "dead.py").write_text(DEAD_NET)
    spec = {
        "dataset": {"name": "digits"},
        "model": {"name": f"file:{folder / 'dead.py'}:DeadNet"},
        "epochs": 1,
        "batch_size": 64,
        "layer_stats_every": 5,
    }
    (folder / "spec.json").write_text(json.dumps(spec))
    result = one_json(
        wb(folder, "train", str(folder / "spec.json"), "--json", workspace=folder / "ws", timeout=300)
    )
    assert result["status"] == "done", result.get("error")
    return result["run_dir"]


def _view(qtbot) -> LayersView:
    view = LayersView()
    qtbot.addWidget(view)
    view.resize(1000, 700)
    view.show()
    return view


def test_the_heatmap_shows_every_layer_and_step_and_flags_the_dead_layer(qtbot, dead_run):
    view = _view(qtbot)
    view.show_run(dead_run)
    steps = [record["step"] for record in view.records]
    assert steps == [1, 5, 10, 15, 20]  # 23 steps: the first, then every 5th
    assert view.statistic_key() == "grad_norm" and view.log_colours.isChecked()
    matrix = view.matrix()
    assert matrix.shape == (3, 5)
    # fc2's units never pass its ReLU: nothing flows back into fc2 or fc1, and fc3 sees only zeros (only its
    # bias learns): zero weight gradients everywhere, the lowest colour, each layer named.
    assert (matrix == 0).all()
    assert "layer fc1 gets no gradient at all" in view.findings.text()
    image = view.image.image
    assert image.shape == (5, 3)  # ImageItem's (x, y): steps across, layers down
    assert view.findings.isVisible() and "layer fc2: 100% of its units are dead" in view.findings.text()
    ticks = [label for _, label in view.heatmap.getAxis("left")._tickLevels[0]]
    assert ticks == ["fc1", "fc2", "fc3"]
    view.statistic.setCurrentIndex(view.statistic.findData("dead_fraction"))
    assert not view.log_colours.isChecked()  # a share: linear colours
    dead = view.matrix()
    assert (dead[1] == 1.0).all() and np.isnan(dead[2]).all()


def test_a_click_on_a_cell_shows_its_histograms_against_the_first_step(qtbot, dead_run):
    view = _view(qtbot)
    view.show_run(dead_run)
    qtbot.waitUntil(lambda: view.heatmap.isVisible())
    # A real click on the cell of fc3 at the third recorded step (step 10).
    vb = view.heatmap.getPlotItem().vb
    scene_point = vb.mapViewToScene(QPointF(2.5, 2.5))
    widget_point = view.heatmap.mapFromScene(scene_point)
    qtbot.mouseClick(view.heatmap.viewport(), Qt.LeftButton, pos=widget_point)
    assert view.selected == (2, 2)
    assert "fc3" in view.readout.text() and "step 10" in view.readout.text()
    for kind, plot in view.histograms.items():
        curves = plot.getPlotItem().listDataItems()
        assert len(curves) == 2, kind  # this step and the first
        x, y = curves[1].getData()
        assert y.sum() > 0
    weights = view.histograms["weights"].getPlotItem().listDataItems()
    assert [item.name() for item in weights] == ["step 1 (first)", "step 10"]
    view.show_cell(0, 0)  # the first step itself: one curve
    assert len(view.histograms["weights"].getPlotItem().listDataItems()) == 1


def test_live_steps_are_appended_once_and_only_for_the_run_shown(qtbot, dead_run, tmp_path):
    view = _view(qtbot)
    paths = record_paths(dead_run)
    view.show_run(dead_run)
    assert not view.add_record_file(dead_run, paths[-1])  # read already
    view.records = view.records[:2]
    assert view.add_record_file(dead_run, paths[2]) and len(view.records) == 3
    assert not view.add_record_file(tmp_path, paths[3])  # another run's
    assert view.matrix().shape == (3, 3)
    bad = tmp_path / "step-000000099.npz"
    bad.write_bytes(b"not a zip")
    assert not view.add_record_file(dead_run, bad)  # a damaged file is refused, not fatal


def test_show_on_graph_asks_for_the_statistic_overlay(qtbot, dead_run):
    view = _view(qtbot)
    assert not view.graph_button.isEnabled()
    view.show_run(dead_run)
    with qtbot.waitSignal(view.graph_requested) as signal:
        view.graph_button.click()
    assert signal.args == [view.run_dir.name, "layers_grad_norm"]
    view.statistic.setCurrentIndex(view.statistic.findData("act_mean"))
    assert not view.graph_button.isEnabled()  # no overlay of that one


def test_no_records_is_the_empty_state(qtbot, tmp_path):
    view = _view(qtbot)
    view.show_run(tmp_path)
    assert view.records == [] and "layer_stats_every" in view.title.text()
    assert not view.graph_button.isEnabled()
    assert SCALARS[1] == "grad_norm"
