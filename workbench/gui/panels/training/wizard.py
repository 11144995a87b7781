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

from PySide6.QtCore import Qt, QTimer, Signal
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
    QWidget,
    QWizard,
    QWizardPage,
)

from workbench.errors import SpecError
from workbench.gui.panels.data.dataset_dialog import DatasetDialog, inapplicable_fields
from workbench.gui.panels.training.task_choice import TaskChoice
from workbench.gui.panels.training.user_code_fields import PERMISSION_NOTE, UserCodeFields, split_user_name
from workbench.gui.state import DatasetState
from workbench.gui.trust_gate import ERROR_TYPE as UNTRUSTED
from workbench.gui.user_args import ARGS_EXAMPLES, args_or_message, format_args
from workbench.gui.widgets.checked_page import CheckedPage
from workbench.gui.widgets.device_picker import amp_unavailable_reason
from workbench.gui.widgets.spec_form import ERROR_COLOUR, SpecForm, field_errors
from workbench.results import dig
from workbench.specs import DataSpec, LrFindSpec, TrainSpec

MODEL_CHOICES = (
    "cnn",
    "mlp",
    "torchvision:resnet18",
    "torchvision:mobilenet_v3_small",
    "torchvision:efficientnet_b0",
)
HYPER_FIELDS = [
    "epochs",
    "batch_size",
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "no_decay_bias_norm",
    "scheduler",
    "step_size",
    "gamma",
    "loss",
    "label_smoothing",
    "grad_accum_steps",
    "clip_grad_norm",
    "clip_grad_value",
    "seed",
    "deterministic",
    "checkpoint_every",
    "keep_best",
    "early_stop_patience",
    "log_every_steps",
    "tensorboard",
]
# layer_stats_every sits with the profiler: both record what the run does, at a cost in speed.
SPEED_FIELDS = [
    "channels_last",
    "dataset.num_workers",
    "dataset.pin_memory",
    "distributed",
    "nproc",
    "profile_steps",
    "layer_stats_every",
]
MODEL_FIELDS = [
    "model.num_classes",
    "model.input_shape",
    "model.checkpoint",
    "model.weights",
    "model.replace_head",
    "model.freeze",
]
# Where the dataset comes from (the Dataset page's Source): a registered dataset, or the user's own code.
DATA_SOURCES = (
    ("builtin", "Built-in dataset"),
    ("file", "Python file…"),
    ("lightning", "LightningDataModule…"),
)
USER_SPLIT_FIELDS = ["dataset.val_fraction", "dataset.test_fraction", "dataset.seed"]
USER_UNUSED = ("root", "download", "image_size", "normalize", "augment", "size", "num_classes")
LOADER_FIELDS = ("num_workers", "pin_memory", "on_device")  # how batches load, not what the data is
# The model page's entries for the user's own code; the bare words are what earlier versions (and tests)
# typed.
USER_MODEL_TEXT = {"file": "Python file…", "lightning": "LightningModule…"}
USER_MODEL_CHOICES = tuple(USER_MODEL_TEXT.values())
USER_MODEL_KINDS = {kind: (text, kind) for kind, text in USER_MODEL_TEXT.items()}
LIGHTNING_NOTE = (
    "A LightningModule is trained by Lightning's own Trainer: its configure_optimizers and "
    "training_step decide the optimiser, schedule and loss, so those fields are greyed out."
)
# Hyperparameters a LightningModule decides itself; the spec maps only epochs, device, amp, accumulation,
# gradient-norm clipping and the seed onto Lightning's Trainer.
LIGHTNING_DECIDES = (
    "lr",
    "optimizer",
    "momentum",
    "weight_decay",
    "no_decay_bias_norm",
    "scheduler",
    "step_size",
    "gamma",
    "loss",
    "label_smoothing",
    "clip_grad_value",
)
# A LightningDataModule splits its data itself (its train, val and test dataloaders): the fractions do not
# apply.
LIGHTNING_SPLITS_NOTE = (
    "Not used: a LightningDataModule makes its own train, val and test dataloaders, so it "
    "splits its data itself."
)
MONITOR_FIELDS = ["monitor", "monitor_mode"]  # task=custom's, on the Dataset and task page
ASK_DELAY_MS = 350
NO_WORKER_NOTE = "auto decides from the first sample when the run starts."
OLD_WORKER_NOTE = (
    "This worker does not say which tasks fit the data, so every task is offered; the run checks."
)
CLUSTER_TIP = "The torchrun command and a SLURM batch script that run this spec on several machines"
LR_FIND_TIP = (
    "Run a learning-rate range test on this spec: up to a hundred training steps on a copy of the model "
    "while the rate grows exponentially from 1e-7 to 10, with the loss plotted against the rate. The rate "
    'where the loss falls fastest is suggested, and "Use this rate" puts it here. No run is created or '
    "changed."
)
LR_FIND_NO_WORKER = "The learning-rate finder runs on the worker, and this wizard has none."
LAST_SPEC_KEY = "train_spec"  # the last spec the wizard started, as JSON


def load_last_spec(settings) -> TrainSpec | None:
    """The spec the wizard last started, from the window's Settings; None when there is none or it is
    stale."""
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


