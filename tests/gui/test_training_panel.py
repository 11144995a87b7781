"""The training wizard and panel against a fake worker whose train.classifier speaks the real metric names."""

from __future__ import annotations

import numpy as np
import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWizard

from workbench.gui.metric_buffers import MetricSeries, RunMetrics, ema
from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.state import DatasetState
from workbench.specs import TrainSpec


@pytest.fixture
def window(fake_window, qtbot):
    qtbot.waitUntil(lambda: bool(fake_window.device_picker.devices), timeout=10_000)
    return fake_window


def test_wizard_builds_the_expected_spec(qtbot):
    state = DatasetState()
    wizard = TrainingWizard(state, FAKE_DEVICES, "cpu", num_classes=10)
    qtbot.addWidget(wizard)
    wizard.model_page.name.setCurrentText("mlp")
    hyper = wizard.hyper_page.form
    hyper.widgets["epochs"].setValue(3)
    hyper.widgets["lr"].setText("3e-4")
    hyper.set_value("optimizer", "sgd")
    hyper.set_value("scheduler", "cosine")
    speed = wizard.speed_page
    speed.amp.setCurrentIndex(speed.amp.findData("bf16"))
    wizard.restart()
    for _ in range(4):
        wizard.next()
    assert wizard.currentPage() is wizard.review_page
    spec = wizard.spec
    assert spec == TrainSpec.from_dict(
        {
            "model": {"name": "mlp", "num_classes": 10},
            "epochs": 3,
            "lr": 3e-4,
            "optimizer": "sgd",
            "scheduler": "cosine",
            "amp": "bf16",
            "device": "cpu",
        }
    )
    assert 'optimizer = "sgd"' in wizard.review_page.text.toPlainText()
    assert wizard.button(QWizard.FinishButton).isEnabled()


