"""The export wizard: source run (a finished training run, or for onnx_qdq a quantize run) → format and
options → Export. Every field comes from ExportSpec and is checked by it (field_errors), so the wizard and
`workbench export` agree; fields that do not apply to the chosen format are greyed out with the reason."""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QVBoxLayout, QWizard, QWizardPage

from workbench.gui.widgets.checked_page import CheckedPage
from workbench.gui.widgets.spec_form import ERROR_COLOUR, SpecForm, field_errors
from workbench.results import dig
from workbench.specs import ExportSpec
from workbench.task_ids import QUANT_TASK, is_training

FORMAT_FIELDS = [
    "format",
    "script",
    "opset",
    "precision",
    "dynamic_batch",
    "verify",
    "parity_samples",
    "output",
    "device",
]
FORMAT_ABOUT = {
    "torchscript": "TorchScript (.pt): runs without the model's Python code, in C++ or mobile runtimes. "
    "Traced by default; tick “script” to keep data-dependent control flow.",
    "exported_program": "torch.export (.pt2): the full graph with its shapes, the input to AOTInductor and "
    "ExecuTorch.",
    "onnx": "ONNX (.onnx): runs in onnxruntime and most inference engines.",
    "onnx_qdq": "ONNX with QuantizeLinear/DequantizeLinear nodes from a quantize run's scales and zero "
    "points: int8 inference in onnxruntime; its accuracy is compared with the quantize run's simulation.",
    "tensorrt": "A TensorRT engine via torch_tensorrt: the fastest on NVIDIA GPUs; needs CUDA and TensorRT.",
}


# Where SpecForm's label from the field's name reads poorly.
LABELS = {
    "parity_samples": "Parity samples",
    "dynamic_batch": "Dynamic batch size",
    "output": "Output file",
    "min_time_s": "Minimum time (s)",
    "iters": "Iterations",
    "warmup": "Warm-up iterations",
    "threads": "CPU threads",
    "batch_sizes": "Batch sizes",
    "dtype": "Data type",
}


def relabel(form: SpecForm) -> None:
    """Give the form's fields the labels of LABELS (a check box carries its label as its text)."""
    for dotted, widget in form.widgets.items():
        text = LABELS.get(dotted.split(".")[-1])
        if not text:
            continue
        label = form.layout_.labelForField(form._rows[dotted])
        if hasattr(widget, "setChecked"):
            widget.setText(text)
        elif label is not None:
            label.setText(text)


def run_text(entry: dict) -> str:
    """A source run as the combos list it: its readable label (model · dataset · key metric · date) and, for a
    quantize run, that it is one; id · what it is · model where no label was read."""
    if entry.get("label"):
        return entry["label"] + ("  ·  quantize run" if entry.get("task") == QUANT_TASK else "")
    what = (
        "quantized " + entry["scheme"]
        if entry.get("task") == QUANT_TASK and entry.get("scheme")
        else ("quantize run" if entry.get("task") == QUANT_TASK else "training run")
    )
    return "  ·  ".join(p for p in (entry["id"], what, entry.get("model", "")) if p)


def add_run_items(combo, runs: list[dict]) -> None:
    """Fill a source-run combo: training runs first, then quantize runs; each run's id in its tooltip."""
    for entry in sorted(runs, key=lambda e: not is_training(e.get("task"))):
        combo.addItem(run_text(entry), entry["id"])
        combo.setItemData(combo.count() - 1, entry.get("tooltip") or entry["id"], Qt.ToolTipRole)


class SourceRunPage(QWizardPage):
    """A combo of finished runs (training runs first, then quantize runs) and what happens to the pick."""

    def __init__(self, runs: list[dict], source_run: str, *, title: str, subtitle: str, empty: str):
        super().__init__()
        self.setTitle(title)
        self.setSubTitle(subtitle)
        self.run = QComboBox()
        add_run_items(self.run, runs)
        self.run.setCurrentIndex(max(0, self.run.findData(source_run)))
        self.tasks = {entry["id"]: entry.get("task", "") for entry in runs}
        self.about = QLabel()
        self.about.setWordWrap(True)
        self.empty = QLabel(empty)
        self.empty.setWordWrap(True)
        self.empty.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.empty.setVisible(not runs)
        form = QFormLayout()
        form.addRow("Source run", self.run)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.about)
        layout.addWidget(self.empty)
        layout.addStretch(1)
        self.run.currentIndexChanged.connect(self.completeChanged)

    def run_id(self) -> str:
        return self.run.currentData() or ""

    def task(self) -> str:
        return self.tasks.get(self.run_id(), "")

    def isComplete(self) -> bool:  # noqa: N802 (Qt override)
        return bool(self.run_id())


