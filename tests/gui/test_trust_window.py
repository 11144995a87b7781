"""The window asks before it runs user code: File ▸ Open spec on a spec whose dataset is a payload from a
folder not trusted asks first (Trust folder, Trust once, Cancel); Cancel imports nothing (no data query
reaches the real worker, no marker file) and the wizard says why; Trust once lets the wizard ask the worker,
which imports it."""

from __future__ import annotations

import textwrap

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QPushButton

from workbench.gui import trust_gate
from workbench.gui.panels.training.wizard import TrainingWizard

REAL_ASK = trust_gate.ask  # the conftest answers for the other tests; this one clicks the real dialog

PAYLOAD = """
from pathlib import Path
Path(__file__).with_name("MARKER").write_text("ran")

import torch
from torch.utils.data import Dataset

class Data(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return torch.zeros(4), i % 2
"""


def _spec(tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "payload.py").write_text(PAYLOAD)
    spec = folder / "train.toml"
    spec.write_text(
        textwrap.dedent("""
        epochs = 1
        [dataset]
        name = "file:payload.py:Data"
        [model]
        name = "mlp"
    """)
    )
    return folder, spec


class Driver:
    """Answers the trust dialog with `button`, then closes the wizard once `done(wizard)` holds."""

    def __init__(self, button: str, done):
        self.button, self.done = button, done
        self.asked: list[str] = []
        self.wizard_text = ""
        self.stopped = False
        QTimer.singleShot(50, self.step)

    def stop(self) -> None:
        self.stopped = True

    def step(self) -> None:
        if self.stopped:
            return
        widget = QApplication.activeModalWidget()
        if widget is not None and widget.objectName() == "trust_dialog":
            self.asked.append(widget.text())
            widget.findChild(QPushButton, self.button).click()
        elif isinstance(widget, TrainingWizard):
            if self.done(widget):
                self.wizard_text = widget.dataset_page.info_line.text()
                widget.reject()
                return
        QTimer.singleShot(50, self.step)


def test_open_spec_asks_first_and_cancel_imports_nothing(real_window, qtbot, monkeypatch, tmp_path):
    monkeypatch.setattr(trust_gate, "ask", REAL_ASK)
    folder, spec = _spec(tmp_path)
    window = real_window
    sent: list[str] = []  # every task the window sends the worker, queries included
    payload_queries: list[str] = []  # those whose spec names the payload's file
    submit = window.manager.submit

    def recording(task, *args, **kwargs):
        sent.append(task)
        if "payload.py" in repr((args, kwargs)):
            payload_queries.append(task)
        return submit(task, *args, **kwargs)

    monkeypatch.setattr(window.manager, "submit", recording)
    tasks = lambda: list(sent)  # noqa: E731
    before = tasks()

    driver = Driver("trust_cancel", lambda wizard: "not asked" in wizard.dataset_page.info_line.text())
    window.open_spec(spec)
    assert len(driver.asked) == 1 and str(folder / "payload.py") in driver.asked[0]
    assert "Trust the folder only if you know its code" in driver.asked[0]
    assert "would run its code" in driver.wizard_text and str(folder / "payload.py") in driver.wizard_text
    qtbot.wait(1500)  # long enough for a query the wizard would have sent to import the file
    # The Data tab may still be reading the built-in digits it opened with; nothing may ask about the payload.
    assert payload_queries == [], tasks()
    assert not (folder / "MARKER").exists()

    # Starting the job is asked about again; Cancel starts nothing.
    driver = Driver("trust_cancel", lambda wizard: True)
    from workbench.specs import TrainSpec

    assert window.start_training(TrainSpec.load(spec)) is None
    driver.stop()
    assert len(driver.asked) == 1 and not any(t.startswith("train.") for t in tasks()[len(before) :])
    assert not (folder / "MARKER").exists()

    # Trust once: the wizard asks the worker about the data, which imports the file (so the check above was
    # real).
    driver = Driver("trust_once", lambda wizard: (folder / "MARKER").exists())
    window.open_spec(spec)
    assert len(driver.asked) == 1 and (folder / "MARKER").exists()
    assert "data.info" in payload_queries
    from workbench.trust import trusted_folders

    assert trusted_folders(window.workspace) == []  # once: nothing recorded


def test_trust_folder_is_recorded_in_the_workspace(fake_window, monkeypatch, tmp_path):
    monkeypatch.setattr(trust_gate, "ask", lambda files, parent: trust_gate.FOLDER)
    folder, spec = _spec(tmp_path)
    from workbench.trust import trusted_folders

    assert fake_window.trust_gate.allow({"dataset": {"name": f"file:{folder / 'payload.py'}:Data"}})
    assert trusted_folders(fake_window.workspace) == [folder.resolve()]
    assert fake_window.trust_gate.pending({"dataset": {"name": f"file:{folder / 'payload.py'}:Data"}}) == []
