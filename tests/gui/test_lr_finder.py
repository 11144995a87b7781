"""The training wizard's learning-rate finder: "Find learning rate…" runs `lr.find` on the wizard's spec
through the query runner, shows its progress with Cancel, then the loss against the rate on a log axis with
the suggestion marked; "Use this rate" fills the lr field. The worker is the fake one over the real
protocol."""

from __future__ import annotations

import math
import threading
import time

import fake_worker
import numpy as np
import pytest
from fake_worker import FAKE_DEVICES
from PySide6.QtCore import Qt

from workbench.client import WorkerManager
from workbench.gui.panels.training.wizard import LR_FIND_NO_WORKER, TrainingWizard
from workbench.gui.queries import QueryRunner
from workbench.gui.state import DatasetState
from workbench.gui.worker_bridge import QtWorkerBridge
from workbench.specs import DataSpec, LrFindSpec
from workbench.worker.registry import TaskInfo

SUGGESTED = 0.0316227766


class FakeFinder:
    """A torch-free lr.find: the real result's shape over a canned curve (steepest near SUGGESTED), a step
    every `delay` seconds with progress, and cancel at a step boundary."""

    def __init__(self):
        self.specs: list[LrFindSpec] = []
        self.delay = 0.0
        self.cancelled = threading.Event()

    def __call__(self, spec: LrFindSpec, ctx):
        self.specs.append(spec)
        lrs = np.geomspace(spec.min_lr, spec.max_lr, spec.steps)
        losses = (
            2.3 - 2.0 / (1 + np.exp(-3 * (np.log10(lrs) - math.log10(SUGGESTED)))) + np.maximum(0, lrs - 1)
        )
        for step in range(1, spec.steps + 1):
            if ctx.should_stop():
                self.cancelled.set()
                ctx.check_stop()
            ctx.progress(
                step, spec.steps, f"lr {lrs[step - 1]:.2e} · loss {losses[step - 1]:.4f}", force=True
            )
            time.sleep(self.delay)
        return {
            "lrs": lrs.tolist(),
            "losses": losses.tolist(),
            "raw_losses": (losses + 0.05).tolist(),
            "suggested_lr": SUGGESTED,
            "suggestion": "steepest fall of the smoothed loss",
            "min_loss_lr": 1.0,
            "stopped_early": False,
            "stop_reason": None,
        }


@pytest.fixture
def finder():
    return FakeFinder()


@pytest.fixture
def queries(qtbot, tmp_path, finder):
    worker = fake_worker.FakeWorker(tmp_path)
    worker.kernel._task_overrides["lr.find"] = TaskInfo(
        "lr.find", finder, "job", LrFindSpec, False, "fake lr finder"
    )
    manager = WorkerManager(connection_file=worker.connection_file, heartbeat_interval=0.2)
    runner = QueryRunner(QtWorkerBridge(manager), tmp_path / "workspace")
    manager.start(wait=False)
    qtbot.waitUntil(lambda: manager.state == "ready", timeout=30_000)
    yield runner
    manager.detach()
    worker.stop()


def open_wizard(qtbot, queries) -> TrainingWizard:
    wizard = TrainingWizard(
        DatasetState(DataSpec.from_dict({"name": "digits"})),
        FAKE_DEVICES,
        "cpu",
        queries=queries,
        start={"batch_size": 32, "lr": 0.001, "optimizer": "sgd"},
    )
    qtbot.addWidget(wizard)
    wizard.show()
    wizard.next()
    wizard.next()
    assert wizard.currentPage() is wizard.hyper_page
    return wizard


def test_use_this_rate_fills_the_lr_field_from_the_plotted_suggestion(qtbot, queries, finder):
    wizard = open_wizard(qtbot, queries)
    button = wizard.hyper_page.find_lr
    assert button.isEnabled() and "range test" in button.toolTip()
    qtbot.mouseClick(button, Qt.LeftButton)
    dialog = wizard.lr_finder
    assert dialog is not None and dialog.isVisible()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=10_000)

    # The job ran the wizard's own spec with the finder's range.
    spec = finder.specs[-1]
    assert (spec.batch_size, spec.optimizer, spec.dataset.name, spec.device) == (32, "sgd", "digits", "cpu")
    assert (spec.min_lr, spec.max_lr, spec.steps) == (1e-7, 10, 100)
    # Loss against the rate on a log x axis, the suggestion marked.
    plot = dialog.plot.plotItem
    assert plot.ctrl.logXCheck.isChecked() and not plot.ctrl.logYCheck.isChecked()
    curves = [item for item in plot.listDataItems() if item.name() == "smoothed loss"]
    assert len(curves) == 1 and len(curves[0].getOriginalDataset()[0]) == 100
    assert dialog.marker.value() == pytest.approx(math.log10(SUGGESTED))
    assert dialog.chosen_lr == 0.0316
    assert "Suggested learning rate: 0.0316" in dialog.summary.text() and "0.001" in dialog.summary.text()

    qtbot.mouseClick(dialog.use_button, Qt.LeftButton)
    assert not dialog.isVisible()
    assert wizard.hyper_page.form.widgets["lr"].text() == "0.0316"
    assert wizard.spec is not None and wizard.spec.lr == 0.0316  # the wizard's spec follows at once


def test_dragging_the_marker_picks_another_rate(qtbot, queries):
    wizard = open_wizard(qtbot, queries)
    dialog = wizard.find_learning_rate()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=10_000)
    dialog.marker.setValue(-3.0)
    assert dialog.chosen_lr == 0.001 and "Marked: 0.001" in dialog.summary.text()
    dialog.marker.setValue(5.0)  # past the sweep's end: held at max_lr
    assert dialog.chosen_lr == 10
    dialog.marker.setValue(-2.5)
    dialog.use_button.click()
    assert wizard.hyper_page.form.widgets["lr"].text() == "0.00316"


def test_cancel_stops_the_job_and_leaves_the_lr_alone(qtbot, queries, finder):
    finder.delay = 0.05
    wizard = open_wizard(qtbot, queries)
    dialog = wizard.find_learning_rate()
    cancel = dialog.progress.cancel_button
    qtbot.waitUntil(lambda: dialog.progress.bar.value() > 0, timeout=10_000)
    assert "lr " in dialog.progress.bar.format() and cancel.toolTip()
    qtbot.mouseClick(cancel, Qt.LeftButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=10_000)
    assert finder.cancelled.is_set()
    assert wizard.hyper_page.form.widgets["lr"].text() == "0.001"


def test_a_spec_the_finder_cannot_run_is_explained_under_the_button(qtbot, queries, finder):
    wizard = open_wizard(qtbot, queries)
    wizard.hyper_page.form.widgets["lr"].setText("fast")  # a half-typed lr does not stop the sweep
    dialog = wizard.find_learning_rate()
    qtbot.waitUntil(lambda: dialog.pages.currentIndex() == 1, timeout=10_000)
    assert "The wizard's lr" not in dialog.summary.text()
    dialog.reject()
    wizard.hyper_page.form.widgets["clip_grad_norm"].setText("-1")
    assert wizard.find_learning_rate() is None
    note = wizard.hyper_page.finder_note
    assert not note.isHidden() and "clip_grad_norm" in note.text()


def test_without_a_worker_the_button_says_why_it_is_off(qtbot):
    wizard = TrainingWizard(DatasetState(), FAKE_DEVICES, "cpu")
    qtbot.addWidget(wizard)
    button = wizard.hyper_page.find_lr
    assert not button.isEnabled() and button.toolTip() == LR_FIND_NO_WORKER
