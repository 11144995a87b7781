"""The training wizard: dataset → model → hyperparameters → device and speed → review (TOML) → start.

Every page edits one TrainSpec. Each edit is checked at once with TrainSpec.from_dict, the same check the
command line makes: the message appears under the field it names and Next waits until the page is valid.
It starts from a given spec ("train again"), else the last one started, and the review page shows the TOML
that `workbench train spec.toml` would run.
"""

from __future__ import annotations

import copy
import html
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont, QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWizard,
    QWizardPage,
)

from workbench.errors import SpecError
from workbench.gui.panels.data.dataset_dialog import DatasetDialog, inapplicable_fields
from workbench.gui.state import DatasetState
from workbench.gui.widgets.checked_page import CheckedPage
from workbench.gui.widgets.device_picker import amp_unavailable_reason
from workbench.gui.widgets.spec_form import ERROR_COLOUR, SpecForm, field_errors
from workbench.specs import DataSpec, TrainSpec

MODEL_CHOICES = ("cnn", "mlp", "torchvision:resnet18", "torchvision:mobilenet_v3_small", "torchvision:efficientnet_b0")
HYPER_FIELDS = ["epochs", "batch_size", "lr", "optimizer", "momentum", "weight_decay", "no_decay_bias_norm",
                "scheduler", "step_size", "gamma", "loss", "label_smoothing", "grad_accum_steps", "clip_grad_norm",
                "clip_grad_value", "seed", "deterministic", "checkpoint_every", "keep_best", "early_stop_patience",
                "log_every_steps"]
SPEED_FIELDS = ["channels_last", "dataset.num_workers", "dataset.pin_memory", "distributed", "nproc", "profile_steps"]
MODEL_FIELDS = ["model.num_classes", "model.input_shape", "model.checkpoint", "model.weights", "model.replace_head",
                "model.freeze"]
CLUSTER_TIP = "The torchrun command and a SLURM batch script that run this spec on several machines"
LAST_SPEC_KEY = "train_spec"  # the last spec the wizard started, as JSON


def load_last_spec(settings) -> TrainSpec | None:
    """The spec the wizard last started, from the window's Settings; None when there is none or it is stale."""
    if settings is None:
        return None
    text = settings.get(LAST_SPEC_KEY)
    if not text:
        return None
    try:
        return TrainSpec.from_json(str(text), source="saved settings")
    except SpecError:
        return None  # written by an older version whose fields have changed: start from the defaults


def save_last_spec(settings, spec: TrainSpec) -> None:
    if settings is None:
        return
    settings.set(LAST_SPEC_KEY, spec.to_json())


def _disable_item(combo: QComboBox, index: int, reason: str) -> None:
    model = combo.model()
    if isinstance(model, QStandardItemModel):
        item = model.item(index)
        item.setFlags(item.flags() & ~Qt.ItemIsEnabled)
        item.setToolTip(reason)


def _error_label() -> QLabel:
    label = QLabel()
    label.setWordWrap(True)
    label.setStyleSheet(f"color: {ERROR_COLOUR}")
    label.hide()
    return label


class _FormPage(CheckedPage):
    """A page whose Next stays disabled while a field on it is invalid (the wizard tells it which)."""

    fields: list[str] = []


class DatasetPage(QWizardPage):
    changed = Signal()  # the dataset this run uses changed

    def __init__(self, state: DatasetState, data_dir: str, spec: DataSpec | None = None, note: str = ""):
        super().__init__()
        self.state = state
        self.data_dir = data_dir
        self.spec = spec or state.spec
        self.setTitle("Dataset")
        self.setSubTitle("The data to train on: the dataset chosen in the Data tab, or another one.")
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.note = QLabel(note)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #c77700")
        self.note.setVisible(bool(note))
        change = QPushButton("Change dataset…")
        change.clicked.connect(self._on_change_clicked)
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.summary)
        layout.addWidget(change, 0, Qt.AlignLeft)
        layout.addStretch(1)
        # The Data tab may take a choice back (it failed to load): follow it.
        state.changed.connect(self._on_state_changed)
        self.following = True
        self.refresh()

    def refresh(self) -> None:
        spec = self.spec
        unused = inapplicable_fields(spec.name)
        if spec.name == "fake":
            source = f"{spec.size:,} random images in {spec.num_classes} classes"
        elif "root" in unused:
            source = "bundled with scikit-learn, works offline"
        else:
            source = "root " + html.escape(spec.root or self.data_dir or "(workspace data folder)")
            if spec.download and "download" not in unused:
                source += " · downloads what is missing"
        augment = ", ".join(step["name"] for step in spec.augment) or "none"
        size = "×".join(map(str, spec.image_size)) or "native"
        normalise = spec.normalize if isinstance(spec.normalize, str) else "custom"
        self.summary.setText(
            f"<b>{spec.name}</b> · {source}<br>"
            f"validation {spec.val_fraction:.0%} · test {spec.test_fraction:.0%} (where the dataset has no test "
            f"split) · split seed {spec.seed}<br>size {size} · normalise {normalise} · augmentation: {augment}")

    def _set_spec(self, spec: DataSpec) -> None:
        self.spec = spec
        self.refresh()
        self.changed.emit()

    def _on_state_changed(self) -> None:
        self._set_spec(self.state.spec)

    def _on_change_clicked(self) -> None:
        dialog = DatasetDialog(self.spec, self.data_dir, self)
        if dialog.exec():
            self._set_spec(dialog.spec())
            self.state.set_spec(dialog.spec())


