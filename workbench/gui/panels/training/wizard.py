"""The training wizard: dataset → model → hyperparameters → device and speed → review (TOML) → start.

Every page edits one TrainSpec; the review page validates it with TrainSpec.from_dict, the same check
the command line makes, and shows the TOML that `workbench train spec.toml` would run.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWizard,
    QWizardPage,
)

from workbench.errors import SpecError
from workbench.gui.panels.data.dataset_dialog import DatasetDialog
from workbench.gui.state import DatasetState
from workbench.gui.widgets.spec_form import SpecForm
from workbench.specs import TrainSpec

MODEL_CHOICES = ("cnn", "mlp", "torchvision:resnet18", "torchvision:mobilenet_v3_small", "torchvision:efficientnet_b0")
HYPER_FIELDS = ["epochs", "batch_size", "lr", "optimizer", "momentum", "weight_decay", "no_decay_bias_norm",
                "scheduler", "step_size", "gamma", "loss", "label_smoothing", "grad_accum_steps", "clip_grad_norm",
                "clip_grad_value", "seed", "deterministic", "checkpoint_every", "keep_best", "early_stop_patience",
                "log_every_steps"]
SPEED_FIELDS = ["channels_last", "dataset.num_workers", "dataset.pin_memory", "distributed", "nproc", "profile_steps"]
MODEL_FIELDS = ["model.num_classes", "model.input_shape", "model.checkpoint", "model.weights", "model.replace_head",
                "model.freeze"]


def _disable_item(combo: QComboBox, index: int, reason: str) -> None:
    model = combo.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(index)
        item.setFlags(item.flags() & ~Qt.ItemIsEnabled)
        item.setToolTip(reason)


class DatasetPage(QWizardPage):
    def __init__(self, state: DatasetState, data_dir: str):
        super().__init__()
        self.state = state
        self.data_dir = data_dir
        self.setTitle("Dataset")
        self.setSubTitle("The data to train on: the dataset chosen in the Data tab, or another one.")
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        change = QPushButton("Change dataset…")
        change.clicked.connect(self._on_change_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.summary)
        layout.addWidget(change, 0, Qt.AlignLeft)
        layout.addStretch(1)
        self.refresh()

    def refresh(self) -> None:
        spec = self.state.spec
        augment = ", ".join(step["name"] for step in spec.augment) or "none"
        size = "×".join(map(str, spec.image_size)) or "native"
        self.summary.setText(
            f"<b>{spec.name}</b> · root {spec.root or self.data_dir or '(workspace data folder)'}<br>"
            f"validation {spec.val_fraction:.0%} · test {spec.test_fraction:.0%} (where the dataset has no test "
            f"split) · split seed {spec.seed}<br>size {size} · normalise {spec.normalize if isinstance(spec.normalize, str) else 'custom'}"
            f" · augmentation: {augment}")

    def _on_change_clicked(self) -> None:
        dialog = DatasetDialog(self.state.spec, self.data_dir, self)
        if dialog.exec():
            self.state.set_spec(dialog.spec())
            self.refresh()


class ModelPage(QWizardPage):
    def __init__(self, spec: TrainSpec):
        super().__init__()
        self.setTitle("Model")
        self.setSubTitle("Which network to train, and where its weights start.")
        self.name = QComboBox()
        self.name.setEditable(True)
        self.name.addItems(MODEL_CHOICES)
        self.name.setToolTip(TrainSpec.field_help("model.name"))
        self.name.setCurrentText(spec.model.name if not spec.model.name.startswith("file:") else "file")
        self.name.addItem("file")
        self.file_path = QLineEdit()
        self.file_path.setPlaceholderText("/path/to/model.py")
        self.file_class = QLineEdit()
        self.file_class.setPlaceholderText("ClassOrFactory")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        if spec.model.name.startswith("file:"):
            _, path, cls = spec.model.name.split(":", 2) if spec.model.name.count(":") >= 2 else ("", "", "")
            self.file_path.setText(path)
            self.file_class.setText(cls)
        file_row = QHBoxLayout()
        file_row.addWidget(self.file_path, 3)
        file_row.addWidget(self.file_class, 1)
        file_row.addWidget(browse)
        self.user_code_note = QLabel("This runs the Python code in that file inside the worker process, with "
                                     "your permissions. Only use files you trust.")
        self.user_code_note.setWordWrap(True)
        self.user_code_note.setStyleSheet("color: #c77700")
        self.form = SpecForm(TrainSpec, MODEL_FIELDS, spec.to_dict())
        form = QFormLayout()
        form.addRow("Architecture", self.name)
        form.addRow("Model file", file_row)
        form.addRow("", self.user_code_note)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.form)
        layout.addStretch(1)
        self.name.currentTextChanged.connect(self._update_file_row)
        self._file_widgets = (self.file_path, self.file_class, browse)
        self._update_file_row()

    def model_name(self) -> str:
        name = self.name.currentText().strip()
        if name == "file":
            return f"file:{self.file_path.text().strip()}:{self.file_class.text().strip()}"
        return name

    def _update_file_row(self, *args) -> None:
        is_file = self.name.currentText().strip() == "file"
        for widget in self._file_widgets:
            widget.setEnabled(is_file)
        self.user_code_note.setVisible(is_file)

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model file", self.file_path.text(), "Python files (*.py)")
        if path:
            self.file_path.setText(path)


class HyperparametersPage(QWizardPage):
    def __init__(self, spec: TrainSpec):
        super().__init__()
        self.setTitle("Hyperparameters")
        self.setSubTitle("Defaults that train the built-in models well; hover a field to see what it does.")
        self.form = SpecForm(TrainSpec, HYPER_FIELDS, spec.to_dict())
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)


class SpeedPage(QWizardPage):
    """Device and speed options; what the chosen device cannot do is greyed out with the reason."""

    def __init__(self, spec: TrainSpec, devices: list[dict], preferred_device: str):
        super().__init__()
        self.devices = {d["id"]: d for d in devices}
        self.setTitle("Device and speed")
        self.setSubTitle("Where to train and how fast: mixed precision, compilation, memory layout, loaders.")
        self.device = QComboBox()
        self.device.addItem("auto (best available)", "auto")
        for device_id, info in self.devices.items():
            self.device.addItem(f"{device_id} · {info.get('name', '')}", device_id)
        self.device.setCurrentIndex(max(0, self.device.findData(spec.device if spec.device != "auto"
                                                                else preferred_device)))
        self.device.setToolTip(TrainSpec.field_help("device"))
        self.amp = QComboBox()
        for choice in ("none", "bf16", "fp16"):
            self.amp.addItem(choice, choice)
        self.amp.setCurrentIndex(max(0, self.amp.findData(spec.amp)))
        self.amp.setToolTip(TrainSpec.field_help("amp"))
        self.compile = QComboBox()
        for choice in ("off", "default", "reduce-overhead", "max-autotune"):
            self.compile.addItem(choice, choice)
        self.compile.setCurrentIndex(max(0, self.compile.findData(spec.compile)))
        self.compile.setToolTip(TrainSpec.field_help("compile"))
        self.reasons = QLabel()
        self.reasons.setWordWrap(True)
        self.reasons.setStyleSheet("color: palette(placeholder-text)")
        self.form = SpecForm(TrainSpec, SPEED_FIELDS, spec.to_dict())
        form = QFormLayout()
        form.addRow("Device", self.device)
        form.addRow("Mixed precision", self.amp)
        form.addRow("torch.compile", self.compile)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.reasons)
        layout.addWidget(self.form)
        layout.addStretch(1)
        self.device.currentIndexChanged.connect(self.update_availability)
        self.update_availability()

    def _capabilities(self) -> dict | None:
        device = self.device.currentData()
        if device == "auto":
            device = next((d for d in self.devices if d.startswith("cuda")), "cpu")
        info = self.devices.get(device)
        return info.get("capabilities") if info else None

    def update_availability(self, *args) -> None:
        """Grey out what the device cannot do and say why (from the worker's device capabilities)."""
        caps = self._capabilities()
        for index in range(self.amp.count()):
            self.amp.model().item(index).setEnabled(True)
        for index in range(self.compile.count()):
            self.compile.model().item(index).setEnabled(True)
        notes = []
        if caps is None:
            self.reasons.setText("Device capabilities are not known yet (the worker is still starting).")
            return
        for index, key in ((1, "autocast_bf16"), (2, "autocast_fp16")):
            if not caps.get(key):
                reason = f"{self.amp.itemData(index)} autocast is not supported on this device"
                _disable_item(self.amp, index, reason)
                notes.append(reason)
        compile_info = caps.get("compile", {})
        if not compile_info.get("available", False):
            for index in range(1, self.compile.count()):
                _disable_item(self.compile, index, compile_info.get("reason", "unavailable"))
            notes.append(f"torch.compile: {compile_info.get('reason', 'unavailable')}")
        if not self.amp.model().item(self.amp.currentIndex()).isEnabled():
            self.amp.setCurrentIndex(0)
        if not self.compile.model().item(self.compile.currentIndex()).isEnabled():
            self.compile.setCurrentIndex(0)
        device = self.device.currentData()
        pin = self.form.widgets["dataset.pin_memory"]
        pin.setEnabled(device != "cpu")
        if device == "cpu":
            pin.setChecked(False)
            notes.append("Pinned memory only helps copies to a GPU.")
        self.reasons.setText("\n".join(notes))


class ReviewPage(QWizardPage):
    def __init__(self, wizard: TrainingWizard):
        super().__init__()
        self.wizard_ = wizard
        self.setTitle("Review")
        self.setSubTitle("The spec this run will use. `workbench train spec.toml` runs the same thing headless.")
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(QFont("monospace"))
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d0342c")
        save = QPushButton("Save spec…")
        save.setToolTip("Save this spec as TOML to run or share later")
        save.clicked.connect(self._on_save_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.error)
        layout.addWidget(save, 0, Qt.AlignLeft)
        self.setButtonText(QWizard.FinishButton, "Start training")

    def initializePage(self) -> None:  # noqa: N802 (Qt override)
        self.wizard_.rebuild()
        spec, error = self.wizard_.spec, self.wizard_.error
        self.text.setPlainText(spec.to_toml() if spec else "")
        self.error.setText(error)
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return self.wizard_.spec is not None

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save spec", "train.toml", "TOML (*.toml)")
        if path and self.wizard_.spec is not None:
            Path(path).write_text(self.wizard_.spec.to_toml(), encoding="utf-8")


class TrainingWizard(QWizard):
    def __init__(self, state: DatasetState, devices: list[dict], preferred_device: str = "cpu",
                 start: TrainSpec | None = None, num_classes: int | None = None, data_dir: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("New training run")
        self.setWizardStyle(QWizard.ClassicStyle)
        self.setMinimumSize(720, 640)
        self.state = state
        start = start or TrainSpec()
        if num_classes:
            start.model.num_classes = num_classes
        self.spec: TrainSpec | None = None
        self.error = ""
        self.dataset_page = DatasetPage(state, data_dir)
        self.model_page = ModelPage(start)
        self.hyper_page = HyperparametersPage(start)
        self.speed_page = SpeedPage(start, devices, preferred_device)
        self.review_page = ReviewPage(self)
        for page in (self.dataset_page, self.model_page, self.hyper_page, self.speed_page, self.review_page):
            self.addPage(page)

    def spec_data(self) -> dict:
        data: dict = {"dataset": self.state.spec.to_dict()}
        self.model_page.form.apply_to(data)
        data["model"]["name"] = self.model_page.model_name()
        self.hyper_page.form.apply_to(data)
        self.speed_page.form.apply_to(data)
        data["device"] = self.speed_page.device.currentData()
        data["amp"] = self.speed_page.amp.currentData()
        data["compile"] = self.speed_page.compile.currentData()
        return data

    def rebuild(self) -> TrainSpec | None:
        try:
            self.spec, self.error = TrainSpec.from_dict(self.spec_data()), ""
        except SpecError as exc:
            self.spec, self.error = None, f"Fix this before starting: {exc}"
        return self.spec
