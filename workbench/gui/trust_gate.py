"""The window's gate before user code runs: a spec naming Python files (file:, lightning:) from a folder not
trusted in the workspace is asked about (Trust folder, Trust once, Cancel) before any query or job would
import them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from workbench import trust
from workbench.trust import UserFile

ERROR_TYPE = "UntrustedCode"
FOLDER, ONCE, CANCEL = "folder", "once", "cancel"


class TrustGate:
    def __init__(self, workspace: Callable[[], Path | None], parent: QWidget | None = None):
        self._workspace = workspace
        self._parent = parent
        # (file, sha256) trusted for this session: an edit asks again
        self._once: set[tuple[str, str]] = set()
        # files the user said Cancel to: a query does not ask about them again
        self._declined: set[str] = set()
        self._asking = False

    def pending(self, spec_data: dict) -> list[UserFile]:
        """The user files this spec's job would import that are neither trusted nor trusted once."""
        workspace = self._workspace()
        files = trust.untrusted(trust.job_user_files(spec_data or {}, workspace), workspace)
        return [f for f in files if (str(f.path), _digest(f.path)) not in self._once]

    def allow(self, spec_data: dict, parent: QWidget | None = None, *, ask_declined: bool = True) -> bool:
        """Whether the job may import its user code: at once when there is none or it is trusted; else the
        user is asked. A query (`ask_declined=False`) does not ask again about files the user cancelled."""
        files = self.pending(spec_data)
        if not files:
            return True
        if self._asking or (not ask_declined and all(str(f.path) in self._declined for f in files)):
            return False  # one question at a time; a query behind it is simply not sent
        self._asking = True
        try:
            answer = ask(files, parent or self._parent)
        finally:
            self._asking = False
        if answer == FOLDER:
            for folder in trust.folders_of(files):
                trust.trust_folder(self._workspace(), folder)
        elif answer == ONCE:
            self._once.update((str(f.path), _digest(f.path)) for f in files)
        else:
            self._declined.update(str(f.path) for f in files)
            return False
        self._declined.difference_update(str(f.path) for f in files)
        return True

    def refusal(self, spec_data: dict) -> dict:
        """The error a query or job that was not let through reports, naming the files."""
        files = self.pending(spec_data)
        return {
            "type": ERROR_TYPE,
            "message": f"{trust.describe(files) or 'its Python code'} is from a folder not trusted in this "
            "workspace, and you have not trusted it. Start the job (or open the spec again) and choose "
            "Trust folder or Trust once to run it",
        }


def _digest(path: Path) -> str:
    try:
        return trust.sha256(path)
    except OSError:
        return ""


def ask(files: list[UserFile], parent: QWidget | None) -> str:
    """Trust folder, Trust once or Cancel, for code about to run with the user's permissions."""
    folders = "\n".join(f"  {folder}" for folder in trust.folders_of(files))
    listed = "\n".join(f"  {f.field}: {f.path}" for f in files)
    box = QMessageBox(
        QMessageBox.Icon.Warning,
        "Run code from this folder?",
        "This spec runs Python code that has not been trusted in this workspace. It runs with your "
        f"permissions.\n\nFiles:\n{listed}\n\nFolder:\n{folders}\n\nTrust the folder only if you know "
        "its code.",
        parent=parent,
    )
    box.setObjectName("trust_dialog")
    folder = box.addButton("Trust folder", QMessageBox.ButtonRole.AcceptRole)
    folder.setObjectName("trust_folder")
    once = box.addButton("Trust once", QMessageBox.ButtonRole.YesRole)
    once.setObjectName("trust_once")
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    cancel.setObjectName("trust_cancel")
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)
    box.exec()
    clicked = box.clickedButton()
    return FOLDER if clicked is folder else ONCE if clicked is once else CANCEL
