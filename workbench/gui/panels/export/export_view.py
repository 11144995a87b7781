"""The export view of the Export & Benchmark tab: an export's parity verdict and its numbers, the first
diverging layer one click from the graph, the exported file (format, size, exporter, accuracy), and an
export run's line in the runs list."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QFormLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from workbench.gui.panels.export.bench_plots import ParityPlot
from workbench.gui.panels.export.by_module_table import ByModuleTable
from workbench.gui.panels.export.palette import FAILED, NEUTRAL, PASSED, RUNNING
from workbench.gui.panels.export.results import ExportResults, format_bytes, format_diff
from workbench.gui.panels.quant.metric import Measure
from workbench.results import ExportResult, dig

ARTIFACT_FIELDS = ("File", "Format", "Size", "Exporter", "Accuracy")


def export_summary(spec: dict, report: dict) -> dict:
    """An export run's What and Result columns (and the result's colour) from its spec and report."""
    summary = {"what": f"export · {spec.get('format', '')}"}
    result = ExportResult.from_dict(report)
    parity = result.parity
    if parity is not None and parity.checked:
        verdict = "✓ parity" if parity.passed else "✗ parity"
        boxes = parity.raw.get("method") == "boxes"  # a detector's: its worst box IoU, not a difference
        shown = f"IoU {iou_text(parity.raw.get('worst_iou'))}" if boxes else format_diff(parity.max_abs_diff)
        summary["result"] = f"{verdict} {shown}"
        summary["result_colour"] = PASSED if parity.passed else FAILED
    elif result.artifact:
        summary["result"] = f"{format_bytes(report.get('size_bytes'))}, not verified"
    return summary


class ExportView(QWidget):
    """One export shown (`show_results`); `training_run_of(run_id)` names the training run behind a run."""

    graph_requested = Signal(str, str)  # the training (or quantize) run id, the diverging layer to select
    bench_requested = Signal(str)  # the export run whose file to benchmark

    def __init__(self, training_run_of: Callable[[str], str], parent=None):
        super().__init__(parent)
        self.training_run_of = training_run_of
        self.results: ExportResults | None = None
        self.export_title = QLabel()
        self.export_title.setTextFormat(Qt.RichText)
        self.export_title.setWordWrap(True)
        self._build_verdict()
        self._build_artifact()
        self.by_module = ByModuleTable()  # a QDQ export's codes against the simulation's, per PyTorch module
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.addWidget(self.export_title)
        layout.addSpacing(8)
        layout.addWidget(self.verdict)
        layout.addWidget(self.verdict_detail)
        layout.addWidget(self.diverging_box)
        layout.addWidget(self.parity_plot)
        layout.addWidget(self.by_module)
        layout.addSpacing(12)
        layout.addWidget(self.artifact_box)
        layout.addStretch(1)
        self.diverging_button.clicked.connect(self._on_diverging_clicked)
        self.bench_export_button.clicked.connect(self._on_bench_export_clicked)

    def _build_verdict(self) -> None:
        """The verdict in large type, its numbers, the diverging layer's row and the parity plot."""
        self.verdict = QLabel()
        font = QFont(self.verdict.font())
        font.setPointSize(max(18, int(font.pointSize() * 2)))
        font.setBold(True)
        self.verdict.setFont(font)
        self.verdict_detail = QLabel()
        self.verdict_detail.setTextFormat(Qt.RichText)
        self.verdict_detail.setWordWrap(True)
        self.verdict_detail.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.diverging_label = QLabel()
        self.diverging_label.setTextFormat(Qt.RichText)
        self.diverging_button = QPushButton()
        self.diverging_button.setToolTip("Open the model's graph in the Graph tab with this layer selected")
        diverging_row = QHBoxLayout()
        diverging_row.setContentsMargins(0, 0, 0, 0)
        diverging_row.addWidget(self.diverging_label)
        diverging_row.addWidget(self.diverging_button)
        diverging_row.addStretch(1)
        self.diverging_box = QWidget()
        self.diverging_box.setLayout(diverging_row)
        self.parity_plot = ParityPlot()
        self.parity_plot.setFixedHeight(190)

    def _build_artifact(self) -> None:
        """The exported file's form and the button that benchmarks it."""
        self.artifact_form = QFormLayout()
        self.artifact_labels: dict[str, QLabel] = {}
        for name in ARTIFACT_FIELDS:
            label = QLabel()
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            label.setWordWrap(True)
            self.artifact_labels[name] = label
            self.artifact_form.addRow(f"{name}:", label)
        self.bench_export_button = QPushButton("Benchmark this export…")
        self.bench_export_button.setToolTip("Measure the exported file beside the PyTorch model")
        actions = QHBoxLayout()
        actions.addWidget(self.bench_export_button)
        actions.addStretch(1)
        self.artifact_box = QWidget()
        artifact_layout = QVBoxLayout(self.artifact_box)
        artifact_layout.setContentsMargins(0, 0, 0, 0)
        artifact_layout.addLayout(self.artifact_form)
        artifact_layout.addSpacing(8)
        artifact_layout.addLayout(actions)

    # -- showing an export -------------------------------------------------------------------------
    def show_results(self, results: ExportResults, live: bool) -> None:
        """Show an export, `live` while its job runs (no verdict yet)."""
        self.results = results
        spec = results.spec
        source = results.source_run or dig(spec, "model", "name", default="a model")
        self.export_title.setText(
            f"<b>{results.run_id or 'Starting…'}</b> · {results.format} export of "
            f"{source} on {spec.get('device', 'cpu')}"
        )
        parity, typed = results.parity, results.result.parity
        self.diverging_box.hide()
        checked = typed is not None and typed.checked
        self.parity_plot.set_parity(parity if checked else None, PASSED, FAILED)
        self.parity_plot.setVisible(checked and not self.parity_plot.is_empty)
        if live:
            self._set_verdict("Exporting…", RUNNING)
            self.verdict_detail.setText(
                "The verdict appears when the export has been checked against PyTorch."
            )
        elif results.error:
            self._set_verdict(
                "Export failed" if "cancel" not in results.error.lower() else "Export stopped", FAILED
            )
            self.verdict_detail.setText(escape(results.error, quote=False))
        elif not checked:
            self._set_verdict("Exported, not verified", NEUTRAL)
            reason = typed.reason if typed is not None else ""
            self.verdict_detail.setText(
                "The parity check was off (“verify” in the wizard)."
                if not reason or reason == "verify=false"
                else escape(reason, quote=False)
            )
        else:
            self._show_parity(results, parity)
        self._show_artifact(results, checked and bool(typed.passed), live)
        self.by_module.show_report(results.format, {} if live else results.report)

    def _show_parity(self, results: ExportResults, parity: dict) -> None:
        """A checked export's verdict, its differences and, when one diverged, its first diverging layer."""
        passed = bool(parity.get("passed"))
        self._set_verdict("Parity passed ✓" if passed else "Parity failed ✗", PASSED if passed else FAILED)
        if parity.get("method") == "boxes":  # a detector: matched box by box, no tensor difference to show
            self.verdict_detail.setText(box_parity_text(parity))
            self.verdict_detail.setToolTip(
                f"Each box scoring {parity.get('score_threshold')} or more matched to the other side's box "
                f"of the same class with the highest IoU; parity needs IoU ≥ {parity.get('iou_min')} and "
                f"scores within {parity.get('score_tol')}. A box on one side only that the other side had "
                "before its NMS (which dropped it there for a near-tie) is named as a tie"
            )
            return
        self.verdict_detail.setText(
            f"max abs diff <b>{_diff_text(parity, 'max_abs_diff')}</b> · max rel diff "
            f"<b>{_diff_text(parity, 'max_rel_diff')}</b> · tolerance {format_diff(parity.get('tolerance'))}"
            f"<br>checked on {_count_text(parity.get('samples'))} samples at batch sizes "
            f"{_count_text(parity.get('batches'))}" + _steps_text(parity)
        )
        self.verdict_detail.setToolTip(str(parity.get("explanation") or ""))
        layer = parity.get("first_divergent_layer")
        if layer:
            named = escape(layer, quote=False)
            self.diverging_label.setText(f"First layer whose output diverges: <b>{named}</b>")
            self.diverging_button.setText(f"Show {layer} on the graph")
            self.diverging_button.setEnabled(bool(self.training_run_of(results.run_id) or results.source_run))
            self.diverging_button.show()
            self.diverging_box.show()
        elif not passed and parity.get("first_divergent_layer_reason"):
            self.diverging_label.setText(
                f"No diverging layer named: {escape(parity['first_divergent_layer_reason'], quote=False)}"
            )
            self.diverging_button.hide()
            self.diverging_box.show()

    def _show_artifact(self, results: ExportResults, parity_passed: bool, live: bool) -> None:
        report = results.report
        labels = self.artifact_labels
        labels["File"].setText(str(report.get("artifact") or "—"))
        labels["Format"].setText(results.format)
        labels["Size"].setText(format_bytes(report.get("size_bytes")))
        exporter = str(report.get("exporter") or "—")
        if report.get("fallback_reason"):
            exporter += f" (fallback: {report['fallback_reason']})"
        labels["Exporter"].setText(exporter)
        # A tracing exporter froze forward()'s Python branches to the example's: said where the exporter is
        # named.
        labels["Exporter"].setToolTip(str(report.get("frozen_control_flow") or ""))
        if report.get("frozen_control_flow") and report.get("exporter") == "torchscript":
            labels["Exporter"].setText(
                f"{exporter}. Control flow on tensor values was frozen by tracing (see the tooltip)"
            )
        labels["Accuracy"].setText(_accuracy_text(results.format, report, parity_passed))
        self.bench_export_button.setEnabled(bool(report.get("artifact")) and not live)
        self.artifact_box.setVisible(bool(report.get("artifact")))

    def _set_verdict(self, text: str, colour: str) -> None:
        self.verdict.setText(text)
        self.verdict.setStyleSheet(f"color: {colour}")
        self.verdict.setProperty("verdict_colour", colour)

    # -- its buttons -------------------------------------------------------------------------------
    def _on_diverging_clicked(self) -> None:
        results = self.results
        parity = results.result.parity if results else None
        layer = parity.first_divergent_layer if parity is not None else ""
        if not results or not layer:
            return
        source = self.training_run_of(results.run_id) or results.source_run
        self.graph_requested.emit(source, layer)

    def _on_bench_export_clicked(self) -> None:
        if self.results is not None and self.results.run_id:
            self.bench_requested.emit(self.results.run_id)