def test_wizard_greys_out_what_the_device_cannot_do(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    speed = wizard.speed_page
    fp16 = speed.amp.findData("fp16")
    assert not speed.amp.model().item(fp16).isEnabled()  # the fake CPU has no fp16 autocast
    assert "fp16 autocast is not supported" in speed.reasons.text()
    assert not speed.form.widgets["dataset.pin_memory"].isEnabled()
    speed.device.setCurrentIndex(speed.device.findData("cuda:0"))
    assert speed.amp.model().item(fp16).isEnabled()
    assert speed.form.widgets["dataset.pin_memory"].isEnabled()


def test_wizard_refuses_an_invalid_spec_and_says_why(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    wizard.speed_page.form.set_value("nproc", 2)  # needs distributed=ddp
    wizard.restart()
    for _ in range(4):
        wizard.next()
    assert wizard.spec is None
    assert "nproc" in wizard.review_page.error.text()
    assert not wizard.button(QWizard.FinishButton).isEnabled()


def test_file_model_warns_that_it_runs_user_code(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    wizard.show()
    page = wizard.model_page
    assert page.user_code_note.isHidden()
    page.name.setCurrentText("file")
    page.file_path.setText("/tmp/net.py")
    page.file_class.setText("Net")
    assert not page.user_code_note.isHidden() and "runs the Python code" in page.user_code_note.text()
    assert page.model_name() == "file:/tmp/net.py:Net"


def test_live_curves_fill_from_batched_metrics_and_evaluation_shows(window, qtbot):
    spec = TrainSpec.from_dict({"epochs": 4, "lr": 0.01, "seed": 5})
    window.start_training(spec)
    panel = window.training_panel
    # The run is listed; its job may already have ended by then on a busy machine (the fake one trains in
    # under a second), so the test does not insist on catching it in flight: the curves below are what it
    # checks.
    qtbot.waitUntil(lambda: len(panel.runs) == 1, timeout=30_000)
    run_id = next(iter(panel.runs))
    assert window.current_panel() is panel
    qtbot.waitUntil(lambda: not panel.job_of_run, timeout=30_000)
    metrics = panel.curves.runs[run_id]
    loss = metrics.get("train/loss")
    assert len(loss) == 40 and loss.x[0] == 1 and loss.x[-1] == 40  # every step, none dropped
    assert len(metrics.get("val/acc")) == 4
    panel.curves.redraw()
    item = panel.curves._items[(run_id, "train/loss")]
    x, y = item.getData()
    assert len(x) == 40 and np.allclose(y, ema(loss.y, panel.curves.smoothing_weight))
    assert "train/loss" in panel.curves.show_readout(20)
    assert panel.runs[run_id]["status"] == "done" and panel.runs[run_id]["epochs"] == "4/4"
    qtbot.waitUntil(lambda: panel.evaluation.evaluation is not None, timeout=5000)
    assert "90.00%" in panel.evaluation.title.text()
    assert panel.evaluation.gallery.count() == 6
    qtbot.waitUntil(lambda: not panel.evaluation.gallery.item(0).icon().isNull(), timeout=5000)


def test_stop_then_resume(window, qtbot):
    window.start_training(TrainSpec.from_dict({"epochs": 50, "seed": 20}))  # 20 ms per step: stoppable
    panel = window.training_panel
    qtbot.waitUntil(lambda: bool(panel.job_of_run), timeout=10_000)
    run_id = next(iter(panel.job_of_run))
    panel.select_run(run_id)
    qtbot.waitUntil(
        lambda: len(panel.curves.runs[run_id].series.get("epoch", MetricSeries())) >= 2, timeout=20_000
    )
    row = next(r for r in range(panel.table.rowCount()) if panel.table.item(r, 0).data(Qt.UserRole) == run_id)
    assert panel.table.item(row, 4).text().endswith("/50") and not panel.table.item(row, 4).text().startswith(
        "0/"
    )
    assert panel.table.item(row, 5).text().endswith("%")  # validation accuracy, live
    assert panel.stop_button.isEnabled()
    qtbot.mouseClick(panel.stop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not panel.job_of_run, timeout=10_000)
    assert panel.runs[run_id]["status"] == "cancelled"
    panel.select_run(run_id)
    assert panel.resume_button.isEnabled() and not panel.stop_button.isEnabled()
    qtbot.mouseClick(panel.resume_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: run_id in panel.job_of_run, timeout=10_000)
    assert len(panel.runs) == 1  # the same run continues; no new one


def test_overlay_and_compare_two_runs(window, qtbot):
    panel = window.training_panel
    window.start_training(TrainSpec.from_dict({"epochs": 1, "lr": 0.01}))
    qtbot.waitUntil(lambda: len(panel.runs) == 1 and not panel.job_of_run, timeout=10_000)
    window.start_training(TrainSpec.from_dict({"epochs": 2, "lr": 0.05}))
    qtbot.waitUntil(lambda: len(panel.runs) == 2 and not panel.job_of_run, timeout=10_000)
    for run_id in panel.runs:
        panel.set_shown(run_id, True)
    assert set(panel.curves.runs) == set(panel.runs)
    panel.tabs.setCurrentIndex(3)
    table = panel.spec_table
    rows = {table.verticalHeaderItem(r).text() for r in range(table.rowCount())}
    assert rows == {"epochs", "lr"}  # only the differences
    panel.only_differences.setChecked(False)
    assert panel.spec_table.rowCount() > 20


def test_metric_buffers_keep_full_resolution():
    run = RunMetrics("r")
    for start in range(0, 100_000, 1000):
        run.add_rows([[s, "train/loss", 1.0 / (s + 1), 0.0] for s in range(start, start + 1000)])
    run.add_rows([[100_000, "train/loss", "nan", 0.0]])
    series = run.get("train/loss")
    assert len(series) == 100_001 and np.isnan(series.y[-1])
    assert series.value_at(500.2) == (500.0, 1.0 / 501)


@pytest.mark.slow
def test_the_real_worker_trains_from_the_gui(qtbot, real_window):
    """The real worker subprocess, digits and the cnn: curves fill live, the evaluation appears."""
    window = real_window
    window.start_training(TrainSpec.from_dict({"epochs": 2, "log_every_steps": 5, "layer_stats_every": 10}))
    panel = window.training_panel
    qtbot.waitUntil(lambda: bool(panel.job_of_run), timeout=60_000)
    run_id = next(iter(panel.job_of_run))
    qtbot.waitUntil(lambda: not panel.job_of_run, timeout=120_000)
    assert panel.runs[run_id]["status"] == "done", panel.runs[run_id].get("message")
    metrics = panel.curves.runs[run_id]
    assert len(metrics.get("val/acc")) == 2
    steps = metrics.get("train/loss").x
    # A point for every step of 2 x 23 (#21), none duplicated by the store and the live stream.
    assert list(steps) == list(range(1, 47))
    # The Layers view filled as the run trained: the first step, then every 10th, each layer's gradient drawn.
    layers = panel.layers
    assert [record["step"] for record in layers.records] == [1, 10, 20, 30, 40]
    assert layers.matrix().shape == (3, 5) and (layers.matrix() > 0).all()
    qtbot.waitUntil(lambda: panel.evaluation.evaluation is not None, timeout=10_000)
    assert len(panel.evaluation.evaluation["confusion_matrix"]) == 10


def test_a_new_run_is_drawn_while_it_trains_though_an_older_run_is_ticked(window, qtbot):
    panel = window.training_panel
    window.start_training(TrainSpec.from_dict({"epochs": 1, "lr": 0.01}))
    qtbot.waitUntil(lambda: len(panel.runs) == 1 and not panel.job_of_run, timeout=10_000)
    old = next(iter(panel.runs))
    assert panel.shown_runs() == [old]
    window.start_training(TrainSpec.from_dict({"epochs": 50, "seed": 20}))  # "Train again…": still training
    qtbot.waitUntil(lambda: bool(panel.job_of_run), timeout=10_000)
    new = next(iter(panel.job_of_run))
    assert set(panel.shown_runs()) == {old, new}
    qtbot.waitUntil(
        lambda: len(panel.curves.runs[new].series.get("train/loss", MetricSeries())) > 0, timeout=20_000
    )
    panel.curves.redraw()
    assert (new, "train/loss") in panel.curves._items
    panel.select_run(new)
    qtbot.mouseClick(panel.stop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: not panel.job_of_run, timeout=10_000)
