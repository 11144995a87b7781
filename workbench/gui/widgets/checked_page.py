"""A wizard page whose Next (or Finish) stays disabled while a field on it is invalid; the wizard, which
validates the whole spec at once, tells each page whether any of its fields is wrong."""

from __future__ import annotations

from PySide6.QtWidgets import QWizardPage


class CheckedPage(QWizardPage):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.has_errors = False

    def set_has_errors(self, has_errors: bool) -> None:
        if has_errors != self.has_errors:
            self.has_errors = has_errors
            self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802 (Qt override)
        return not self.has_errors and super().isComplete()
