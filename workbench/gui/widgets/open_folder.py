"""Open a folder in the desktop's file manager, or, where there is none (a server, a bare container), say so
in the window and show the path with a Copy button: the one place every panel opens folders through."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices, QGuiApplication
from PySide6.QtWidgets import QMessageBox, QWidget


def open_folder(parent: QWidget | None, path: str | Path) -> bool:
    """True when a file manager took the folder; otherwise a message with the path (and Copy) was shown."""
    path = Path(path)
    if not path.exists():
        QMessageBox.warning(parent, "Folder not found", f"The folder no longer exists:\n{path}")
        return False
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
        return True
    show_path(
        parent,
        path,
        "No file manager could open the folder (none is installed, or none answered). Here is its path:",
    )
    return False


def show_path(parent: QWidget | None, path: Path, text: str) -> None:
    box = QMessageBox(QMessageBox.Information, "Open folder", f"{text}\n\n{path}", parent=parent)
    box.setTextInteractionFlags(Qt.TextSelectableByMouse)  # the path can be selected by hand, too
    copy = box.addButton("Copy path", QMessageBox.ActionRole)
    box.addButton(QMessageBox.Close)
    copy.clicked.disconnect()  # keep the box open after copying: a person may want to read the path again
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(str(path)))
    box.setObjectName("open_folder_fallback")
    box.exec()
