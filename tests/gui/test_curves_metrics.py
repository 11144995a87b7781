"""The Training tab's curves for metrics other than loss and accuracy (issue #20): a regression run's MAE or a
custom task's own metrics get a plot each, linked to the loss plot's x axis, with their train, epoch and
validation series and a readout column; a classification run adds no plot."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.gui.panels.training.curves import CurvesWidget, metric_names

RUN = "20261126-150000-train-c0ffee"


def columns(names: dict[str, np.ndarray]) -> dict:
    return {
        name: (
            np.arange(1, len(v) + 1, dtype=np.float64) * 10,
            np.asarray(v, dtype=np.float64),
            np.arange(len(v), dtype=np.float64),
        )
        for name, v in names.items()
    }


@pytest.fixture
def curves(qtbot):
    widget = CurvesWidget()
    widget.timer.stop()  # the test redraws when it chooses
    qtbot.addWidget(widget)
    widget.resize(900, 900)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def test_metric_names_leave_out_what_the_fixed_plots_show():
    names = [
        "train/loss",
        "train/acc",
        "lr",
        "train/samples_per_s",
        "epoch",
        "epoch/train_loss",
        "val/loss",
        "val/acc",
        "train/dice",
        "epoch/train_dice",
        "val/dice",
        "val/calls",
    ]
    assert metric_names(names) == ["dice", "calls"]


def test_a_custom_runs_metrics_get_plots_and_a_readout(curves, qtbot):
    classification = {
        "train/loss": [2.0, 1.0, 0.5],
        "train/acc": [0.2, 0.5, 0.8],
        "lr": [0.1] * 3,
        "val/loss": [1.2, 0.9, 0.6],
        "val/acc": [0.4, 0.6, 0.7],
    }
    curves.add_columns("classification-run", columns(classification))
    curves.redraw()
    assert set(curves.plots) == {"loss", "accuracy", "lr"}  # classification looks as before
    curves.add_columns(
        RUN,
        columns(
            {
                "train/loss": [3.0, 2.0, 1.0],
                "train/dice": [0.1, 0.3, 0.6],
                "epoch/train_dice": [0.2, 0.5, 0.6],
                "val/dice": [0.25, 0.45, 0.625],
            }
        ),
    )
    curves.redraw()
    qtbot.wait(20)
    assert "metric:dice" in curves.plots
    plot = curves.plots["metric:dice"]
    loss_view = curves.plots["loss"].getViewBox()
    assert plot.getViewBox().linkedView(loss_view.XAxis) is loss_view
    drawn = [item.getData() for item in plot.getPlotItem().listDataItems()]
    assert len(drawn) == 3  # train, train (epoch), validation
    assert any(y is not None and np.allclose(y, [0.25, 0.45, 0.625]) for _x, y in drawn)
    # Laid out above the learning rate, so the step axis stays at the bottom.
    layout = curves._layout
    assert layout.indexOf(plot) < layout.indexOf(curves.plots["lr"])
    text = curves.show_readout(30)
    assert "val/dice 0.625" in text


def test_a_run_without_accuracy_shows_no_empty_accuracy_plot(curves):
    segmentation = {
        "train/loss": [2.0, 1.0, 0.5],
        "lr": [0.1] * 3,
        "val/loss": [1.2, 0.9, 0.6],
        "val/miou": [0.4, 0.6, 0.7],
        "val/pixel_acc": [0.8, 0.9, 0.95],
    }
    assert not curves.plots["accuracy"].isHidden()  # nothing shown yet: its hint says what comes
    curves.add_columns(RUN, columns(segmentation))
    curves.redraw()
    assert curves.plots["accuracy"].isHidden()
    assert "metric:miou" in curves.plots  # its own plot
    curves.add_columns("classification-run", columns({"train/loss": [1.0], "train/acc": [0.5]}))
    curves.redraw()
    assert not curves.plots["accuracy"].isHidden()  # overlaid with a run that has it
