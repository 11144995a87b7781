"""The learning-rate finder dialog of the training wizard: runs `lr.find` through the window's query runner
with progress and Cancel, then plots the smoothed loss against the rate (log axis) with the suggestion marked,
and "Use this rate" hands the rate back. Never imports torch.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.plots import SERIES_COLOURS, add_legend, make_plot, series_pen
from workbench.gui.widgets.job_progress import JobProgress
from workbench.gui.widgets.spec_form import ERROR_COLOUR
from workbench.results import dig
from workbench.task_ids import LR_FIND_TASK

TASK = LR_FIND_TASK
USE_TIP = "Put the marked rate into the wizard's lr field (drag the line to mark another rate)"
CANCEL_TIP = "Stop the learning-rate finder at its next step"


def rounded(lr: float) -> float:
    """A rate as a person would type it: three significant digits (0.0658, not 0.06579332246575682)."""
    return float(f"{lr:.3g}")


class LrFinderDialog(QDialog):
    """Runs one range test for a spec (an LrFindSpec's plain data) and shows its curve; `rate_chosen` carries
    the rate "Use this rate" picked. Closing it while the test runs cancels the job."""

    rate_chosen = Signal(float)

    def __init__(self, queries, spec: dict, current_lr: float | None = None, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Find a learning rate")
        self.setMinimumSize(640, 460)
        self.queries = queries
        self.spec = spec
        self.current_lr = current_lr
        self.job: str | None = None
        self.result: dict | None = None
        self.chosen_lr: float | None = None
        self.pages = QStackedWidget()
        self.pages.addWidget(self._running_page())
        self.pages.addWidget(self._result_page())
        layout = QVBoxLayout(self)
        layout.addWidget(self.pages)
        queries.bridge.job_changed.connect(self._on_bridge_job_changed)

    # -- pages ---------------------------------------------------------------------------------------
    def _running_page(self) -> QWidget:
        page = QWidget()
        steps, low, high = (
            self.spec.get("steps", 100),
            self.spec.get("min_lr", 1e-7),
            self.spec.get("max_lr", 10),
        )
        model = dig(self.spec, "model", "name", default="cnn")
        dataset = dig(self.spec, "dataset", "name", default="digits")
        self.heading = QLabel(
            f"Training a copy of {model} on {dataset} for up to {steps} steps while the learning "
            f"rate grows from {low:g} to {high:g}. It stops early once the loss blows up."
        )
        self.heading.setWordWrap(True)
        self.progress = JobProgress(CANCEL_TIP)
        self.progress.cancel_button.clicked.connect(self._on_cancel_clicked)
        self.status = QLabel("Waiting for the worker…")
        self.status.setWordWrap(True)
        self.status.setStyleSheet("color: palette(placeholder-text)")
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.reject)
        self.close_button.hide()
        layout = QVBoxLayout(page)
        layout.addWidget(self.heading)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addStretch(1)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.close_button)
        layout.addLayout(row)
        return page

    def _result_page(self) -> QWidget:
        page = QWidget()
        self.plot = make_plot("", "loss", "learning rate", empty="The loss at each rate appears here.")
        self.plot.setLogMode(x=True, y=False)
        # bottom left, which the curve (flat, high, at low rates) leaves free
        add_legend(self.plot, offset=(8, -8))
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.use_button = QPushButton("Use this rate")
        self.use_button.setToolTip(USE_TIP)
        self.use_button.setDefault(True)
        self.use_button.clicked.connect(self._on_use_clicked)
        close = QPushButton("Close")
        close.setToolTip("Keep the wizard's lr as it is")
        close.clicked.connect(self.reject)
        layout = QVBoxLayout(page)
        layout.addWidget(self.plot, 1)
        layout.addWidget(self.summary)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.use_button)
        row.addWidget(close)
        layout.addLayout(row)
        self.marker: pg.InfiniteLine | None = None
        return page

    # -- running -------------------------------------------------------------------------------------
    def start(self) -> None:
        """Submit the job; its progress, result or error arrive on the GUI thread."""
        self.job = self.queries.query(TASK, self.spec, self._on_result, self._on_error)

    def _on_bridge_job_changed(self, record) -> None:
        if record.job_id != self.job or not record.active:
            return
        if record.state == "running":
            self.progress.show_record(record)
            self.status.setText("")
        else:  # submitted or queued: jobs run one at a time on the worker
            self.status.setText(
                "Waiting for the job before it to finish (the worker runs one job at a time)…"
            )

    def _on_cancel_clicked(self) -> None:
        if self.job is None:
            self.reject()
            return
        self.queries.bridge.manager.cancel(self.job)
        self.progress.cancel_button.setEnabled(False)
        self.progress.cancel_button.setText("Cancelling…")

    def _on_error(self, error: dict) -> None:
        self.job = None
        if error.get("type") == "JobCancelled":
            self.reject()  # the user asked for it: nothing to explain
            return
        self.progress.hide()
        self.status.setText(f"The learning-rate finder failed: {error.get('message') or error.get('type')}")
        self.status.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.close_button.show()

    def _on_result(self, result: dict) -> None:
        self.job = None
        self.show_result(result)

    def done(self, code: int) -> None:
        # Closed (Esc, the title bar, Cancel) while the job runs: stop it, and let no late reply reach this
        # dialog.
        if self.job is not None:
            self.queries.bridge.manager.cancel(self.job)
            self.queries.forget(self.job)
            self.job = None
        try:
            self.queries.bridge.job_changed.disconnect(self._on_bridge_job_changed)
        except (RuntimeError, TypeError):
            pass  # already disconnected (done twice)
        super().done(code)

    # -- the result ----------------------------------------------------------------------------------
    def show_result(self, result: dict) -> None:
        """Plot a `lr.find` result and mark its suggestion (or, without one, the middle of the range)."""
        self.result = result
        lrs = np.asarray(result.get("lrs") or [], dtype=float)
        losses = np.asarray(result.get("losses") or [], dtype=float)
        raw = np.asarray([math.nan if v is None else v for v in result.get("raw_losses") or []], dtype=float)
        self.plot.clear()
        if len(raw) == len(lrs) and len(lrs):
            faint = series_pen(SERIES_COLOURS[0], width=1.0)
            colour = faint.color()
            colour.setAlphaF(0.35)
            faint.setColor(colour)
            self.plot.plot(lrs, raw, pen=faint, name="loss of each step", connect="finite")
        self.plot.plot(lrs, losses, pen=series_pen(SERIES_COLOURS[0], width=2.2), name="smoothed loss")
        if len(losses):
            # From the lowest loss to a little over the start: the diverged tail (often 10x higher) would
            # flatten the part of the curve that matters.
            finite = np.concatenate([losses, raw[np.isfinite(raw)]]) if len(raw) == len(lrs) else losses
            top = float(np.nanmax(losses[: max(1, len(losses) // 3)])) * 1.1
            self.plot.setYRange(max(0.0, float(np.nanmin(finite)) * 0.9), top, padding=0.02)
        suggested = result.get("suggested_lr")
        start = suggested or (math.sqrt(lrs[0] * lrs[-1]) if len(lrs) else self.spec.get("min_lr", 1e-3))
        self.marker = pg.InfiniteLine(
            math.log10(start),
            angle=90,
            movable=True,
            pen=pg.mkPen(SERIES_COLOURS[1], width=2),
            hoverPen=pg.mkPen(SERIES_COLOURS[1], width=3),
            label="",
            labelOpts={"position": 0.92, "color": SERIES_COLOURS[1]},
        )
        if len(lrs):
            self.marker.setBounds((math.log10(lrs[0]), math.log10(lrs[-1])))
        self.marker.sigPositionChanged.connect(self._on_marker_moved)
        self.plot.addItem(self.marker)
        if suggested and len(lrs):
            at = float(np.interp(math.log10(suggested), np.log10(lrs), losses))
            self.plot.plot(
                [suggested],
                [at],
                pen=None,
                symbol="o",
                symbolSize=9,
                symbolBrush=SERIES_COLOURS[1],
                symbolPen=None,
                name="suggested",
            )
        self._show_choice(start)
        self.pages.setCurrentIndex(1)

    def _on_marker_moved(self, line: pg.InfiniteLine) -> None:
        self._show_choice(10 ** line.value())

    def _show_choice(self, lr: float) -> None:
        result = self.result or {}
        self.chosen_lr = rounded(lr)
        self.marker.label.setFormat(f"lr {self.chosen_lr:g}")
        suggested = result.get("suggested_lr")
        lines = []
        if suggested:
            lines.append(
                f"<b>Suggested learning rate: {rounded(suggested):g}</b>, where the smoothed loss falls "
                "fastest."
            )
        else:
            lines.append(f"<b>No suggestion</b>: {result.get('suggestion') or 'the sweep was too short'}.")
        if suggested is None or rounded(suggested) != self.chosen_lr:
            lines.append(f"Marked: {self.chosen_lr:g}.")
        if result.get("min_loss_lr"):
            lines.append(
                f"The loss was lowest at {rounded(result['min_loss_lr']):g}; a rate there is usually too "
                "high to train with."
            )
        if result.get("stopped_early"):
            lines.append(f"Stopped early: {result.get('stop_reason')}.")
        if self.current_lr is not None:
            lines.append(f"The wizard's lr is {self.current_lr:g}. Drag the line to mark another rate.")
        self.summary.setText(" ".join(lines))

    def _on_use_clicked(self) -> None:
        if self.chosen_lr is None:
            return
        self.rate_chosen.emit(self.chosen_lr)
        self.accept()
