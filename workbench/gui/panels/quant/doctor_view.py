"""The Quantization tab's Doctor view: a quantize run's findings, worst first, each with its evidence plot,
the fixes tried and their measured gain; "Try fix" and "Apply all" ask for a new quantize run with the doctor
applying fixes, and a run that applied some shows each layer's SQNR and the monitor before and after."""

from __future__ import annotations

import copy
import html
import math

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from workbench.gui.panels.export.by_module_table import ByModuleTable
from workbench.gui.panels.quant.doctor_plots import EvidenceView
from workbench.gui.panels.quant.metric import Measure
from workbench.quant_findings import backend_findings
from workbench.specs.jobs import DOCTOR_FIXES

COLUMNS = ("Severity", "Layer", "Tensor", "Cause", "Fix", "Gain", "Monitor gain")
COLUMN_TIPS = (
    "How much this layer costs: dB of logit SQNR (or the monitor's drop) it takes away",
    "The layer (module name) the finding is about",
    "Its weight or its output activation",
    "Why it loses precision",
    "The fix that measured best for it",
    "Logit SQNR the best fix gained, measured by applying it and quantizing again",
    "What the best fix did to the run's monitor (accuracy, mIoU, …), measured the same way",
)
FINDING_ROLE = Qt.UserRole + 1
FINDING_ROWS = 5  # findings in view above the evidence at first; a person drags the splitter for more
CAUSES = {
    "outlier_channels": "outlier channels",
    "mixed_range_concat": "mixed-range concat",
    "weight_outliers": "weight outliers",
    "clipping": "clipping",
    "bias_shift": "bias shift",
    "low_bits_sensitive": "sensitive at low bits",
    "relu6_blocks_cle": "ReLU6 blocks CLE",
    "backend_mismatch": "backend mismatch",
}
EMPTY_TEXT = (
    "<h3>No doctor findings in this run</h3><p>The doctor diagnoses each layer after the ladder: why it "
    "loses precision, the fixes for it, each tried by quantizing again and measured.</p><p>Turn it on in "
    "the quantization wizard (Pipeline steps: <b>Doctor: diagnose after the ladder</b>), or on the command "
    "line with <code>workbench quantize … --set doctor.enabled=true</code>; then quantize again.</p>"
)
NO_BACKENDS_TEXT = (
    "No ONNX QDQ export of this run yet. Export it as <b>ONNX QDQ</b> (Export tab, this run as the source) "
    "to compare each module's quantizer codes in onnxruntime with the simulation; its mismatches then appear "
    "here as findings."
)
SEVERE = "#d93a3a"  # the worst finding's severity cell; lighter ones fade towards the table's own background


def ordered_findings(doctor: dict | None, backends: dict | None = None) -> list[dict]:
    """The findings worst first (highest severity), those without a number last; then the backend mismatches
    of the run's newest QDQ export (`backends`: {"run", "report"}), worst first, whose severity is a share of
    codes, not dB, so they do not rank among the others. A mismatch the doctor already lists is not
    repeated."""
    findings = [f for f in (doctor or {}).get("findings") or [] if isinstance(f, dict)]
    own = sorted(
        (f for f in findings if f.get("cause") != "backend_mismatch"),
        key=lambda f: -_num(f.get("severity"), -math.inf),
    )
    mismatches = [f for f in findings if f.get("cause") == "backend_mismatch"]
    report = (backends or {}).get("report") or {}
    seen = {f.get("id") for f in mismatches}
    mismatches += [f for f in backend_findings(report.get("by_module") or []) if f.get("id") not in seen]
    return own + sorted(mismatches, key=lambda f: -_num(f.get("severity"), -math.inf))


def severity_text(finding: dict) -> str:
    """dB for the doctor's own findings; a backend mismatch's share of codes off, in percent."""
    severity = _num(finding.get("severity"))
    if severity is None:
        return "—"
    return f"{severity:.1f} %" if finding.get("cause") == "backend_mismatch" else f"{severity:.1f}"