class ModelPage(_FormPage):
    fields = [*MODEL_FIELDS, "model.name"]

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
        self.name_error = _error_label()
        self.user_code_note = QLabel("This runs the Python code in that file inside the worker process, with "
                                     "your permissions. Only use files you trust.")
        self.user_code_note.setWordWrap(True)
        self.user_code_note.setStyleSheet("color: #c77700")
        self.form = SpecForm(TrainSpec, MODEL_FIELDS, spec.to_dict())
        # In the form's own layout, so every label on the page lines up in one column.
        form = self.form.layout_
        form.insertRow(0, "Architecture", self.name)
        form.insertRow(1, "Model file", file_row)
        form.insertRow(2, "", self.name_error)
        form.insertRow(3, "", self.user_code_note)
        layout = QVBoxLayout(self)
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

    def set_errors(self, errors: dict[str, str]) -> None:
        self.form.set_errors(errors)
        self.name_error.setText(errors.get("model.name", ""))
        self.name_error.setVisible("model.name" in errors)

    def _update_file_row(self, *args) -> None:
        is_file = self.name.currentText().strip() == "file"
        for widget in self._file_widgets:
            widget.setEnabled(is_file)
        self.user_code_note.setVisible(is_file)

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Model file", self.file_path.text(), "Python files (*.py)")
        if path:
            self.file_path.setText(path)


class HyperparametersPage(_FormPage):
    fields = HYPER_FIELDS

    def __init__(self, spec: TrainSpec):
        super().__init__()
        self.setTitle("Hyperparameters")
        self.setSubTitle("Defaults that train the built-in models well; hover a field to see what it does.")
        self.form = SpecForm(TrainSpec, HYPER_FIELDS, spec.to_dict())
        # Twenty-one fields and their messages outgrow the window: scroll rather than squash the rows.
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.NoFrame)
        scroll.setWidget(self.form)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll)
        self.update_applicability()

    def set_errors(self, errors: dict[str, str]) -> None:
        self.form.set_errors(errors)

    def update_applicability(self, *args) -> None:
        """Grey out what the chosen optimiser, schedule and loss do not use (the training loop ignores it)."""
        form = self.form
        optimizer, scheduler, loss = form.value("optimizer"), form.value("scheduler"), form.value("loss")
        form.set_applicable("momentum", optimizer in ("sgd", "rmsprop"),
                            f"Not used by {optimizer}: only sgd and rmsprop take a momentum.")
        for field in ("step_size", "gamma"):
            form.set_applicable(field, scheduler == "step",
                                f"Not used with scheduler {scheduler}: only the step schedule uses it.")
        form.set_applicable("label_smoothing", loss in ("auto", "cross_entropy"),
                            f"Not used by the {loss} loss: only cross_entropy smooths labels.")