class DatasetPage(CheckedPage):
    """The data and the task: a built-in dataset (the Data tab's, or another), or the user's own Python file,
    and the Task choice, filled from the worker's data.info about that data (asked in the background)."""

    changed = Signal()  # the dataset this run starts from changed (the Data tab's, or the dialog's)
    # a field on the page changed: its source, the user's file fields, the splits or the task
    edited = Signal()
    classes_known = Signal(int)  # data.info counted the page's dataset's classes

    def __init__(
        self,
        state: DatasetState,
        data_dir: str,
        spec: DataSpec | None = None,
        note: str = "",
        task: str = "auto",
        queries=None,
        start_data: dict | None = None,
    ):
        super().__init__()
        self.state = state
        self.data_dir = data_dir
        self.spec = spec or state.spec
        self.queries = queries
        self.setTitle("Dataset and task")
        self.setSubTitle(
            "The data to train on (the dataset chosen in the Data tab, another one, or your own "
            "Python file) and what the model learns from it."
        )
        self._build_source_fields(note)
        self._build_task_fields(task)
        self._build_form(start_data)
        self._init_info_query()
        self._connect()
        self.following = True
        self._load(self.spec)
        self._show_custom()
        self.task_choice.set_tasks(None, "" if queries is not None else NO_WORKER_NOTE)

    def _build_source_fields(self, note: str) -> None:
        """The note, the Source choice and the built-in dataset's row: its summary, a refusal, Change
        dataset…"""
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.RichText)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.note = QLabel(note)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #c77700")
        self.note.setVisible(bool(note))
        self.source = QComboBox()
        for key, text in DATA_SOURCES:
            self.source.addItem(text, key)
        self.source.setToolTip(
            "Built-in: a registered dataset (digits, MNIST, CIFAR, an image folder…). Python "
            "file: your own torch Dataset class, or a function returning one. "
            "LightningDataModule: the data module of a Lightning project."
        )
        change = QPushButton("Change dataset…")
        change.setToolTip("Choose a built-in dataset, its folder, splits and augmentation")
        change.clicked.connect(self._on_change_clicked)
        self.builtin_row = QWidget()
        builtin_layout = QVBoxLayout(self.builtin_row)
        builtin_layout.setContentsMargins(0, 0, 0, 0)
        builtin_layout.addWidget(self.summary)
        # Why a dataset chosen with Change dataset… did not stay (its files are missing, say): said here, as
        # the Data tab that found it out sits behind the wizard.
        self.refusal = QLabel()
        self.refusal.setWordWrap(True)
        self.refusal.setTextFormat(Qt.RichText)
        self.refusal.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.refusal.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.refusal.hide()
        builtin_layout.addWidget(self.refusal)
        builtin_layout.addWidget(change, 0, Qt.AlignLeft)

    def _build_task_fields(self, task: str) -> None:
        """Your own Dataset's fields, the Task choice, a custom task's loss and metrics fields, the info
        line."""
        self.user = UserCodeFields(
            "Dataset class or function", "Class or function", "MyDataset", with_args=True, parent=self
        )
        self.task_choice = TaskChoice(task)
        # task=custom: the user's loss and metrics functions, and the metric that picks the best epoch.
        self.loss_fields = UserCodeFields(
            "loss function", "Loss function", "my_loss(outputs, target)", file_label="Loss file", parent=self
        )
        self.metrics_fields = UserCodeFields(
            "metrics function",
            "Metrics function",
            "optional: my_metrics(outputs, target) -> {name: value}",
            file_label="Metrics file",
            with_note=False,
            parent=self,
        )
        self.info_line = QLabel()
        self.info_line.setWordWrap(True)
        self.info_line.setTextInteractionFlags(Qt.TextSelectableByMouse)

    def _build_form(self, start_data: dict | None) -> None:
        # The split fields as a spec form, so their messages are the spec's; the other rows join its layout so
        # every label on the page lines up in one column.
        self.splits = SpecForm(
            TrainSpec,
            [*USER_SPLIT_FIELDS, *MONITOR_FIELDS],
            {**(start_data or {}), "dataset": self.spec.to_dict()},
        )
        form = self.splits.layout_
        form.insertRow(0, "Source", self.source)
        form.insertRow(1, "Dataset", self.builtin_row)
        row = self.user.add_to(form, 2)
        form.labelForField(self.splits._rows["dataset.seed"]).setText("Split seed")
        form.insertRow(row + len(USER_SPLIT_FIELDS), "Task", self.task_choice)
        form.insertRow(row + len(USER_SPLIT_FIELDS) + 1, "", self.info_line)
        row = self.loss_fields.add_to(form, row + len(USER_SPLIT_FIELDS) + 2)
        self.metrics_fields.add_to(form, row)  # the monitor rows of the spec form follow
        for name in ("loss", "metrics"):
            kind, path, function = split_user_name(str(dig(start_data, name, default="")))
            if kind == "file":
                getattr(self, f"{name}_fields").set_name(f"file:{path}:{function}")
        layout = QVBoxLayout(self)
        layout.addWidget(self.note)
        layout.addWidget(self.splits)
        layout.addStretch(1)

    def _init_info_query(self) -> None:
        """The state of the background data.info query about the page's dataset."""
        self.info: dict | None = None  # the last data.info reply about this page's dataset
        self._info_job: str | None = None
        self._asked: dict | None = None  # the dataset data.info was last asked about
        self._ask_timer = QTimer(self)
        self._ask_timer.setSingleShot(True)
        self._ask_timer.setInterval(ASK_DELAY_MS)  # typing a path asks once it pauses, not per keystroke
        self._ask_timer.timeout.connect(self._send_info_query)
        self._pending: dict | None = None

    def _connect(self) -> None:
        self.source.currentIndexChanged.connect(self._on_source_changed)
        self.user.changed.connect(self.edited)
        self.loss_fields.changed.connect(self.edited)
        self.metrics_fields.changed.connect(self.edited)
        self.splits.changed.connect(self.edited)
        self.task_choice.changed.connect(self._show_custom)
        self.task_choice.changed.connect(self.edited)
        # The Data tab may take a choice back (it failed to load): follow it.
        self.state.changed.connect(self._on_state_changed)
        self.state.refused.connect(self._on_state_refused)

    @property
    def fields(self) -> list[str]:  # the fields whose messages this page shows (and that hold its Next)
        custom = ["loss", "metrics", *MONITOR_FIELDS] if self.is_custom() else []
        return ["dataset.name", "dataset.args", *USER_SPLIT_FIELDS, "task", *custom]

    def is_custom(self) -> bool:
        return self.task_choice.task() == "custom"

    def apply_objective(self, data: dict) -> dict:
        """task=custom: the user's loss, metrics and monitor into a TrainSpec's plain data; any other task has
        its own, so a custom run's fields (train again) do not travel on."""
        if self.is_custom():
            data["loss"] = self.loss_fields.name("file")
            data["metrics"] = "" if self.metrics_fields.is_empty() else self.metrics_fields.name("file")
            for field in MONITOR_FIELDS:
                data[field] = self.splits.value(field)
        else:
            if str(data.get("loss", "")).startswith("file:"):
                data["loss"] = "auto"
            data.update(metrics="", monitor="", monitor_mode="auto")
        return data

    def _show_custom(self, *args) -> None:
        custom = self.is_custom()
        self.loss_fields.set_visible(custom)
        self.metrics_fields.set_visible(custom)
        for field in MONITOR_FIELDS:
            self.splits.layout_.setRowVisible(self.splits._rows[field], custom)

    # -- what the page edits ---------------------------------------------------------------------
    def source_kind(self) -> str:
        """ "builtin", "file" or "lightning"."""
        return self.source.currentData()

    def apply_to(self, data: dict) -> dict:
        """Write the dataset and the task into a TrainSpec's plain data (in place) and return it."""
        dataset = self.spec.to_dict()
        kind = self.source_kind()
        if kind != "builtin":
            # The user's code reads and transforms its own data: the built-in set's folder, resize,
            # normalisation and augmentation would not be used, so they do not travel into the spec.
            dataset = {key: value for key, value in dataset.items() if key not in USER_UNUSED}
            dataset["name"] = self.user.name(kind)
            dataset["args"] = self.user.args_value()[0]
        # A root left over from another dataset (fake has none) must not travel into the run's spec.
        unused = inapplicable_fields(dataset["name"])
        data["dataset"] = {key: value for key, value in dataset.items() if key not in unused}
        if kind != "builtin":
            self.splits.apply_to(data)
        data["task"] = self.task_choice.task()
        return data

    def local_errors(self) -> dict[str, str]:
        """What only the GUI can judge: arguments that do not parse, a task the data cannot serve."""
        errors = {}
        if self.source_kind() != "builtin":
            message = self.user.args_value()[1]
            if message:
                errors["dataset.args"] = message
        problem = self.task_choice.problem()
        if problem:
            errors["task"] = problem
        return errors

    def set_errors(self, errors: dict[str, str]) -> None:
        self.splits.set_errors(errors)
        name = errors.get("dataset.name", "") or errors.get("dataset.args", "")
        if errors.get("dataset.args") and not errors.get("dataset.name"):
            name = ""  # the arguments' own message sits under the arguments
        self.user.set_name_error(name if self.source_kind() != "builtin" else "")
        self.loss_fields.set_name_error(errors.get("loss", "") if self.is_custom() else "")
        self.metrics_fields.set_name_error(errors.get("metrics", "") if self.is_custom() else "")
        self.task_choice.refresh_error()

    def refresh(self) -> None:
        spec = self.spec
        unused = inapplicable_fields(spec.name)
        if spec.name == "fake":
            source = f"{spec.size:,} random images in {spec.num_classes} classes"
        elif spec.name == "shapes_detection":
            source = f"{spec.size:,} synthetic shape images with their boxes, written at first use"
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
            f"<b>{html.escape(spec.name)}</b> · {source}<br>validation {spec.val_fraction:.0%} · test "
            f"{spec.test_fraction:.0%} (where the dataset has no test split) · split seed "
            f"{spec.seed}<br>size {size} · normalise {normalise} · augmentation: {augment}"
        )

    def _load(self, spec: DataSpec) -> None:
        kind, _, _ = split_user_name(spec.name)
        if kind:
            self.user.set_name(spec.name)
            self.user.set_args(spec.args)
            self.splits.set_values({"dataset": spec.to_dict()})
        self.source.blockSignals(True)
        self.source.setCurrentIndex(max(0, self.source.findData(kind or "builtin")))
        self.source.blockSignals(False)
        self._show_source()
        self.refresh()

    def _show_source(self) -> None:
        user = self.source_kind() != "builtin"
        form = self.splits.layout_
        form.setRowVisible(self.builtin_row, not user)
        self.user.set_visible(user)
        lightning = self.source_kind() == "lightning"
        for field in USER_SPLIT_FIELDS:
            form.setRowVisible(self.splits._rows[field], user)
            self.splits.set_applicable(field, not lightning, LIGHTNING_SPLITS_NOTE)
        if lightning:
            self.user.attr.setPlaceholderText("MyDataModule")
            self.user.name_label_widget().setText("DataModule class")
        else:
            self.user.attr.setPlaceholderText("MyDataset")
            self.user.name_label_widget().setText("Class or function")

    def _set_spec(self, spec: DataSpec) -> None:
        self.spec = spec
        self._load(spec)
        self.changed.emit()

    def _on_source_changed(self, *args) -> None:
        self._show_source()
        if self.source_kind() != "builtin":
            self.user.path.setFocus()
        self.edited.emit()

    def _on_state_changed(self) -> None:
        self._set_spec(self.state.spec)

    def _on_state_refused(self, name: str, message: str) -> None:
        if name != self.spec.name:
            return  # not this page's choice
        self.refusal.setText(
            f"<b>{html.escape(name)}</b> could not be loaded, so the dataset above stays: "
            f"{html.escape(message)}"
        )
        self.refusal.show()

    def _on_change_clicked(self) -> None:
        dialog = DatasetDialog(self.spec, self.data_dir, self)
        if dialog.exec():
            self.refusal.hide()
            self.spec = dialog.spec()
            self.source.setCurrentIndex(self.source.findData("builtin"))
            self._set_spec(dialog.spec())
            self.state.set_spec(dialog.spec())

    # -- asking the worker what the data holds ----------------------------------------------------
    def ask_info(self, dataset: dict | None) -> None:
        """Ask data.info about `dataset` (a valid DataSpec's plain data) once typing pauses; None: the page's
        dataset is invalid now, so nothing is asked and the task choice says nothing is known."""
        if self.queries is None:
            return
        key = None if dataset is None else {k: v for k, v in dataset.items() if k not in LOADER_FIELDS}
        if key == self._asked:
            return
        self._asked = key
        self._forget_query()
        if dataset is None:
            self._ask_timer.stop()
            self.task_choice.set_tasks(None, "")
            self.info_line.setText("")
            return
        self._pending = dataset
        self.task_choice.set_tasks(None, "")
        self.task_choice.set_busy()
        self._set_info_line("", error=False)
        self._ask_timer.start()

    def _send_info_query(self) -> None:
        dataset, self._pending = self._pending, None
        if dataset is None or self.queries is None:
            return
        # data.info loads the data; its loader workers are not needed to read the first sample.
        dataset = {**dataset, "num_workers": 0}
        # the reply's own job id, to tell a stale reply from the current one
        job_box: list[str | None] = [None]
        job = self.queries.query(
            "data.info",
            {"dataset": dataset},
            lambda info: self._on_info(job_box[0], info),
            lambda error: self._on_info_error(job_box[0], error),
        )
        job_box[0] = self._info_job = job

    def _on_info(self, job: str | None, info: dict) -> None:
        if job != self._info_job:
            return  # a stale reply: the dataset changed since
        self._info_job = None
        self.info = info
        tasks = info.get("tasks")
        self.task_choice.set_tasks(tasks if isinstance(tasks, dict) else None, OLD_WORKER_NOTE)
        self._set_info_line(describe_info(info), error=False)
        classes = info.get("classes")
        if isinstance(classes, list) and classes:
            self.classes_known.emit(len(classes))
        self.edited.emit()  # a greyed task may now block the page

    def _on_info_error(self, job: str | None, error: dict) -> None:
        if job is not None and job != self._info_job:
            return
        self._info_job = None
        message = str(error.get("message") or error.get("type") or "the query failed")
        self.task_choice.set_tasks(None, "Which tasks fit is not known, so every task is offered.")
        if error.get("type") == UNTRUSTED:  # not asked at all: the data's code was not trusted
            self._set_info_line(
                f"The worker was not asked about this dataset, since that would run its code: {message}",
                error=True,
            )
        else:
            self._set_info_line(f"The worker could not read this dataset: {message}", error=True)
        self.edited.emit()

    def _set_info_line(self, text: str, error: bool) -> None:
        self.info_line.setText(text)
        self.info_line.setStyleSheet(
            f"color: {ERROR_COLOUR}" if error else "color: palette(placeholder-text)"
        )
        self.info_line.setVisible(bool(text))

    def _forget_query(self) -> None:
        if self._info_job and self.queries is not None:
            self.queries.forget(self._info_job)
        self._info_job = None

    def stop_asking(self) -> None:
        """The wizard closed: no timer fires and no late reply reaches this page."""
        self._ask_timer.stop()
        self._pending = None
        self._forget_query()