class _OptionsPage(CheckedPage):
    def __init__(self, form: SpecForm):
        super().__init__()
        self.setTitle("Format and options")
        self.setSubTitle("What to write and how to check it: hover a field for what it does.")
        self.form = form
        self.about = QLabel()
        self.about.setWordWrap(True)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(f"color: {ERROR_COLOUR}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.about)
        layout.addWidget(form)
        layout.addStretch(1)
        layout.addWidget(self.error_label)


class ExportWizard(QWizard):
    """`runs`: finished training and quantize runs ({id, task, model, scheme}). `spec` holds the validated
    ExportSpec (None while something is wrong, `error` says what), kept up to date as fields change, so the
    wizard can be read without exec()."""

    def __init__(
        self,
        runs: list[dict],
        *,
        source_run: str = "",
        start: dict | None = None,
        device: str = "",
        parent=None,
    ):
        super().__init__(parent)
        self.setWindowTitle("New export")
        self.setWizardStyle(QWizard.ModernStyle)
        self.setButtonText(QWizard.FinishButton, "Export")
        self.setOption(QWizard.HaveHelpButton, False)
        self.resize(720, 600)
        self.spec: ExportSpec | None = None
        self.error = ""
        data = copy.deepcopy(start) if start else ExportSpec().to_dict()
        if device and not start:
            data["device"] = device
        self.start_data = data
        source_run = source_run or dig(data, "source", "run", default="")
        self.source_page = SourceRunPage(
            runs,
            source_run,
            title="Source",
            subtitle="The model to export: a finished training run (its best, else last, checkpoint), or a "
            "quantize run for an int8 ONNX model with QuantizeLinear/DequantizeLinear nodes.",
            empty="No finished training run in this workspace yet: train one first (Ctrl+T).",
        )
        self.form = SpecForm(ExportSpec, FORMAT_FIELDS, data)
        relabel(self.form)
        self.form.widgets["output"].setPlaceholderText("empty: into the run's artifacts folder")
        self.options_page = _OptionsPage(self.form)
        self.addPage(self.source_page)
        self.addPage(self.options_page)
        self.form.changed.connect(self.rebuild)
        self.source_page.run.currentIndexChanged.connect(self._on_source_changed)
        if not start:
            self._match_format_to_source()
        self.rebuild()

    def _match_format_to_source(self) -> None:
        """A quantize run exports as onnx_qdq; a training run as anything else (onnx by default)."""
        task, current = self.source_page.task(), self.form.value("format")
        if task == QUANT_TASK and current != "onnx_qdq":
            self.form.set_value("format", "onnx_qdq")
        elif is_training(task) and current == "onnx_qdq":
            self.form.set_value("format", "onnx")

    def _on_source_changed(self) -> None:
        self._match_format_to_source()
        self.rebuild()

    def spec_data(self) -> dict:
        data = copy.deepcopy(self.start_data)
        data["source"] = {**(data.get("source") or {}), "run": self.source_page.run_id()}
        self.form.apply_to(data)
        return data

    def _applicability(self) -> None:
        fmt = self.form.value("format")
        self.form.set_applicable("script", fmt == "torchscript", "Only TorchScript is traced or scripted.")
        self.form.set_applicable("opset", fmt in ("onnx", "onnx_qdq"), "Only ONNX formats have an opset.")
        self.form.set_applicable(
            "precision", fmt == "tensorrt", "Only a TensorRT engine is built at a precision."
        )
        self.form.set_applicable(
            "parity_samples", self.form.value("verify"), "No parity check: “verify” is off."
        )
        self.options_page.about.setText(FORMAT_ABOUT.get(fmt, ""))

    def rebuild(self, *args) -> ExportSpec | None:
        self._applicability()
        data = self.spec_data()
        errors, general = field_errors(ExportSpec, data, [*FORMAT_FIELDS, "source.run"])
        task, fmt = self.source_page.task(), data.get("format")
        if "format" not in errors and is_training(task) and fmt == "onnx_qdq":
            errors["format"] = (
                "format: onnx_qdq takes its scales and zero points from a quantize run; pick one "
                "on the Source page, or another format"
            )
        elif "format" not in errors and task == QUANT_TASK and fmt != "onnx_qdq":
            errors["format"] = (
                f"format: a quantize run exports as onnx_qdq; to export as {fmt}, pick its "
                "training run on the Source page"
            )
        self.form.set_errors(errors)
        self.options_page.set_has_errors(bool(errors))
        first = next(iter(errors.values()), general)
        if not data["source"]["run"]:
            self.spec, self.error = None, "Pick a run to export on the Source page."
        elif first:
            self.spec, self.error = None, f"Fix this before exporting: {first}"
        else:
            self.spec, self.error = ExportSpec.from_dict(data), ""
        self.options_page.error_label.setText(self.error)
        return self.spec

    def accept(self) -> None:
        if self.rebuild() is None:
            return
        super().accept()
