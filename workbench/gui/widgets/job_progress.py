"""A running job's progress bar with its Cancel button, filled from the job's record (the Quantization and the
Export & Benchmark tabs show one above their results)."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QProgressBar, QPushButton, QWidget

from workbench.client import JobRecord


class JobProgress(QWidget):
    def __init__(self, cancel_tip: str, parent=None):
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(True)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip(cancel_tip)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel_button)

    def show_record(self, record: JobRecord) -> None:
        self.show()
        fraction = record.fraction if record.fraction is not None else 0.0
        self.bar.setValue(int(fraction * 1000))
        self.bar.setFormat(f"{record.text or record.state}  %p%")