def _diff_text(parity: dict, key: str) -> str:
    """A difference; a key present as null is one the check found not finite (inf or NaN)."""
    value = parity.get(key)
    return "not finite" if value is None and key in parity else format_diff(value)


def _steps_text(parity: dict) -> str:
    """For a QDQ export: each onnxruntime configuration's output difference in steps against its derived
    tolerance, and how many quantizer codes differed from the simulation's (the tooltip explains)."""
    steps = parity.get("steps")
    if not isinstance(steps, dict):
        return ""
    parts = []
    for mode, label in (("deployed", "as deployed"), ("as_written", "as written")):
        analysis = steps.get(mode)
        if not isinstance(analysis, dict) or analysis.get("max_steps") is None:
            continue
        q = analysis.get("quantizers") or {}
        flips = int(q.get("one_step_at_a_tie") or 0)
        other = int(q.get("one_step_elsewhere") or 0) + int(q.get("two_or_more") or 0)
        parts.append(
            f"{label}: {analysis['max_steps']:.0f} of {analysis.get('tolerance_steps')} steps, "
            f"{flips:,} rounding flip{'s' if flips != 1 else ''}"
            + (f", <b>{other:,} codes off</b>" if other else "")
        )
    return "<br>" + " · ".join(parts) if parts else ""


