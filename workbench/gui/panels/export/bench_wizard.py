"""The benchmark wizard: source (a training run, a quantize run, or an exported file) → backends × batch sizes
× dtype, with warm-up, iterations, minimum time, threads and device → Run. Every field comes from BenchSpec
and is checked by it (field_errors), so the wizard and `workbench bench` agree."""

from __future__ import annotations

import copy
from pathlib import Path

from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
    QWizard,
    QWizardPage,
)

from workbench.gui.panels.export.export_wizard import add_run_items, relabel
from workbench.gui.widgets.checked_page import CheckedPage
from workbench.gui.widgets.spec_form import ERROR_COLOUR, SpecForm, field_errors
from workbench.specs import BENCH_BACKENDS, BenchSpec

MEASURE_FIELDS = ["batch_sizes", "dtype", "warmup", "iters", "min_time_s", "threads", "device"]
FILE_FIELDS = ["model.input_shape"]
FILE_FILTER = "Exported models (*.onnx *.pt2 *.pt *.ts *.ep);;All files (*)"
DEFAULT_BATCHES = [1, 8, 32]  # three points make a latency-vs-batch line; BenchSpec's own default is [1]
BACKEND_HELP = {
    "eager": "The PyTorch model as it is (the baseline).",
    "compile": "torch.compile: the first iterations compile (warm-up covers them).",
    "torchscript": "TorchScript, traced from the model (or the .pt file given).",
    "exported_program": "torch.export's ExportedProgram (or the .pt2 file given).",
    "onnxruntime": "onnxruntime on the ONNX export (or the .onnx file given).",
    "onnxruntime_int8": "onnxruntime on the QDQ int8 model of a quantize run.",
    "tensorrt": "A TensorRT engine via torch_tensorrt: CUDA only.",
}


class BenchSourcePage(QWizardPage):
    def __init__(self, runs: list[dict], data: dict):
        super().__init__()
        self.setTitle("Source")
        self.setSubTitle(
            "The model to measure: a run of this workspace (its model and checkpoint; a quantize run "
            "also gives its int8 QDQ model), or an exported file."
        )
        source = data.get("source") or {}
        self.from_run = QRadioButton("A run of this workspace")
        self.from_file = QRadioButton("An exported file (.onnx, .pt2 or TorchScript .pt)")
        group = QButtonGroup(self)
        group.addButton(self.from_run)
        group.addButton(self.from_file)
        self.run = QComboBox()
        add_run_items(self.run, runs)
        self.run.setCurrentIndex(max(0, self.run.findData(source.get("run", ""))))
        self.run.setToolTip(BenchSpec.field_help("source.run"))
        self.artifact = QLineEdit(str(data.get("artifact", "")))
        self.artifact.setPlaceholderText("optional: an exported file to measure beside the PyTorch model")
        self.artifact.setToolTip(BenchSpec.field_help("artifact"))
        self.file = QLineEdit(str(source.get("file", "")))
        self.file.setPlaceholderText("path to the exported model")
        self.file.setToolTip(BenchSpec.field_help("source.file"))
        self.file_form = SpecForm(BenchSpec, FILE_FIELDS, data)
        run_box, file_box = QWidget(), QWidget()
        run_form = QFormLayout(run_box)
        run_form.setContentsMargins(24, 0, 0, 0)
        run_form.addRow("Run", self.run)
        run_form.addRow("Exported file", _with_browse(self.artifact, self))
        file_layout = QFormLayout(file_box)
        file_layout.setContentsMargins(24, 0, 0, 0)
        file_layout.addRow("File", _with_browse(self.file, self))
        file_layout.addRow(self.file_form)
        self.run_box, self.file_box = run_box, file_box
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.empty = QLabel(
            "No finished run in this workspace yet: measure an exported file, or train a model "
            "first (Ctrl+T)."
        )
        self.empty.setWordWrap(True)
        self.empty.setVisible(not runs)
        layout = QVBoxLayout(self)
        for widget in (self.from_run, run_box, self.from_file, file_box, self.empty):
            layout.addWidget(widget)
        layout.addStretch(1)
        layout.addWidget(self.error_label)
        use_file = bool(source.get("file")) or not runs
        (self.from_file if use_file else self.from_run).setChecked(True)
        self.from_run.setEnabled(bool(runs))
        self._show_choice()
        self.from_run.toggled.connect(self._show_choice)
        for signal in (
            self.run.currentIndexChanged,
            self.artifact.textChanged,
            self.file.textChanged,
            self.from_run.toggled,
        ):
            signal.connect(self.completeChanged)

    def _show_choice(self) -> None:
        self.run_box.setEnabled(self.from_run.isChecked())
        self.file_box.setEnabled(self.from_file.isChecked())

    def apply_to(self, data: dict) -> dict:
        if self.from_run.isChecked():
            data["source"] = {"run": self.run.currentData() or "", "file": ""}
            data["artifact"] = self.artifact.text().strip()
        else:
            data["source"] = {"run": "", "file": self.file.text().strip()}
            data["artifact"] = ""
            self.file_form.apply_to(data)
        return data

    def isComplete(self) -> bool:  # noqa: N802 (Qt override)
        chosen = self.run.currentData() if self.from_run.isChecked() else self.file.text().strip()
        return bool(chosen) and not self.error_label.text()