class SpeedPage(_FormPage):
    """Device and speed options; what the chosen device cannot do is greyed out with the reason."""

    fields = [*SPEED_FIELDS, "device", "amp", "compile"]

    def __init__(self, spec: TrainSpec, devices: list[dict], preferred_device: str):
        super().__init__()
        self.devices = {d["id"]: d for d in devices}
        self.setTitle("Device and speed")
        self.setSubTitle("Where to train and how fast: mixed precision, compilation, memory layout, loaders.")
        self.device = QComboBox()
        self.device.addItem("auto (best available)", "auto")
        for device_id, info in self.devices.items():
            self.device.addItem(f"{device_id} · {info.get('name', '')}", device_id)
        index = self.device.findData(spec.device) if spec.device != "auto" else -1
        if index < 0:  # "auto", or a device this worker does not have
            index = self.device.findData(preferred_device)
        self.device.setCurrentIndex(max(0, index))
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
        form = self.form.layout_  # one label column for the whole page
        form.insertRow(0, "Device", self.device)
        form.insertRow(1, "Mixed precision", self.amp)
        form.insertRow(2, "torch.compile", self.compile)
        form.insertRow(3, self.reasons)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addStretch(1)
        self.device.currentIndexChanged.connect(self.update_availability)
        self.update_availability()

    def set_errors(self, errors: dict[str, str]) -> None:
        self.form.set_errors(errors)

    def _device_info(self) -> dict | None:
        device = self.device.currentData()
        if device == "auto":
            device = next((d for d in self.devices if d.startswith("cuda")), "cpu")
        return self.devices.get(device)

    def update_availability(self, *args) -> None:
        """Grey out what the device cannot do, or cannot do usefully, and say why (from its capabilities)."""
        info = self._device_info()
        for combo in (self.amp, self.compile):
            for index in range(combo.count()):
                combo.model().item(index).setEnabled(True)
                combo.model().item(index).setToolTip("")
        notes = []
        if info is None:
            self.reasons.setText("Device capabilities are not known yet (the worker is still starting).")
            return
        caps = info.get("capabilities") or {}
        for index in range(1, self.amp.count()):
            reason = amp_unavailable_reason(info, self.amp.itemData(index))
            if reason:
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
        pin_help = TrainSpec.field_help("dataset.pin_memory")
        if device == "cpu":
            pin.setChecked(False)
            notes.append("Pinned memory only helps copies to a GPU.")
            pin.setToolTip(f"Not used on the CPU: pinned memory only helps copies to a GPU.\n\n{pin_help}")
        else:
            pin.setToolTip(pin_help)
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
        self.text.setPlaceholderText("No spec while a field is invalid: go back to the field named below.")
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.save = QPushButton("Save spec…")
        self.save.setToolTip("Save this spec as TOML to run or share later")
        self.save.clicked.connect(self._on_save_clicked)
        self.cluster = QPushButton("Run on a cluster…")
        self.cluster.setToolTip(CLUSTER_TIP)
        self.cluster.clicked.connect(self.wizard_.open_cluster_page)
        buttons = QHBoxLayout()
        buttons.addWidget(self.save)
        buttons.addWidget(self.cluster)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        self.setButtonText(QWizard.FinishButton, "Start training")

    def initializePage(self) -> None:  # noqa: N802 (Qt override)
        self.wizard_.rebuild()
        self.show_spec()

    def show_spec(self) -> None:
        spec, error = self.wizard_.spec, self.wizard_.error
        self.text.setPlainText(spec.to_toml() if spec else "")
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.save.setEnabled(spec is not None)
        self.save.setToolTip("Save this spec as TOML to run or share later" if spec is not None
                             else "There is no valid spec to save yet: fix the field named below.")
        self.cluster.setEnabled(spec is not None)
        self.cluster.setToolTip(CLUSTER_TIP if spec is not None
                                else "There is no valid spec to run yet: fix the field named below.")
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return self.wizard_.spec is not None

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save spec", "train.toml", "TOML (*.toml)")
        if path and self.wizard_.spec is not None:
            Path(path).write_text(self.wizard_.spec.to_toml(), encoding="utf-8")