def _count_text(value) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "?"
    return "?" if value is None else str(value)


def _accuracy_text(fmt: str, report: dict, parity_passed: bool) -> str:
    """What the export's accuracy is: measured in onnxruntime for an int8 export, else what parity says of it
    (a float export computes what PyTorch does, so it is measured only where quantization could change it)."""
    accuracy = report.get("accuracy") if isinstance(report.get("accuracy"), dict) else None
    if (
        accuracy
        and isinstance(accuracy.get("onnxruntime"), (int, float))
        and isinstance(accuracy.get("metric"), dict)
    ):
        # Another task's monitor (val MAE, mIoU, mean AP) under the same keys: in its own units, as the
        # Quantization tab shows it, not as a percentage of accuracy.
        measure = Measure.of(accuracy["metric"], accuracy.get("split"))
        text = f"{measure.axis}: onnxruntime {measure.text(accuracy['onnxruntime'])}"
        if isinstance(accuracy.get("simulated"), (int, float)):
            change = accuracy["onnxruntime"] - accuracy["simulated"]
            text += f" · simulated (the quantize run) {measure.text(accuracy['simulated'])} ({change:+.2g})"
        if accuracy.get("samples") and accuracy.get("split"):
            text += f" on {accuracy['samples']:,} samples of the {accuracy['split']}"
        return text
    if accuracy and isinstance(accuracy.get("onnxruntime"), (int, float)):
        text = f"onnxruntime {accuracy['onnxruntime']:.2%}"
        if isinstance(accuracy.get("simulated"), (int, float)):
            drop = (accuracy["onnxruntime"] - accuracy["simulated"]) * 100
            text += f" · simulated (the quantize run) {accuracy['simulated']:.2%} ({drop:+.2f} pt)"
        return text
    if fmt == "onnx_qdq":
        return "not measured (the dataset could not be read: see the log)" if report.get("artifact") else "—"
    if parity_passed:
        return "the PyTorch model's: its outputs match within the tolerance (measured only for onnx_qdq)"
    return "not measured: only onnx_qdq exports are (a float export computes what PyTorch does)"


def iou_text(value) -> str:
    """An IoU to four places: parity's bar is 0.99, so three significant figures would round across it."""
    return f"{value:.4f}" if isinstance(value, (int, float)) else "—"


def box_parity_text(parity: dict) -> str:
    """A detector's box-by-box parity in one or two lines: worst IoU, score difference, ties and what
    failed."""
    images = parity.get("images") or []
    ties = int(parity.get("ties") or 0)
    text = (
        f"boxes matched with worst IoU <b>{iou_text(parity.get('worst_iou'))}</b> · scores within "
        f"<b>{format_diff(parity.get('max_score_diff'))}</b><br>checked on {len(images)} image(s), "
        f"{sum(int(row.get('boxes') or 0) for row in images)} box(es) scoring "
        f"{parity.get('score_threshold')} or more" + (f" · {ties} tie(s) named" if ties else "")
    )
    failing = [box for row in images for box in row.get("extra") or [] if "why" not in box]
    if failing:
        first = failing[0]
        text += escape(
            f"; {len(failing)} box(es) unmatched, e.g. class {first['label']} at {first['box']} "
            f"(score {first['score']}) on {first['side']}'s side only",
            quote=False,
        )
    return text