def describe_info(info: dict) -> str:
    """One line on what data.info found: samples per split, the input, the target."""
    counts = info.get("num_samples") or {}
    parts = [" · ".join(f"{n:,} {split}" for split, n in counts.items() if isinstance(n, int))]
    shape = info.get("sample_shape") or []
    if shape:
        dtype = info.get("input_dtype")
        parts.append("input " + "×".join(map(str, shape)) + (f" {dtype}" if dtype else ""))
    if info.get("target"):
        parts.append(f"target: {info['target']}")
    elif info.get("classes"):
        parts.append(f"{len(info['classes'])} classes")
    return "Found " + " · ".join(part for part in parts if part) if any(parts) else ""


class ModelPage(_FormPage):
    fields = [*MODEL_FIELDS, "model.name", "model.args"]

    def __init__(self, spec: TrainSpec):
        super().__init__()
        self.setTitle("Model")
        self.setSubTitle("Which network to train, and where its weights start.")
        self.name = QComboBox()
        self.name.setEditable(True)
        self.name.addItems(MODEL_CHOICES)
        self.name.addItems(list(USER_MODEL_CHOICES))
        self.name.setToolTip(
            TrainSpec.field_help("model.name") + " lightning:<path.py>:<LightningModule> is a "
            "LightningModule, trained by Lightning's own Trainer."
        )
        kind, path, cls = split_user_name(spec.model.name)
        self.name.setCurrentText(USER_MODEL_TEXT[kind] if kind else spec.model.name)
        self.file_path = QLineEdit()
        self.file_path.setPlaceholderText("/path/to/model.py")
        self.file_path.setToolTip("The Python file that defines the model")
        self.file_class = QLineEdit()
        self.file_class.setPlaceholderText("ClassOrFactory")
        self.file_class.setToolTip("The class (or a function returning the model) inside that file")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        if kind:
            self.file_path.setText(path)
            self.file_class.setText(cls)
        file_row = QHBoxLayout()
        file_row.addWidget(self.file_path, 3)
        file_row.addWidget(self.file_class, 1)
        file_row.addWidget(browse)
        self.args = QLineEdit(format_args(spec.model.args))
        self.args.setPlaceholderText('none, e.g. hidden=64, lr=0.01 or {"hidden": 64}')
        self.args.setToolTip(TrainSpec.field_help("model.args") + f" Written as {ARGS_EXAMPLES}.")
        self.args_error = _error_label()
        self.name_error = _error_label()
        self.user_code_note = QLabel(PERMISSION_NOTE)
        self.user_code_note.setWordWrap(True)
        self.user_code_note.setStyleSheet("color: #c77700")
        self.lightning_note = QLabel(LIGHTNING_NOTE)
        self.lightning_note.setWordWrap(True)
        self.lightning_note.setStyleSheet("color: palette(placeholder-text)")
        self.form = SpecForm(TrainSpec, MODEL_FIELDS, spec.to_dict())
        # In the form's own layout, so every label on the page lines up in one column.
        form = self.form.layout_
        form.insertRow(0, "Architecture", self.name)
        form.insertRow(1, "Model file", file_row)
        form.insertRow(2, "", self.name_error)
        form.insertRow(3, "Arguments", self.args)
        form.insertRow(4, "", self.args_error)
        form.insertRow(5, "", self.user_code_note)
        form.insertRow(6, "", self.lightning_note)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addStretch(1)
        self.name.currentTextChanged.connect(self._update_file_row)
        self._file_widgets = (self.file_path, self.file_class, browse, self.args)
        self._update_file_row()

    def kind(self) -> str:
        """ "file" (a Python file), "lightning" (a LightningModule) or "" (a built-in or torchvision
        model)."""
        text = self.name.currentText().strip()
        return next((kind for kind, names in USER_MODEL_KINDS.items() if text in names), "")

    def model_name(self) -> str:
        kind = self.kind()
        if kind:
            return f"{kind}:{self.file_path.text().strip()}:{self.file_class.text().strip()}"
        return self.name.currentText().strip()

    def args_value(self) -> tuple[dict, str]:
        """(model.args as typed, "") or ({}, the message); a built-in model takes none, whatever the field
        says."""
        return args_or_message(self.args.text(), "model.args") if self.kind() else ({}, "")

    def local_errors(self) -> dict[str, str]:
        message = self.args_value()[1]
        return {"model.args": message} if message else {}

    def set_errors(self, errors: dict[str, str]) -> None:
        self.form.set_errors(errors)
        self.name_error.setText(errors.get("model.name", ""))
        self.name_error.setVisible("model.name" in errors)
        self.args_error.setText(errors.get("model.args", ""))
        self.args_error.setVisible("model.args" in errors)

    def _update_file_row(self, *args) -> None:
        kind = self.kind()
        for widget in self._file_widgets:
            widget.setEnabled(bool(kind))
        self.file_class.setPlaceholderText("MyLightningModule" if kind == "lightning" else "ClassOrFactory")
        self.user_code_note.setVisible(bool(kind))
        self.lightning_note.setVisible(kind == "lightning")

    def _on_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Model file", self.file_path.text(), "Python files (*.py)"
        )
        if path:
            self.file_path.setText(path)
            self.file_class.setFocus()  # the class name is the next thing to type


