"""The small rough edges of #21 part 6.6: the Profiler names the right wizard page; Cancel job works while a
job runs without selecting its row; the pixel histogram has room; the window does not grow when the sample's
title wraps; Export's Open report opens the written report. (The status bar after a failed dataset:
test_wizard_stale_dataset.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QDesktopServices

from workbench.gui.panels.data.sample_view import HISTOGRAM_MIN_HEIGHT
from workbench.gui.panels.training.profiler import ProfilerView
from workbench.runs import RunStore
from workbench.specs import ExportSpec


def test_the_profiler_names_the_page_that_has_profile_steps(qtbot, tmp_path):
    view = ProfilerView()
    qtbot.addWidget(view)
    view.show_run(str(tmp_path))
    assert "(Device and speed page)" in view.title.text() and "Hyperparameters" not in view.title.text()


def _rows(window):
    return window.jobs_panel.model.records()


def test_cancel_job_works_while_a_job_runs_without_selecting_its_row(fake_window, qtbot):
    panel = fake_window.jobs_panel
    assert not panel.cancel_button.isEnabled()
    older = fake_window.submit_job("debug.sleep", {"seconds": 30}, with_run=False)
    newer = fake_window.submit_job("debug.sleep", {"seconds": 30}, with_run=False)
    # One job runs at a time: the newer one waits in the queue, and is still the newest active job.
    qtbot.waitUntil(
        lambda: (
            fake_window.manager.jobs.get(older.job_id).state == "running" and len(_rows(fake_window)) == 2
        ),
        timeout=10_000,
    )
    panel.view.clearSelection()
    assert panel.cancel_button.isEnabled()  # no row selected, a job runs: the button works
    assert panel.cancel_target().job_id == newer.job_id
    qtbot.mouseClick(panel.cancel_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(newer.job_id).state == "cancelled", timeout=10_000)
    assert fake_window.manager.jobs.get(older.job_id).active  # the newest went, the other runs on
    assert panel.cancel_button.isEnabled()
    row = next(i for i, r in enumerate(_rows(fake_window)) if r.job_id == older.job_id)
    panel.view.selectRow(row)
    qtbot.mouseClick(panel.cancel_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(older.job_id).state == "cancelled", timeout=10_000)
    qtbot.waitUntil(lambda: not panel.cancel_button.isEnabled(), timeout=5000)  # nothing runs: greyed again


@pytest.fixture
def data_window(fake_window, qtbot):
    panel = fake_window.dataset_panel
    fake_window.show_tab(panel)
    qtbot.waitUntil(lambda: panel.info is not None, timeout=30_000)
    return fake_window


def _show(window, qtbot, index: int, note: str = "") -> None:
    panel = window.dataset_panel
    panel.show_sample("train", index, note)
    qtbot.waitUntil(
        lambda: panel.sample_view.result is not None and panel.sample_view.result["index"] == index,
        timeout=30_000,
    )
    qtbot.wait(100)


def test_the_pixel_histogram_has_room_to_read(data_window, qtbot):
    _show(data_window, qtbot, 3)
    histogram = data_window.dataset_panel.sample_view.histogram
    assert histogram.height() >= HISTOGRAM_MIN_HEIGHT
    # the bars' own area, under the title and above the axis (was ~40)
    assert histogram.plotItem.vb.height() >= 90


def test_the_window_does_not_grow_when_the_samples_text_wraps(data_window, qtbot):
    data_window.resize(1300, 600)  # smaller than the window can be: it takes its least height
    qtbot.wait(100)
    _show(data_window, qtbot, 3)
    size = data_window.size()
    _show(
        data_window,
        qtbot,
        4,
        "predicted class 5 with 93 % confidence, a digit the model often takes for a 3 " * 4,
    )
    assert data_window.dataset_panel.sample_view.title.height() > 60  # it wrapped onto several lines
    assert data_window.size() == size  # it scrolls in its tab; before, the window grew by the new lines


def test_open_report_opens_the_written_report(fake_window, qtbot, monkeypatch):
    with RunStore(fake_window.workspace).create_run(
        "train",
        {"epochs": 1, "model": {"name": "cnn"}, "dataset": {"name": "digits"}},
        task="train.classifier",
    ) as run:
        run.write_report({"status": "done", "epochs_completed": 1, "final": {"test_accuracy": 0.97}})
        run.set_status("done")
        train_id = run.id
    panel = fake_window.export_panel
    fake_window.show_tab(panel)
    record = panel.start_export(ExportSpec.from_dict({"source": {"run": train_id}}))
    qtbot.waitUntil(
        lambda: not fake_window.manager.jobs.get(record.job_id).active and not panel.live, timeout=15_000
    )
    panel.refresh()
    panel.select_run(Path(fake_window.manager.jobs.get(record.job_id).run_dir).name)
    assert panel.report_button.isEnabled() and not panel.open_report_button.isEnabled()  # nothing written yet
    opened = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toLocalFile()) or True)
    panel.report_button.click()  # writes it (and, outside tests, opens it once)
    report = fake_window.workspace / "runs" / train_id / "artifacts" / "report.html"
    assert report.is_file() and panel.open_report_button.isEnabled()
    assert str(report) in panel.open_report_button.toolTip()
    opened.clear()
    qtbot.mouseClick(panel.open_report_button, Qt.LeftButton)
    assert opened == [str(report)]
