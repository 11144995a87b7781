"""The main window against a fake worker that speaks the real protocol (and one test with the real worker)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings, Qt

from workbench.client import WorkerManager
from workbench.gui.main_window import WINDOW_TITLE, MainWindow
from workbench.gui.settings import Settings
from workbench.runs import RunStore


def _job_rows(window):
    return window.jobs_panel.model.records()


def test_window_title_status_light_and_devices(fake_window, qtbot):
    assert fake_window.windowTitle() == WINDOW_TITLE == "Torch Workbench"
    qtbot.waitUntil(lambda: fake_window.device_picker.count() == 2, timeout=10_000)
    picker = fake_window.device_picker
    assert [picker.itemData(i) for i in range(picker.count())] == ["cpu", "cuda:0"]
    picker.setCurrentIndex(1)
    assert "Fake GPU" in picker.toolTip() and "TensorRT: yes" in picker.toolTip()
    assert fake_window.settings.get("device") == "cuda:0"
    # The device query is the window's own business, not a job the user started.
    assert _job_rows(fake_window) == []


def test_job_progress_and_run_appear(fake_window, qtbot):
    fake_window.run_self_test()
    # a 200-step self-test: 2 s quiet, far more on a busy box
    qtbot.waitUntil(
        lambda: _job_rows(fake_window) and _job_rows(fake_window)[0].state == "done", timeout=60_000
    )
    record = _job_rows(fake_window)[0]
    assert record.fraction == 1.0 and record.run_dir
    runs = fake_window.runs_panel.model.runs
    assert [r["run_dir"] for r in runs] == [record.run_dir]
    fake_window.runs_panel.select_run(runs[0]["id"])
    details = fake_window.runs_panel.details.toPlainText()
    assert "debug.selftest" in details and "value" in details and "done" in details


def test_cancel_button_stops_a_running_job(fake_window, qtbot):
    record = fake_window.submit_job("debug.sleep", {"seconds": 30}, with_run=False)
    qtbot.waitUntil(lambda: _job_rows(fake_window)[0].state == "running", timeout=10_000)
    panel = fake_window.jobs_panel
    panel.view.selectRow(0)
    assert panel.cancel_button.isEnabled()
    qtbot.mouseClick(panel.cancel_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: _job_rows(fake_window)[0].state == "cancelled", timeout=10_000)
    assert _job_rows(fake_window)[0].job_id == record.job_id
    assert not panel.cancel_button.isEnabled()
    assert any("cancelled" in line for line in fake_window.log_panel.lines())


def test_failed_job_shows_its_message_without_traceback(fake_window, qtbot):
    fake_window.submit_job("debug.count", {"steps": 10, "crash_at": 2, "crash_mode": "raise", "delay": 0})
    qtbot.waitUntil(lambda: _job_rows(fake_window)[0].state == "failed", timeout=10_000)
    assert _job_rows(fake_window)[0].error_message == "deliberate failure at step 2"
    log = "\n".join(fake_window.log_panel.lines())
    assert "deliberate failure at step 2" in log and "Traceback" not in log


def test_theme_and_layout_persist(fake_window, tmp_path):
    fake_window.set_theme("dark")
    fake_window.close()
    reread = Settings(QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat))
    assert reread.get("theme") == "dark"
    assert reread.get("geometry") is not None and reread.get("window_state") is not None


def test_submit_while_worker_down_says_so(qtbot, tmp_path, settings):
    manager = WorkerManager(connection_file=tmp_path / "nobody.json")  # never started
    window = MainWindow(manager, tmp_path / "ws", settings)
    qtbot.addWidget(window)
    assert window.submit_job("debug.count", {}) is None
    assert "worker is stopped" in window.log_panel.lines()[-1]
    assert window.status_light.restart_button.isEnabled()


@pytest.mark.slow
def test_real_worker_crash_keeps_window_state_and_restarts(qtbot, tmp_path, settings):
    """The real worker subprocess: a job that kills it fails with SIGKILL, the window says so and recovers."""
    manager = WorkerManager(runtime_dir=tmp_path / "rt", max_restarts=0)
    window = MainWindow(manager, tmp_path / "workspace", settings)
    qtbot.addWidget(window)
    window.show()
    manager.start(wait=False)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=30_000)
    window.submit_job("debug.count", {"steps": 5, "delay": 0})
    qtbot.waitUntil(lambda: _job_rows(window)[0].state == "done", timeout=10_000)
    window.submit_job("debug.count", {"steps": 1000, "delay": 0.01, "crash_at": 20, "crash_mode": "kill"})
    qtbot.waitUntil(lambda: _job_rows(window)[0].state == "failed", timeout=10_000)
    assert "SIGKILL" in _job_rows(window)[0].error_message
    qtbot.waitUntil(lambda: window.status_light.state == "dead", timeout=10_000)
    assert window.banner.isVisible() and "SIGKILL" in window.banner.label.text()
    # Nothing earlier is lost: the finished job and both runs are still listed.
    assert [r.state for r in _job_rows(window)] == ["failed", "done"]
    assert len(RunStore(tmp_path / "workspace").list_runs()) == 2
    qtbot.mouseClick(window.banner.restart_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: window.status_light.state == "ready", timeout=30_000)
    assert not window.banner.isVisible()
    window.submit_job("debug.count", {"steps": 3, "delay": 0})
    qtbot.waitUntil(lambda: _job_rows(window)[0].state == "done", timeout=10_000)
    window.close()
    assert manager.process.poll() is not None  # closing the window stops the worker


def test_self_test_does_not_wait_behind_a_running_job(fake_window, qtbot):
    long = fake_window.submit_job("debug.count", {"steps": 100000, "delay": 0.01})
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(long.job_id).state == "running", timeout=10_000)
    fake_window.run_self_test()
    selftest = next(r for r in fake_window.manager.jobs.all() if r.task == "debug.selftest")
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(selftest.job_id).state == "done", timeout=60_000)
    # it finished beside the job, not after
    assert fake_window.manager.jobs.get(long.job_id).state == "running"
    assert fake_window.manager.jobs.get(selftest.job_id).result["selftest"] == "passed"
    fake_window.manager.cancel(long.job_id)
    # Ended before the test does: closing the window with a job running would ask first.
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(long.job_id).state == "cancelled", timeout=10_000)


def test_cancelling_a_queued_job_takes_it_out_of_the_queue_at_once(fake_window, qtbot):
    running = fake_window.submit_job("debug.count", {"steps": 100000, "delay": 0.01})
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(running.job_id).state == "running", timeout=10_000)
    queued = fake_window.submit_job("debug.count", {"steps": 10, "delay": 0})
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(queued.job_id).state == "queued", timeout=10_000)
    fake_window._on_jobs_cancel_requested(queued.job_id)
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(queued.job_id).state == "cancelled", timeout=10_000)
    assert "before it started" in fake_window.manager.jobs.get(queued.job_id).error_message
    assert "queue" in fake_window.statusBar().currentMessage()
    assert fake_window.manager.jobs.get(running.job_id).state == "running"  # the other job is untouched
    fake_window._on_jobs_cancel_requested(running.job_id)
    qtbot.waitUntil(lambda: fake_window.manager.jobs.get(running.job_id).state == "cancelled", timeout=10_000)
    # The cancelled job never runs later either: no run was made for it.
    assert fake_window.manager.jobs.get(queued.job_id).run_dir is None


def test_the_window_has_its_icon_and_opens_the_sample_specs_first(fake_window, monkeypatch):
    from workbench.app_resources import sample_specs
    from workbench.gui.panels.training import wizard as wizards

    assert not fake_window.windowIcon().isNull()
    file_menu = next(a.menu() for a in fake_window.menuBar().actions() if a.text() == "&File")
    spec_menu = next(a.menu() for a in file_menu.actions() if a.menu() and "spec" in a.text())
    names = [a.text() for a in spec_menu.actions() if a.text()]
    assert names[: len(sample_specs())] == [f"Sample: {p.stem}" for p in sample_specs()]
    assert names[-1] == "&Other spec file…"
    opened = []

    def exec_(wizard):  # modal: note what it opened on, and close it
        opened.append(wizard.spec_data())
        return 0

    monkeypatch.setattr(wizards.TrainingWizard, "exec", exec_)
    digits = next(p for p in sample_specs() if p.stem == "train-digits")
    fake_window.open_spec(digits)
    assert opened and opened[0]["dataset"]["name"] == "digits"
    # The bundled your-own-project examples follow, and open with their files found beside the spec.
    from workbench.app_resources import example_specs

    assert [n for n in names if n.startswith("Example: ")] == [
        f"Example: {p.parent.name}" for p in example_specs()
    ]
    shapes = next(p for p in example_specs() if p.parent.name == "shapes_segmentation")
    fake_window.open_spec(shapes)
    assert len(opened) == 2 and opened[1]["task"] == "segmentation"
    assert opened[1]["dataset"]["name"] == f"file:{shapes.parent / 'data.py'}:Shapes"


def test_an_export_or_benchmark_spec_opens_its_wizard_with_every_field(fake_window, monkeypatch, tmp_path):
    from workbench.gui.panels.export.bench_wizard import BenchWizard
    from workbench.gui.panels.export.export_wizard import ExportWizard

    opened = []
    monkeypatch.setattr(ExportWizard, "exec", lambda wizard: opened.append(wizard.start_data) or 0)
    monkeypatch.setattr(BenchWizard, "exec", lambda wizard: opened.append(wizard.start_data) or 0)
    export = tmp_path / "export.toml"
    export.write_text('format = "torchscript"\nparity_samples = 7\n[source]\nrun = "some-run"\n')
    fake_window.open_spec(export)
    bench = tmp_path / "bench.toml"
    bench.write_text(
        'backends = ["eager", "onnxruntime"]\nbatch_sizes = [4, 16]\niters = 55\n[source]\nrun = "r2"\n'
    )
    fake_window.open_spec(bench)
    assert [o["format"] for o in opened[:1]] == ["torchscript"] and opened[0]["parity_samples"] == 7
    assert opened[0]["source"]["run"] == "some-run"
    assert (
        opened[1]["batch_sizes"] == [4, 16]
        and opened[1]["iters"] == 55
        and opened[1]["source"]["run"] == "r2"
    )
    assert fake_window.current_panel() is fake_window.export_panel