def fix_of(finding: dict) -> str:
    """What `doctor.fixes` takes for a finding: "<layer>:<fix>"."""
    return f"{finding.get('layer', '')}:{finding.get('fix', '')}"


def can_try(finding: dict) -> bool:
    return bool(finding.get("layer")) and finding.get("fix") in DOCTOR_FIXES


def doctor_spec(spec: dict, fixes: list[str]) -> dict:
    """`spec` (a quantize run's) to run again with the doctor on and applying `fixes` (empty: every finding
    whose measured gain is positive)."""
    data = copy.deepcopy(spec)
    data["doctor"] = {**(data.get("doctor") or {}), "enabled": True, "apply": True, "fixes": list(fixes)}
    return data


def _num(value, default=None):
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return default


def db_text(value, signed: bool = True) -> str:
    value = _num(value)
    return "—" if value is None else (f"{value:+.1f} dB" if signed else f"{value:.1f} dB")


class DoctorView(QWidget):
    """`set_doctor(doctor, metric, done)` shows a run's `doctor` block (None: the empty state); `findings`
    holds them in the table's order. Try fix emits the finding, Apply all asks for every verified fix."""

    try_fix_requested = Signal(dict)  # the finding whose fix to run as a job
    apply_all_requested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.doctor: dict = {}
        self.backends: dict | None = None  # {"run", "report"}: the run's newest ONNX QDQ export
        self.findings: list[dict] = []
        self.measure = Measure()
        self.done = False
        self.pages = QStackedWidget()
        self.empty = QLabel(EMPTY_TEXT)
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignCenter)
        self.empty.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.empty.setToolTip("The doctor is off for this run")
        self.pages.addWidget(self.empty)
        content = self._build_content()
        # No minimum of its own: a short tab squeezes the evidence rather than taking height from the layer
        # table.
        content.setMinimumSize(1, 1)
        self.pages.addWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.pages)
        self.set_doctor(None)

    # -- construction ----------------------------------------------------------------------------
    def _build_content(self) -> QWidget:
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.RichText)
        self.header.setToolTip(
            "The run's logit SQNR and monitor as quantized, and after the fixes it applied"
        )
        self.apply_button = QPushButton("Apply all")
        self.apply_button.setToolTip(
            "Quantize again with the doctor applying every fix that measurably helped: a "
            "new run with a doctor rung on its ladder"
        )
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.apply_button, 0, Qt.AlignTop)
        self.applied_table = self._table(
            ("Layer", "Fix", "What it changed", "Logit SQNR before → after"),
            "The fixes this run applied, in order, and the model's logit SQNR before and after each",
        )
        self.table = self._table(COLUMNS, "The findings, worst first: click one for its evidence and fixes")
        for column, tip in enumerate(COLUMN_TIPS):
            self.table.horizontalHeaderItem(column).setToolTip(tip)
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setToolTip("What the doctor found for the selected layer, and what its fix does")
        self.evidence = EvidenceView()
        self.tried = self._table(
            ("Fix tried", "Logit SQNR", "Monitor"),
            "Every fix tried for this finding, with what it measured after quantizing again",
        )
        # The fix's name takes the width the numbers leave: no horizontal scroll bar in a narrow column.
        self.tried.horizontalHeader().setStretchLastSection(False)
        self.tried.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.try_button = QPushButton("Try fix")
        self.try_button.setToolTip(
            "Quantize again with only this finding's fix applied, to see its before and after (a new run)"
        )
        self.result = QLabel()
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.RichText)
        self.result.setToolTip("The fix's measured effect: before and after when this run applied it")
        buttons = QHBoxLayout()
        buttons.addWidget(self.result, 1)
        buttons.addWidget(self.try_button, 0, Qt.AlignTop)
        detail = QWidget()
        detail_layout = QVBoxLayout(detail)
        detail_layout.setContentsMargins(0, 0, 0, 0)
        detail_layout.addWidget(self.summary)
        body = QSplitter(Qt.Horizontal)
        body.addWidget(self.evidence)
        body.addWidget(self.tried)
        body.setSizes([640, 260])
        detail_layout.addWidget(body, 1)
        detail_layout.addLayout(buttons)
        self.detail_tabs = QTabWidget()
        self.detail_tabs.setDocumentMode(True)
        self.detail_tabs.addTab(detail, "Finding")
        self.detail_tabs.addTab(self._build_backends(), "Backends")
        self.detail_tabs.setTabToolTip(0, "The selected finding: its evidence and the fixes tried")
        self.detail_tabs.setTabToolTip(
            1,
            "Each PyTorch module's quantizer codes in onnxruntime against the simulation's, from this "
            "run's newest ONNX QDQ export",
        )
        self.splitter = QSplitter(Qt.Vertical)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.detail_tabs)
        # The findings take the rows they need (up to FINDING_ROWS); the evidence takes the rest and never
        # collapses.
        self.splitter.setCollapsible(1, False)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(self.applied_table)
        layout.addWidget(self.splitter, 1)
        self.table.currentCellChanged.connect(lambda row, *_: self._show_finding(row))
        self.try_button.clicked.connect(self._on_try_clicked)
        self.apply_button.clicked.connect(self.apply_all_requested)
        return content

    def _build_backends(self) -> QWidget:
        self.backends_note = QLabel(NO_BACKENDS_TEXT)
        self.backends_note.setWordWrap(True)
        self.backends_note.setTextFormat(Qt.RichText)
        self.backends_note.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.backends_table = ByModuleTable()
        page = QWidget()
        layout = QVBoxLayout(page)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.addWidget(self.backends_note)
        layout.addWidget(self.backends_table, 1)
        return page

    @staticmethod
    def _table(columns: tuple[str, ...], tip: str) -> QTableWidget:
        table = QTableWidget(0, len(columns))
        table.setHorizontalHeaderLabels(list(columns))
        table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        table.setSelectionBehavior(QAbstractItemView.SelectRows)
        table.setSelectionMode(QAbstractItemView.SingleSelection)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(table.fontMetrics().height() + 6)
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        table.setToolTip(tip)
        return table

    # -- showing ---------------------------------------------------------------------------------
    def set_doctor(
        self,
        doctor: dict | None,
        metric: dict | None = None,
        done: bool = False,
        backends: dict | None = None,
    ) -> None:
        """Show a run's doctor block; `metric` is the run's metric block (accuracy when None); `done`: the run
        finished, so its spec can be quantized again; `backends`: {"run", "report"} of its newest ONNX QDQ
        export (None: it has none)."""
        self.doctor = doctor if isinstance(doctor, dict) else {}
        self.measure = Measure.of(metric)
        self.done = done
        self.backends = backends if isinstance(backends, dict) else None
        self._fill_backends()
        self.findings = ordered_findings(self.doctor, self.backends)
        if not self.doctor:
            self.pages.setCurrentWidget(self.empty)
            self.apply_button.setEnabled(False)
            self.try_button.setEnabled(False)
            return
        self.pages.setCurrentIndex(1)
        self.header.setText(self._header_text())
        self._fill_applied()
        self._fill_findings()
        self.apply_button.setEnabled(done and bool(self.findings))
        if self.findings:
            self.table.setCurrentCell(0, 0)
        else:
            self._show_finding(-1)

    def _monitor_name(self) -> str:
        return str((self.doctor.get("baseline") or {}).get("monitor_name") or self.measure.axis)

    def monitor_text(self, value, signed: bool = False) -> str:
        value = _num(value)
        if value is None:
            return "—"
        if self.measure.accuracy and self._monitor_name() in ("accuracy", self.measure.axis):
            return f"{value * 100:+.2f} pt" if signed else f"{value:.2%}"
        return f"{value:+.4g}" if signed else f"{value:.4g}"

    def _header_text(self) -> str:
        baseline, after = self.doctor.get("baseline") or {}, self.doctor.get("after") or {}
        name = html.escape(self._monitor_name())
        parts = [f"<b>{len(self.findings)} finding{'s' if len(self.findings) != 1 else ''}</b>"]
        if self.doctor.get("skipped"):
            parts.append(
                f"<span style='color:#b9770e'>the doctor tried nothing: "
                f"{html.escape(str(self.doctor['skipped']))}</span>"
            )
        if baseline:
            parts.append(
                f"baseline: logit SQNR {db_text(baseline.get('sqnr_db'), False)}, {name} "
                f"{self.monitor_text(baseline.get('monitor'))}"
            )
        if after:
            parts.append(
                f"after the fixes: logit SQNR <b>{db_text(after.get('sqnr_db'), False)}</b>, {name} "
                f"<b>{self.monitor_text(after.get('monitor'))}</b>"
            )
        return " · ".join(parts)

    def _fill_backends(self) -> None:
        report = (self.backends or {}).get("report") or {}
        self.backends_table.show_report("onnx_qdq", report)
        if not self.backends:
            self.backends_note.setText(NO_BACKENDS_TEXT)
            return
        rows = [r for r in report.get("by_module") or [] if isinstance(r, dict)]
        off = sum(1 for f in backend_findings(rows))
        self.backends_note.setText(
            f"From export run <b>{html.escape(str(self.backends.get('run', '')))}</b> (ONNX QDQ, opset "
            f"{html.escape(str(report.get('opset', '?')))}): {len(rows)} module(s) compared, "
            f"<b>{off}</b> with codes off beyond rounding ties."
        )

    def _fill_applied(self) -> None:
        applied = [a for a in self.doctor.get("applied") or [] if isinstance(a, dict)]
        self.applied_table.setRowCount(len(applied))
        for row, entry in enumerate(applied):
            cells = (
                entry.get("layer", ""),
                entry.get("fix", ""),
                entry.get("changed", ""),
                f"{db_text(entry.get('sqnr_db_before'), False)} → "
                f"{db_text(entry.get('sqnr_db_after'), False)}",
            )
            for column, text in enumerate(cells):
                self.applied_table.setItem(row, column, QTableWidgetItem(str(text)))
        self.applied_table.setVisible(bool(applied))
        table = self.applied_table
        rows = table.verticalHeader().defaultSectionSize() * min(len(applied), 4)
        table.setFixedHeight(table.horizontalHeader().sizeHint().height() + rows + 2 * table.frameWidth() + 2)

    def _fill_findings(self) -> None:
        self.table.blockSignals(True)
        self.table.setRowCount(len(self.findings))
        worst = (
            max(
                (_num(f.get("severity"), 0.0) for f in self.findings if f.get("cause") != "backend_mismatch"),
                default=0.0,
            )
            or 1.0
        )
        for row, finding in enumerate(self.findings):
            gain = finding.get("gain") or {}
            severity = _num(finding.get("severity"))
            cells = (
                severity_text(finding),
                finding.get("layer", ""),
                finding.get("tensor", ""),
                CAUSES.get(finding.get("cause"), str(finding.get("cause", ""))),
                str(finding.get("fix", "")).replace("_", " "),
                db_text(gain.get("sqnr_db")),
                self.monitor_text(gain.get("monitor"), signed=True),
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(str(text))
                item.setData(FINDING_ROLE, finding.get("id"))
                if column in (0, 5, 6):
                    item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
                item.setToolTip(str(finding.get("summary", "")))
                self.table.setItem(row, column, item)
            shade = QColor(SEVERE)
            # A mismatch's share of codes is not in dB: shaded by itself, in percent of all codes.
            scale = 100.0 if finding.get("cause") == "backend_mismatch" else worst
            shade.setAlpha(int(40 + 170 * max(0.0, min(1.0, (severity or 0.0) / scale))))
            self.table.item(row, 0).setBackground(shade)
        self.table.blockSignals(False)
        self._fit_findings()

    def _fit_findings(self) -> None:
        """The findings table as tall as its rows (FINDING_ROWS at most), the evidence below taking the
        rest."""
        table = self.table
        rows = max(1, min(len(self.findings), FINDING_ROWS))
        height = (
            table.horizontalHeader().sizeHint().height()
            + rows * table.verticalHeader().defaultSectionSize()
            + 2 * table.frameWidth()
            + 2
        )
        total = sum(self.splitter.sizes()) or 480
        self.splitter.setSizes([height, max(total - height, 200)])

    def select_finding(self, layer: str) -> bool:
        """Select the worst finding of `layer` (a graph node's click comes here); False when it has none."""
        row = next((i for i, f in enumerate(self.findings) if f.get("layer") == layer), -1)
        if row < 0:
            return False
        self.table.setCurrentCell(row, 0)
        self.table.scrollToItem(self.table.item(row, 0))
        return True

    def current_finding(self) -> dict | None:
        row = self.table.currentRow()
        return self.findings[row] if 0 <= row < len(self.findings) else None

    def _show_finding(self, row: int) -> None:
        finding = self.findings[row] if 0 <= row < len(self.findings) else None
        if finding is None:
            self.summary.setText("The doctor found nothing to fix in this run." if not self.findings else "")
            self.evidence.clear()
            self.tried.setRowCount(0)
            self.result.clear()
            self.try_button.setEnabled(False)
            return
        fix_text = finding.get("fix_text") or str(finding.get("fix", "")).replace("_", " ")
        self.summary.setText(
            f"<b>{html.escape(str(finding.get('layer', '')))}</b> "
            f"({html.escape(str(finding.get('tensor', '')))}): "
            f"{html.escape(str(finding.get('summary', '')))}<br>"
            f"<span style='color:gray'>Fix: {html.escape(str(fix_text))}</span>"
        )
        self.evidence.show_finding(finding)
        self._fill_tried(finding)
        self.result.setText(self._result_text(finding))
        self.try_button.setEnabled(self.done and can_try(finding))
        self.try_button.setToolTip(self._try_tip(finding))

    def _fill_tried(self, finding: dict) -> None:
        tried = [t for t in finding.get("tried") or [] if isinstance(t, dict)]
        self.tried.setRowCount(len(tried))
        for row, entry in enumerate(tried):
            cells = (
                str(entry.get("fix", "")).replace("_", " "),
                db_text(entry.get("sqnr_db"), False),
                self.monitor_text(entry.get("monitor")),
            )
            for column, text in enumerate(cells):
                self.tried.setItem(row, column, QTableWidgetItem(text))

    def _try_tip(self, finding: dict) -> str:
        if not self.done:
            return "Available on a finished quantize run"
        if not can_try(finding):
            return f"No fix to try for this finding ({finding.get('fix') or 'none proposed'})"
        return (
            f"Quantize again applying only {fix_of(finding)}: the new run shows this layer's SQNR and the "
            f"{self._monitor_name()} before and after"
        )

    def _result_text(self, finding: dict) -> str:
        """Before and after for the finding's layer when this run applied its fix; else the measured gain."""
        applied = next(
            (
                a
                for a in self.doctor.get("applied") or []
                if isinstance(a, dict) and a.get("layer") == finding.get("layer")
            ),
            None,
        )
        baseline, after = self.doctor.get("baseline") or {}, self.doctor.get("after") or {}
        name = html.escape(self._monitor_name())
        if applied is not None:
            text = (
                f"Applied here ({html.escape(str(applied.get('fix', '')))}): logit SQNR "
                f"{db_text(applied.get('sqnr_db_before'), False)} → "
                f"<b>{db_text(applied.get('sqnr_db_after'), False)}</b>"
            )
            if after:
                text += (
                    f" · {name} {self.monitor_text(baseline.get('monitor'))} → "
                    f"<b>{self.monitor_text(after.get('monitor'))}</b>"
                )
            return text
        gain = finding.get("gain") or {}
        if not gain:
            return "No fix measured a gain for this finding."
        return (
            f"Best fix measured: logit SQNR <b>{db_text(gain.get('sqnr_db'))}</b>, {name} "
            f"<b>{self.monitor_text(gain.get('monitor'), signed=True)}</b>"
        )

    def _on_try_clicked(self) -> None:
        finding = self.current_finding()
        if finding is not None and can_try(finding):
            self.try_fix_requested.emit(finding)
