"""The wizard's Task choice (TrainSpec.task): what `auto` would pick for the dataset, and the tasks the data
cannot serve greyed out with the worker's reason, as a tooltip and as a line under the choice.

It only shows what the worker's `data.info` reply says under "tasks"; it never judges the data itself.
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import QComboBox, QLabel, QVBoxLayout, QWidget

from workbench.gui.widgets.spec_form import ERROR_COLOUR
from workbench.results import dig
from workbench.specs import TASKS, TrainSpec

TASK_TEXT = {
    "auto": "auto",
    "classification": "classification: one label per sample",
    "multilabel": "multilabel: a 0/1 vector per sample",
    "regression": "regression: float targets",
    "segmentation": "segmentation: a label per pixel",
    "detection": "detection: boxes and labels per image",
    "custom": "custom: your own loss and metrics",
}
SHORT_WHY = 60  # characters of auto's reason shown inside the choice; the line below has all of it


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class TaskChoice(QWidget):
    """A combo of TASKS and a line that says what auto picks, what is greyed out and why, or that it is
    asking."""

    changed = Signal()  # the chosen task changed

    def __init__(self, task: str = "auto", parent=None):
        super().__init__(parent)
        self.combo = QComboBox()
        for name in TASKS:
            self.combo.addItem(TASK_TEXT[name], name)
        self.combo.setToolTip(TrainSpec.field_help("task"))
        self.line = QLabel()
        self.line.setWordWrap(True)
        self.line.setTextFormat(Qt.RichText)
        self.line.setStyleSheet("color: palette(placeholder-text)")
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.error.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.combo)
        layout.addWidget(self.line)
        layout.addWidget(self.error)
        self.unavailable: dict[str, str] = {}  # task -> why the data cannot serve it
        self.auto: str | None = None
        self.set_task(task)
        self.combo.currentIndexChanged.connect(self._on_combo_changed)
        self.set_tasks(None)

    # -- the choice ------------------------------------------------------------------------------
    def task(self) -> str:
        return self.combo.currentData() or "auto"

    def set_task(self, task: str) -> None:
        self.combo.setCurrentIndex(max(0, self.combo.findData(task)))

    def is_enabled(self, task: str) -> bool:
        item = self.combo.model().item(self.combo.findData(task))
        return item is not None and item.isEnabled()

    def _on_combo_changed(self, *args) -> None:
        self.refresh_error()
        self.changed.emit()

    def problem(self) -> str:
        """Why the chosen task cannot run on this data ("task: ..."), or "" when it can or nobody knows yet.

        A greyed item cannot be picked, but a starting spec ("train again", the last spec) may hold one.
        """
        task = self.task()
        if task in self.unavailable:
            return f"task: {task} does not fit this data ({self.unavailable[task]}); choose another task"
        return ""

    # -- what the worker said --------------------------------------------------------------------
    def set_busy(
        self, text: str = "Reading the dataset's first sample to see which tasks it can serve…"
    ) -> None:
        self.line.setText(html.escape(text))

    def set_tasks(self, tasks: dict | None, note: str = "") -> None:
        """Fill the choice from data.info's "tasks" ({"auto", "why", "unavailable"}); None (an older worker,
        no reply, a failed one) leaves every task enabled and `note` says why nothing is known."""
        model = self.combo.model()
        tasks = tasks if isinstance(tasks, dict) else None
        unavailable = dict(dig(tasks, "unavailable", default={}))
        self.unavailable = {task: str(why) for task, why in unavailable.items() if task in TASKS}
        self.auto = dig(tasks, "auto")
        why = str(dig(tasks, "why", default=""))
        if tasks is not None and self.auto is None and "auto" not in self.unavailable:
            # auto cannot decide for this data: a run with task=auto would fail, so it is one more greyed
            # choice.
            self.unavailable["auto"] = why or "auto cannot tell the task from the first sample"
        for index in range(self.combo.count()):
            name = self.combo.itemData(index)
            item = model.item(index) if isinstance(model, QStandardItemModel) else None
            if item is None:
                continue
            reason = self.unavailable.get(name, "")
            item.setEnabled(not reason)
            if name == "auto":
                text = f"auto ({self.auto}: {_clip(why, SHORT_WHY)})" if self.auto else "auto"
                item.setText(text)
                item.setToolTip(
                    reason
                    or (f"auto picks {self.auto}: {why}" if self.auto else TrainSpec.field_help("task"))
                )
            else:
                item.setToolTip(reason or TASK_TEXT[name])
        self.line.setText(self._summary(why, note))
        self.refresh_error()

    def refresh_error(self) -> None:
        problem = self.problem()
        self.error.setText(problem)
        self.error.setVisible(bool(problem))

    def _summary(self, why: str, note: str) -> str:
        lines = []
        if self.auto:
            lines.append(f"auto picks <b>{html.escape(self.auto)}</b>: {html.escape(why)}")
        elif note:
            lines.append(html.escape(note))
        for task, reason in self.unavailable.items():
            lines.append(f"<i>{html.escape(task)}</i> is greyed out: {html.escape(reason)}")
        return "<br>".join(lines)