class HyperparametersPage(_FormPage):
    fields = HYPER_FIELDS

    def __init__(self, spec: TrainSpec):
        super().__init__()
        self.setTitle("Hyperparameters")
        self.setSubTitle("Defaults that train the built-in models well; hover a field to see what it does.")
        self.form = SpecForm(TrainSpec, HYPER_FIELDS, spec.to_dict())
        # The learning-rate finder sits beside the field it fills; its message (a spec it cannot run) under
        # it.
        self.find_lr = QPushButton("Find learning rate…")
        self.find_lr.setToolTip(LR_FIND_TIP)
        self.finder_note = _error_label()
        lr_row, lr_edit = self.form._rows["lr"].layout(), self.form.widgets["lr"]
        lr_row.removeWidget(lr_edit)
        beside = QHBoxLayout()
        beside.addWidget(lr_edit, 1)
        beside.addWidget(self.find_lr)
        lr_row.insertLayout(0, beside)
        lr_row.addWidget(self.finder_note)
        self.finder_available = True
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

    def update_applicability(self, *args, lightning: bool = False, custom: bool = False) -> None:
        """Grey out what the chosen optimiser, schedule and loss do not use (the training loop ignores it),
        and with a LightningModule what its own configure_optimizers and training_step decide."""
        form = self.form
        for field in LIGHTNING_DECIDES:  # the rules below grey out again what still does not apply
            form.set_applicable(field, True)
        optimizer, scheduler, loss = form.value("optimizer"), form.value("scheduler"), form.value("loss")
        form.set_applicable(
            "momentum",
            optimizer in ("sgd", "rmsprop"),
            f"Not used by {optimizer}: only sgd and rmsprop take a momentum.",
        )
        for field in ("step_size", "gamma"):
            form.set_applicable(
                field,
                scheduler == "step",
                f"Not used with scheduler {scheduler}: only the step schedule uses it.",
            )
        form.set_applicable(
            "label_smoothing",
            loss in ("auto", "cross_entropy"),
            f"Not used by the {loss} loss: only cross_entropy smooths labels.",
        )
        if custom:
            for field in ("loss", "label_smoothing"):
                form.set_applicable(
                    field,
                    False,
                    "Not used with task=custom: the loss is your own function, set "
                    "on the Dataset and task page.",
                )
        if lightning:
            for field in LIGHTNING_DECIDES:
                form.set_applicable(
                    field,
                    False,
                    "Not used with a LightningModule: its configure_optimizers "
                    "and training_step decide this.",
                )
        self.find_lr.setEnabled(self.finder_available and not lightning)
        if not self.finder_available:
            self.find_lr.setToolTip(LR_FIND_NO_WORKER)
        elif lightning:
            self.find_lr.setToolTip(
                "Not with a LightningModule: its configure_optimizers sets its own rate (Lightning's "
                "Tuner.lr_find sweeps it)."
            )
        else:
            self.find_lr.setToolTip(LR_FIND_TIP)


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
        self.setSubTitle(
            "The spec this run will use; edit it here if you like (it is checked as you type). "
            "`workbench train spec.toml` runs the same thing headless."
        )
        self.text = QPlainTextEdit()
        self.text.setFont(QFont("monospace"))
        self.text.setPlaceholderText("No spec while a field is invalid: go back to the field named below.")
        self.text.setToolTip(
            "The spec as TOML. Edits are checked as you type and Start uses the edited text; going "
            "Back rebuilds the spec from the pages and drops them."
        )
        self.generated = ""  # the text the pages made: what an edit is told apart from
        self.edited: TrainSpec | None = None  # the spec of a valid edit
        self.edit_error = ""
        self._check_timer = QTimer(self)
        self._check_timer.setSingleShot(True)
        self._check_timer.setInterval(250)  # after a pause in typing, not at every key
        self._check_timer.timeout.connect(self.check_edit)
        self.text.textChanged.connect(self._check_timer.start)
        self.note = QLabel("Edited here: Start uses this text; Back rebuilds the spec from the pages.")
        self.note.setWordWrap(True)
        self.note.hide()
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
        layout.addWidget(self.note)
        layout.addWidget(self.error)
        layout.addLayout(buttons)
        self.setButtonText(QWizard.FinishButton, "Start training")

    def initializePage(self) -> None:  # noqa: N802 (Qt override)
        self.wizard_.rebuild()
        self.show_spec()

    def is_edited(self) -> bool:
        return self.text.toPlainText() != self.generated

    def final_spec(self) -> TrainSpec | None:
        """What Start runs: the edited text's spec when the text was edited, else the pages' spec."""
        return self.edited if self.is_edited() else self.wizard_.spec

    def show_spec(self) -> None:
        spec = self.wizard_.spec
        if self.is_edited() and self.isVisible():
            return  # a reply that rebuilt the pages' spec must not wipe what the person is typing
        self.generated = spec.to_toml() if spec else ""
        self.text.setPlainText(self.generated)
        self.check_edit()

    def check_edit(self) -> None:
        """Check the text (edited or not) and say what is wrong, naming the field; Start and Save follow."""
        self._check_timer.stop()
        self.edited, self.edit_error = None, ""
        if self.is_edited():
            try:
                self.edited = TrainSpec.from_toml(self.text.toPlainText(), source="the review page")
            except SpecError as exc:
                self.edit_error = str(exc)
        spec = self.final_spec()
        error = self.edit_error if self.is_edited() else self.wizard_.error
        self.note.setVisible(self.is_edited() and self.edited is not None)
        self.error.setText(error)
        self.error.setVisible(bool(error))
        self.save.setEnabled(spec is not None)
        self.save.setToolTip(
            "Save this spec as TOML to run or share later"
            if spec is not None
            else "There is no valid spec to save yet: fix the field named below."
        )
        self.cluster.setEnabled(spec is not None)
        self.cluster.setToolTip(
            CLUSTER_TIP
            if spec is not None
            else "There is no valid spec to run yet: fix the field named below."
        )
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return self.final_spec() is not None

    def _on_save_clicked(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save spec", "train.toml", "TOML (*.toml)")
        spec = self.final_spec()
        if path and spec is not None:
            Path(path).write_text(spec.to_toml(), encoding="utf-8")


class TrainingWizard(QWizard):
    """Builds a TrainSpec. It starts from `start` (a TrainSpec or its plain dict: "train again with changes",
    dataset included), else from the last spec started with `settings`, else from the defaults; in the last
    two cases the dataset is the Data tab's and `num_classes` (from the loaded dataset) sets the model's
    outputs.
    """

    def __init__(
        self,
        state: DatasetState,
        devices: list[dict],
        preferred_device: str = "cpu",
        start: TrainSpec | dict | None = None,
        num_classes: int | None = None,
        data_dir: str = "",
        parent=None,
        settings=None,
        workspace: str | Path | None = None,
        queries=None,
    ):
        super().__init__(parent)
        self.setWindowTitle("New training run")
        # The cluster page's default shared workspace: given, else the window's, else the data folder's
        # parent.
        self.workspace = str(
            workspace or getattr(parent, "workspace", "") or (Path(data_dir).parent if data_dir else "")
        )
        self.cluster_page = None
        self.setWizardStyle(QWizard.ClassicStyle)
        self.setMinimumSize(720, 640)
        self.state = state
        self.settings = settings
        start_spec, explicit, note = self._starting_spec(start)
        # The class count the wizard filled in itself (from the Data tab's dataset): it follows the dataset
        # chosen on the first page until the person types another. None: the spec given keeps its own.
        self._filled_classes: int | None = None
        if not explicit:
            start_spec.dataset = copy.deepcopy(state.spec)
            if num_classes:
                start_spec.model.num_classes = self._filled_classes = num_classes
        self.start_data = start_spec.to_dict()
        self.spec: TrainSpec | None = None
        self.error = ""
        self.invalid_fields: dict[str, str] = {}  # field -> its message, as shown under it
        # The worker's data.info says which tasks the data can serve; the window's query runner asks it.
        self.queries = queries if queries is not None else getattr(parent, "queries", None)
        self.dataset_page = DatasetPage(
            state, data_dir, start_spec.dataset, note, start_spec.task, self.queries, self.start_data
        )
        self.model_page = ModelPage(start_spec)
        self.hyper_page = HyperparametersPage(start_spec)
        self.speed_page = SpeedPage(start_spec, devices, preferred_device)
        self.review_page = ReviewPage(self)
        for page in (self.dataset_page, self.model_page, self.hyper_page, self.speed_page, self.review_page):
            self.addPage(page)
        self.form_pages = (self.model_page, self.hyper_page, self.speed_page)
        self.checked_pages = (self.dataset_page, *self.form_pages)
        for page in self.form_pages:
            page.form.changed.connect(self.rebuild)
        for widget in (self.model_page.file_path, self.model_page.file_class, self.model_page.args):
            widget.textChanged.connect(self.rebuild)
        self.dataset_page.edited.connect(self.rebuild)
        self.model_page.name.currentTextChanged.connect(self.rebuild)
        for combo in (self.speed_page.device, self.speed_page.amp, self.speed_page.compile):
            combo.currentIndexChanged.connect(self.rebuild)
        self.dataset_page.changed.connect(self._on_dataset_changed)
        self.dataset_page.classes_known.connect(self._on_classes_known)
        self.lr_finder = None  # the learning-rate finder's dialog, once opened
        self.hyper_page.finder_available = self.queries is not None
        self.hyper_page.find_lr.clicked.connect(self.find_learning_rate)
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
                note = (
                    f"The run's spec cannot be used as it is ({exc}); starting from the last values instead."
                )
        return load_last_spec(self.settings) or TrainSpec(), False, note

    def _on_classes_known(self, count: int) -> None:
        """Another dataset on the first page: the model's class count follows it, where the wizard filled it
        in and the person has not changed it since (a digits head on cifar100 would fail the run's class
        check)."""
        form = self.model_page.form
        if self._filled_classes is None or count == self._filled_classes:
            return
        if form.value("model.num_classes") != self._filled_classes:
            self._filled_classes = None  # typed by the person: theirs from now on
            return
        form.set_value("model.num_classes", count)
        self._filled_classes = count

    def _on_dataset_changed(self) -> None:
        # The dataset dialog also edits the loader fields this wizard shows on its speed page.
        self.speed_page.form.set_values({"dataset": self.dataset_page.spec.to_dict()})
        self.speed_page.update_availability()
        self.rebuild()

    def spec_data(self) -> dict:
        # Start from the starting spec, so a field that is greyed out (unused) keeps the value it had.
        data = copy.deepcopy(self.start_data)
        self.dataset_page.apply_to(data)
        self.model_page.form.apply_to(data)
        data["model"]["name"] = self.model_page.model_name()
        data["model"]["args"] = self.model_page.args_value()[0]
        self.hyper_page.form.apply_to(data)
        self.speed_page.form.apply_to(data)
        data["device"] = self.speed_page.device.currentData()
        data["amp"] = self.speed_page.amp.currentData()
        data["compile"] = self.speed_page.compile.currentData()
        return self.dataset_page.apply_objective(data)

    def rebuild(self, *args) -> TrainSpec | None:
        """Validate the whole spec now: messages under the fields they name, Next and Save follow."""
        self.hyper_page.update_applicability(
            lightning=self.model_page.kind() == "lightning", custom=self.dataset_page.is_custom()
        )
        data = self.spec_data()
        fields = [field for page in self.checked_pages for field in page.fields]
        errors, general = field_errors(TrainSpec, data, fields)
        for field, message in {**self.dataset_page.local_errors(), **self.model_page.local_errors()}.items():
            errors.setdefault(field, message)
        self.invalid_fields = errors
        for page in self.checked_pages:
            # A field greyed out on one page (loss, with task=custom) is edited, and its message shown, on
            # another.
            greyed = page.form.inapplicable if isinstance(page, _FormPage) else {}
            mine = {field: message for field, message in errors.items() if field not in greyed}
            page.set_errors(mine)
            page.set_has_errors(any(field in mine for field in page.fields))
        # Only the dataset's own fields decide whether it can be asked about (a custom loss is not the data).
        dataset_ok = not any(
            field in errors for field in self.dataset_page.fields if field.startswith("dataset.")
        )
        self.dataset_page.ask_info(data["dataset"] if dataset_ok else None)
        first = next(iter(errors.values()), general)
        if first:
            self.spec, self.error = None, f"Fix this before starting: {first}"
        else:
            self.spec, self.error = TrainSpec.from_dict(data), ""
        if self.currentPage() is self.review_page:
            self.review_page.show_spec()
        return self.spec

    def find_learning_rate(self):
        """Run the learning-rate finder on the spec as the pages hold it now; "Use this rate" fills the lr
        field. Returns its dialog, or None (with the reason under the button) when the spec cannot run."""
        # Its module (and pyqtgraph) loads when the finder is first used, as the cluster page's does.
        from workbench.gui.panels.training.lr_finder import LrFinderDialog

        self.rebuild()
        data = self.spec_data()
        if "lr" in self.invalid_fields:  # the sweep sets its own rates: a half-typed lr must not stop it
            data["lr"] = TrainSpec().lr
        note = self.hyper_page.finder_note
        try:
            spec = LrFindSpec.from_dict(data)
        except SpecError as exc:
            note.setText(f"The learning-rate finder needs a valid spec: {exc}")
            note.show()
            return None
        note.hide()
        if self.lr_finder is not None:
            self.lr_finder.close()
            self.lr_finder.deleteLater()
        current = None if "lr" in self.invalid_fields else spec.lr
        self.lr_finder = LrFinderDialog(self.queries, spec.to_dict(), current, self)
        self.lr_finder.rate_chosen.connect(self._on_lr_finder_rate_chosen)
        self.lr_finder.open()
        self.lr_finder.start()
        return self.lr_finder

    def _on_lr_finder_rate_chosen(self, lr: float) -> None:
        self.hyper_page.form.set_value("lr", lr)  # the form's change rebuilds the spec

    def open_cluster_page(self) -> None:
        """Show "Run on a cluster" for the current spec; the wizard stays open and Start is unchanged."""
        from workbench.gui.panels.training.cluster_page import ClusterPage

        on_review = self.currentPage() is self.review_page
        # an edited review text included
        spec = self.review_page.final_spec() if on_review else self.rebuild()
        if spec is None:
            return
        if self.cluster_page is not None:
            self.cluster_page.close()
            self.cluster_page.deleteLater()
        self.cluster_page = ClusterPage(copy.deepcopy(spec), self.workspace, self)
        self.cluster_page.show()

    def done(self, result: int) -> None:
        # The window keeps its finished wizards as children; a closed one must stop following the Data tab.
        self.dataset_page.stop_asking()
        if self.lr_finder is not None:
            self.lr_finder.close()  # cancels a range test still running
            self.lr_finder = None
        if self.dataset_page.following:
            self.dataset_page.following = False
            self.state.changed.disconnect(self.dataset_page._on_state_changed)
        super().done(result)

    def accept(self) -> None:
        if self.currentPage() is self.review_page and self.review_page.is_edited():
            self.review_page.check_edit()
            if self.review_page.edited is None:
                return  # Start is disabled then; this guards a programmatic accept
            self.spec = self.review_page.edited  # the text the person edited is what runs
        elif self.rebuild() is None:
            return  # Start is disabled then; this guards a programmatic accept
        save_last_spec(self.settings, self.spec)
        super().accept()
