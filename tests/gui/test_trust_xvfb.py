"""File ▸ Open spec under a real X server (xvfb): the app as a user runs it, with the real worker subprocess,
asks before a payload that writes a marker file is imported; Cancel leaves no marker, and Trust once lets it
run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_trust_window import _spec  # the payload that writes MARKER, and its spec

ROOT = Path(__file__).resolve().parents[2]


# Run in its own process under xvfb-run: the window, the worker, the menu action, the real modal question.
SCRIPT = """
import json, sys, time
from pathlib import Path
from PySide6.QtCore import QSettings, QTimer
from PySide6.QtWidgets import QApplication, QPushButton

from workbench.gui.app import prepare_qt_environment
prepare_qt_environment()
app = QApplication([])
from workbench.client import WorkerManager
from workbench.gui.main_window import MainWindow
from workbench.gui.panels.training.wizard import TrainingWizard
from workbench.gui.settings import Settings

out = Path({out!r})
spec = Path({spec!r})
marker = spec.with_name("MARKER")
settings = Settings(QSettings(str(out / "settings.ini"), QSettings.IniFormat))
manager = WorkerManager(runtime_dir=out / "rt")
window = MainWindow(manager, out / "workspace", settings)
window.resize(1300, 850)
window.show()
manager.start(wait=False)
report = {{"asked": [], "wizard": "", "shot": False}}


def wait(condition, seconds):
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        app.processEvents()
        time.sleep(0.02)
    return condition()


report["ready"] = wait(lambda: window.status_light.state == "ready", 120)


def answer(button):
    widget = QApplication.activeModalWidget()
    if widget is not None and widget.objectName() == "trust_dialog":
        if not report["shot"]:
            report["shot"] = widget.grab().save(str(out / "trust-dialog.png"))
        report["asked"].append(widget.text())
        widget.findChild(QPushButton, button).click()
    elif isinstance(widget, TrainingWizard):
        report["wizard"] = widget.dataset_page.info_line.text()
        if "not asked" in report["wizard"] or marker.exists():
            widget.reject()
            return
    QTimer.singleShot(50, lambda: answer(button))


QTimer.singleShot(50, lambda: answer("trust_cancel"))
window.open_spec(spec)
wait(lambda: False, 3)  # long enough for a query the wizard would have sent to import the file
report["marker_after_cancel"] = marker.exists()
report["wizard_after_cancel"] = report["wizard"]

QTimer.singleShot(50, lambda: answer("trust_once"))
window.open_spec(spec)
report["marker_after_once"] = wait(marker.exists, 60)
window.close_stopping_jobs()
manager.shutdown()
print(json.dumps(report))
"""


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("xvfb-run"), reason="needs xvfb-run (Debian: apt-get install xvfb)")
def test_open_spec_under_xvfb_asks_before_the_payload_runs(tmp_path):
    folder, spec = _spec(tmp_path)
    script = tmp_path / "open_spec.py"
    script.write_text(SCRIPT.format(out=str(tmp_path), spec=str(spec)))
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env.update(QT_QPA_PLATFORM="xcb")
    proc = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1600x900x24", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ready"], report
    assert len(report["asked"]) == 2 and str(folder / "payload.py") in report["asked"][0], report
    assert "would run its code" in report["wizard_after_cancel"], report  # the wizard says why it did not ask
    assert report["marker_after_cancel"] is False, "Cancel still ran the payload"
    assert report["marker_after_once"] is True, "Trust once did not let the wizard ask the worker"
    assert report["shot"] and (tmp_path / "trust-dialog.png").stat().st_size > 1000
    keep = os.environ.get("TRUST_SCREENSHOT_DIR")  # to look at the dialog a person sees
    if keep:
        shutil.copy(tmp_path / "trust-dialog.png", Path(keep) / "trust-dialog.png")
