"""The profiler view of a run made with profile_steps: the top operators by self CPU time, and the trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = (
    ("name", "Operator"),
    ("calls", "Calls"),
    ("self_cpu_time_total_us", "Self CPU (µs)"),
    ("cpu_time_total_us", "CPU total (µs)"),
    ("device_time_total_us", "Device total (µs)"),
)
SORT_KEY = "self_cpu_time_total_us"  # what the title promises: the top operators by self CPU time
DEVICE_KEY = "device_time_total_us"


class _NumberItem(QTableWidgetItem):
    def __lt__(self, other) -> bool:  # sort numerically, not as text
        try:
            return float(self.text().replace(",", "")) < float(other.text().replace(",", ""))
        except ValueError:
            return super().__lt__(other)


class ProfilerView(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.run_dir: Path | None = None
        self.title = QLabel("Runs trained with profile_steps > 0 show their top operators here.")
        self.title.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([title for _, title in COLUMNS])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.verticalHeader().hide()
        self.table.setSortingEnabled(True)
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.save_button = QPushButton("Save trace…")
        self.save_button.setToolTip("Save the Chrome trace; open it in chrome://tracing or ui.perfetto.dev")
        self.save_button.setEnabled(False)
        self.save_button.clicked.connect(self._on_save_clicked)
        bar = QHBoxLayout()
        bar.addWidget(self.title, 1)
        bar.addWidget(self.save_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addLayout(bar)
        layout.addWidget(self.table)

    def show_run(self, run_dir: str | Path | None) -> bool:
        self.run_dir = Path(run_dir) if run_dir else None
        self.table.setSortingEnabled(False)
        self.table.setRowCount(0)
        rows = None
        if self.run_dir is not None:
            try:
                rows = json.loads((self.run_dir / "artifacts" / "profile_top_ops.json").read_text())
            except (OSError, ValueError):
                rows = None
        trace = self.run_dir / "artifacts" / "trace.json" if self.run_dir else None
        self.save_button.setEnabled(bool(trace and trace.exists()))
        if not rows:
            self.title.setText(
                "This run has no profile. Set profile_steps in the training wizard "
                "(Device and speed page) to record one."
            )
            self.table.setSortingEnabled(True)
            return False
        self.title.setText(f"Top {len(rows)} operators by self CPU time in {self.run_dir.name}")
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            for c, (key, _) in enumerate(COLUMNS):
                value = row.get(key, "")
                item = (
                    QTableWidgetItem(str(value))
                    if key == "name"
                    else _NumberItem(f"{value:,.0f}" if isinstance(value, (int, float)) else str(value))
                )
                self.table.setItem(r, c, item)
        # Sorted as the title says; a device column of zeros (a CPU run) says nothing, so it is hidden.
        self.table.sortItems(
            next(i for i, (key, _) in enumerate(COLUMNS) if key == SORT_KEY), Qt.DescendingOrder
        )
        self.table.setSortingEnabled(True)
        has_device_time = any(
            isinstance(row.get(DEVICE_KEY), (int, float)) and row[DEVICE_KEY] > 0 for row in rows
        )
        self.table.setColumnHidden(len(COLUMNS) - 1, not has_device_time)
        return True

    def _on_save_clicked(self) -> None:
        if self.run_dir is None:
            return
        path, _ = QFileDialog.getSaveFileName(
            self, "Save trace", f"{self.run_dir.name}-trace.json", "JSON (*.json)"
        )
        if path:
            shutil.copyfile(self.run_dir / "artifacts" / "trace.json", path)