def _with_browse(edit: QLineEdit, parent: QWidget) -> QWidget:
    box = QWidget()
    row = QHBoxLayout(box)
    row.setContentsMargins(0, 0, 0, 0)
    row.addWidget(edit, 1)
    button = QPushButton("Browse…")

    def browse() -> None:
        path, _ = QFileDialog.getOpenFileName(
            parent, "Exported model", edit.text() or str(Path.home()), FILE_FILTER
        )
        if path:
            edit.setText(path)

    button.clicked.connect(browse)
    row.addWidget(button)
    return box


class BackendsPage(CheckedPage):
    def __init__(self, data: dict):
        super().__init__()
        self.setTitle("Backends, batch sizes and timing")
        self.setSubTitle(
            "Each backend is measured at each batch size. A backend that cannot run here (no CUDA, no "
            "onnxruntime) is reported as unavailable with the reason, not as a failure."
        )
        chosen = set(data.get("backends") or [])
        self.backends: dict[str, QCheckBox] = {}
        grid = QGridLayout()
        for index, name in enumerate(BENCH_BACKENDS):
            box = QCheckBox(name)
            box.setToolTip(BACKEND_HELP.get(name, ""))
            box.setChecked(name in chosen)
            self.backends[name] = box
            grid.addWidget(box, index // 3, index % 3)
        self.backend_error = QLabel()
        self.backend_error.setWordWrap(True)
        self.backend_error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.backend_error.hide()
        self.form = SpecForm(BenchSpec, MEASURE_FIELDS, data)
        relabel(self.form)
        self.form.widgets["batch_sizes"].setPlaceholderText("e.g. 1,8,64")
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet(f"color: {ERROR_COLOUR}")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<b>Backends</b>"))
        layout.addLayout(grid)
        layout.addWidget(self.backend_error)
        layout.addSpacing(8)
        layout.addWidget(self.form)
        layout.addStretch(1)
        layout.addWidget(self.error_label)

    def chosen(self) -> list[str]:
        return [name for name, box in self.backends.items() if box.isChecked()]

    def set_chosen(self, names) -> None:
        for name, box in self.backends.items():
            box.setChecked(name in set(names))

    def apply_to(self, data: dict) -> dict:
        data["backends"] = self.chosen()
        self.form.apply_to(data)
        return data


class BenchWizard(QWizard):
    """`runs`: finished training and quantize runs ({id, task, model, scheme}); `start`: BenchSpec data to
    open on (a source, an artifact, "Benchmark again"). `spec` holds the validated BenchSpec (None while
    something is wrong, `error` says what), kept up to date as fields change, so it can be read without
    exec()."""

    def __init__(self, runs: list[dict], *, start: dict | None = None, device: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("New benchmark")
        self.setWizardStyle(QWizard.ModernStyle)
        self.setButtonText(QWizard.FinishButton, "Run")
        self.setOption(QWizard.HaveHelpButton, False)
        self.resize(720, 620)
        self.spec: BenchSpec | None = None
        self.error = ""
        data = BenchSpec().to_dict()
        data["batch_sizes"] = list(DEFAULT_BATCHES)
        if device:
            data["device"] = device
        for key, value in (start or {}).items():
            data[key] = copy.deepcopy(value)
        self.start_data = data
        self.source_page = BenchSourcePage(runs, data)
        self.backends_page = BackendsPage(data)
        self.addPage(self.source_page)
        self.addPage(self.backends_page)
        for box in self.backends_page.backends.values():
            box.toggled.connect(self.rebuild)
        self.backends_page.form.changed.connect(self.rebuild)
        page = self.source_page
        page.file_form.changed.connect(self.rebuild)
        for signal in (
            page.run.currentIndexChanged,
            page.artifact.textChanged,
            page.file.textChanged,
            page.from_run.toggled,
        ):
            signal.connect(self.rebuild)
        self.rebuild()

    def spec_data(self) -> dict:
        data = copy.deepcopy(self.start_data)
        self.source_page.apply_to(data)
        self.backends_page.apply_to(data)
        return data

    def rebuild(self, *args) -> BenchSpec | None:
        data = self.spec_data()
        fields = [*MEASURE_FIELDS, "backends", "source.run", "source.file", "artifact", *FILE_FIELDS]
        errors, general = field_errors(BenchSpec, data, fields)
        page = self.backends_page
        page.form.set_errors(errors)
        self.source_page.file_form.set_errors(errors)
        backend_error = errors.get("backends", "")
        if not data["backends"]:
            backend_error = "Tick at least one backend to measure."
        page.backend_error.setText(backend_error)
        page.backend_error.setVisible(bool(backend_error))
        source_errors = [
            errors[f] for f in ("source.run", "source.file", "artifact", *FILE_FIELDS) if f in errors
        ]
        self.source_page.error_label.setText(source_errors[0] if source_errors else "")
        self.source_page.completeChanged.emit()
        page.set_has_errors(bool(backend_error) or any(f in errors for f in MEASURE_FIELDS))
        first = backend_error or next(iter(errors.values()), general)
        source = data["source"]
        if not source["run"] and not source["file"]:
            self.spec, self.error = None, "Pick a run or an exported file to measure on the Source page."
        elif first:
            self.spec, self.error = None, f"Fix this before running: {first}"
        else:
            self.spec, self.error = BenchSpec.from_dict(data), ""
        page.error_label.setText(self.error)
        return self.spec

    def accept(self) -> None:
        if self.rebuild() is None:
            return
        super().accept()