class TrainingWizard(QWizard):
    """Builds a TrainSpec. It starts from `start` (a TrainSpec or its plain dict: "train again with changes",
    dataset included), else from the last spec started with `settings`, else from the defaults; in the last
    two cases the dataset is the Data tab's and `num_classes` (from the loaded dataset) sets the model's outputs.
    """

    def __init__(self, state: DatasetState, devices: list[dict], preferred_device: str = "cpu",
                 start: TrainSpec | dict | None = None, num_classes: int | None = None, data_dir: str = "",
                 parent=None, settings=None, workspace: str | Path | None = None):
        super().__init__(parent)
        self.setWindowTitle("New training run")
        # The cluster page's default shared workspace: given, else the window's, else the data folder's parent.
        self.workspace = str(workspace or getattr(parent, "workspace", "") or (Path(data_dir).parent if data_dir
                                                                              else ""))
        self.cluster_page = None
        self.setWizardStyle(QWizard.ClassicStyle)
        self.setMinimumSize(720, 640)
        self.state = state
        self.settings = settings
        start_spec, explicit, note = self._starting_spec(start)
        if not explicit:
            start_spec.dataset = copy.deepcopy(state.spec)
            if num_classes:
                start_spec.model.num_classes = num_classes
        self.start_data = start_spec.to_dict()
        self.spec: TrainSpec | None = None
        self.error = ""
        self.invalid_fields: dict[str, str] = {}  # field -> its message, as shown under it
        self.dataset_page = DatasetPage(state, data_dir, start_spec.dataset, note)
        self.model_page = ModelPage(start_spec)
        self.hyper_page = HyperparametersPage(start_spec)
        self.speed_page = SpeedPage(start_spec, devices, preferred_device)
        self.review_page = ReviewPage(self)
        for page in (self.dataset_page, self.model_page, self.hyper_page, self.speed_page, self.review_page):
            self.addPage(page)
        self.form_pages = (self.model_page, self.hyper_page, self.speed_page)
        for page in self.form_pages:
            page.form.changed.connect(self.rebuild)
        for widget in (self.model_page.file_path, self.model_page.file_class):
            widget.textChanged.connect(self.rebuild)
        self.model_page.name.currentTextChanged.connect(self.rebuild)
        for combo in (self.speed_page.device, self.speed_page.amp, self.speed_page.compile):
            combo.currentIndexChanged.connect(self.rebuild)
        self.dataset_page.changed.connect(self._on_dataset_changed)
        self.rebuild()

    def _starting_spec(self, start: TrainSpec | dict | None) -> tuple[TrainSpec, bool, str]:
        """(the spec to start from, whether the caller gave it, a note on why a given one was not used)."""
        note = ""
        if isinstance(start, TrainSpec):
            return copy.deepcopy(start), True, note
        if start is not None:
            try:
                return TrainSpec.from_dict(start), True, note
            except SpecError as exc:
                note = f"The run's spec cannot be used as it is ({exc}); starting from the last values instead."
        return load_last_spec(self.settings) or TrainSpec(), False, note

    def _on_dataset_changed(self) -> None:
        # The dataset dialog also edits the loader fields this wizard shows on its speed page.
        self.speed_page.form.set_values({"dataset": self.dataset_page.spec.to_dict()})
        self.speed_page.update_availability()
        self.rebuild()

    def spec_data(self) -> dict:
        # Start from the starting spec, so a field that is greyed out (unused) keeps the value it had.
        data = copy.deepcopy(self.start_data)
        dataset = self.dataset_page.spec.to_dict()
        # A root left over from another dataset (fake has none) must not travel into the run's spec.
        unused = inapplicable_fields(dataset["name"])
        data["dataset"] = {key: value for key, value in dataset.items() if key not in unused}
        self.model_page.form.apply_to(data)
        data["model"]["name"] = self.model_page.model_name()
        self.hyper_page.form.apply_to(data)
        self.speed_page.form.apply_to(data)
        data["device"] = self.speed_page.device.currentData()
        data["amp"] = self.speed_page.amp.currentData()
        data["compile"] = self.speed_page.compile.currentData()
        return data

    def rebuild(self, *args) -> TrainSpec | None:
        """Validate the whole spec now: messages under the fields they name, Next and Save follow."""
        self.hyper_page.update_applicability()
        data = self.spec_data()
        fields = [field for page in self.form_pages for field in page.fields]
        errors, general = field_errors(TrainSpec, data, fields)
        self.invalid_fields = errors
        for page in self.form_pages:
            page.set_errors(errors)
            page.set_has_errors(any(field in errors for field in page.fields))
        first = next(iter(errors.values()), general)
        if first:
            self.spec, self.error = None, f"Fix this before starting: {first}"
        else:
            self.spec, self.error = TrainSpec.from_dict(data), ""
        if self.currentPage() is self.review_page:
            self.review_page.show_spec()
        return self.spec

    def open_cluster_page(self) -> None:
        """Show "Run on a cluster" for the current spec; the wizard stays open and Start is unchanged."""
        from workbench.gui.panels.training.cluster_page import ClusterPage

        if self.rebuild() is None:
            return
        if self.cluster_page is not None:
            self.cluster_page.close()
            self.cluster_page.deleteLater()
        self.cluster_page = ClusterPage(copy.deepcopy(self.spec), self.workspace, self)
        self.cluster_page.show()

    def done(self, result: int) -> None:
        # The window keeps its finished wizards as children; a closed one must stop following the Data tab.
        if self.dataset_page.following:
            self.dataset_page.following = False
            self.state.changed.disconnect(self.dataset_page._on_state_changed)
        super().done(result)

    def accept(self) -> None:
        if self.rebuild() is None:
            return  # Start is disabled then; this guards a programmatic accept
        save_last_spec(self.settings, self.spec)
        super().accept()
