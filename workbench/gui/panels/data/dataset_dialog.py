"""The dataset picker: registry choice, root folder, splits, resize, normalisation and augmentation, validated
inline.

It builds a `DataSpec` through `DataSpec.from_dict`, so the dialog and the command line reject the same
values with the same words, and checks the root folder exists; OK is enabled only while both pass.
"Python file…" names the user's own Dataset (file:<path.py>:<Name> with keyword arguments).
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from workbench.errors import SpecError
from workbench.gui import user_args
from workbench.gui.widgets.spec_form import ERROR_COLOUR, AutoSpinBox, field_named
from workbench.specs import AUGMENTATIONS, DATASETS, DataSpec

USER_TRANSFORMS = "Not used: your Dataset's own transforms resize, normalise and augment its samples."
USER_FILE = "file:"  # the name combo's "Python file…" entry: the spec's name is file:<path.py>:<Name>
# Parameters each augmentation takes, with defaults a user can start from (they are torchvision v2's).
AUGMENT_DEFAULTS = {
    "random_crop": "size=28, padding=2",
    "hflip": "p=0.5",
    "vflip": "p=0.5",
    "rotation": "degrees=15",
    "color_jitter": "brightness=0.2, contrast=0.2",
    "random_erasing": "p=0.25",
}
DATASET_NOTES = {
    "digits": "scikit-learn's bundled 8×8 handwritten digits (1,797 images): works offline.",
    "mnist": "torchvision MNIST: files under root/MNIST/raw (or tick Download).",
    "fashion_mnist": "torchvision FashionMNIST: files under root/FashionMNIST/raw (or tick Download).",
    "kmnist": "torchvision KMNIST: files under root/KMNIST/raw (or tick Download).",
    "cifar10": "torchvision CIFAR-10: root/cifar-10-batches-py (or tick Download).",
    "cifar100": "torchvision CIFAR-100: root/cifar-100-python (or tick Download).",
    "svhn": "torchvision SVHN: root/train_32x32.mat and test_32x32.mat (or tick Download).",
    "imagefolder": "Your images: root holds one folder per class.",
    "fake": "Random images (torchvision FakeData), for trying things out.",
    USER_FILE: "Your own torch Dataset class (or a function returning one) from a Python file. The file's "
    "code runs with your permissions, in the worker: open only files you trust.",
}


# The datasets that generate their samples, `size` of them: fake in memory, shapes_detection as files written
# at first use.
GENERATED = ("fake", "shapes_detection")


def inapplicable_fields(name: str) -> dict[str, str]:
    """Source fields of DataSpec that dataset `name` does not use, each with the reason (for tooltips)."""
    reasons: dict[str, str] = {}
    if name.startswith(USER_FILE):
        reasons["root"] = reasons["download"] = "Not used: your Dataset reads its own files."
    elif name in ("digits", "fake"):
        what = (
            "digits ships inside scikit-learn" if name == "digits" else "fake makes random images in memory"
        )
        reasons["root"] = reasons["download"] = (
            f"Not used: {what}, so there is no folder to read and nothing to download."
        )
    elif name == "imagefolder":
        reasons["download"] = "Not used: imagefolder reads your own images, so there is nothing to download."
    if name not in GENERATED:
        reasons["size"] = (
            "Only the fake dataset and shapes_detection generate their samples; the others have their own."
        )
    if name != "fake":
        reasons["num_classes"] = "Only the fake dataset chooses its classes; the others have their own."
    return reasons


def root_problem(name: str, root: str, download: bool, default_root: str = "") -> str:
    """Why `root` cannot hold dataset `name`, in the spec's own style ("root: ... ; ..."); "" when it can.

    Checked here, on the GUI's side, because a wrong folder otherwise only shows up as a failed load after the
    dialog has closed. Empty means the workspace's data folder (`default_root`).
    """
    if "root" in inapplicable_fields(name) or (download and name != "imagefolder"):
        return ""  # a download creates the folder
    if not root and name != "imagefolder":
        return ""  # the worker's message says which files belong under the workspace's data folder
    if not (root or default_root):
        return ""
    shown = (
        repr(root) if root else f"empty, which means the workspace's data folder {default_root!r}, but that"
    )
    path = Path(root or default_root).expanduser()
    if not path.exists():
        wanted = (
            "choose the folder that holds one folder per class"
            if name == "imagefolder"
            else "choose the folder that holds the dataset's files, or tick Download"
        )
        return f"root: {shown} does not exist; {wanted}"
    if not path.is_dir():
        return f"root: {shown} is a file, not a folder"
    if name == "imagefolder":
        try:
            with os.scandir(path) as entries:  # stops at the first folder; d_type needs no stat per file
                has_class = any(entry.is_dir() for entry in entries)
        except OSError as exc:
            return f"root: {shown} cannot be read ({exc.strerror or exc})"
        if not has_class:
            return (
                f"root: {shown} has no class folders; imagefolder needs one folder per class, e.g. cat/1.jpg"
            )
    return ""


class _NumberEdit(QLineEdit):
    """A number typed as text: unlike a spin box it never clamps 1.5 into range, so the spec can say why
    not."""

    def setValue(self, value: float) -> None:  # noqa: N802 (reads like the spin boxes beside it)
        self.setText(f"{value:g}")

    def value(self) -> float | None:
        try:
            return float(self.text())
        except ValueError:
            return None


def _parse_params(text: str) -> dict:
    """'size=28, padding=2' -> {'size': 28, 'padding': 2}; numbers become numbers, lists stay comma-free."""
    params: dict = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise SpecError(f"augment parameter {part!r}: expected name=value")
        value = value.strip()
        try:
            params[key.strip()] = int(value)
        except ValueError:
            try:
                params[key.strip()] = float(value)
            except ValueError:
                params[key.strip()] = value
    return params


def parse_args(text: str) -> dict:
    """A file: dataset's keyword arguments, read as the wizard reads them (workbench.gui.user_args)."""
    try:
        return user_args.parse_args(text, "args")
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def user_file_problem(path: str, attr: str) -> str:
    """Why a Python file and name cannot be a file: dataset, checked before the worker runs anything; "" if
    fine."""
    if not path:
        return "file: choose the Python file that defines your Dataset"
    file = Path(path).expanduser()
    if file.suffix != ".py":
        return f"file: {path!r} is not a Python (.py) file"
    if not file.is_file():
        return f"file: {path!r} does not exist"
    if not attr.isidentifier():
        return (
            f"name: {attr!r} is not a Python name; give the Dataset class or function the file defines"
            if attr
            else "name: give the Dataset class or function the file defines"
        )
    return ""


def _format_params(step: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in step.items() if k != "name")


class FittedNote(QLabel):
    """A wrapped note whose minimum height fits its text at its width. A top-level dialog sizes itself once
    from its layout's minimum, which counts a wrapped label as the height of its first text; a longer text set
    later (the permission note of a Python file) was cut off to that height."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWordWrap(True)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt override)
        super().setText(text)
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt override)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        # Hidden, its width is not the one it will have: its first resize when shown fits it.
        if self.isVisible():
            self.setMinimumHeight(self.heightForWidth(self.width()) if self.text() else 0)


class DatasetDialog(QDialog):
    def __init__(self, spec: DataSpec, workspace_data_dir: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Choose dataset")
        self.setMinimumWidth(560)
        self._spec = self._opened = spec
        self.workspace_data_dir = workspace_data_dir
        user_row, root_row = self._build_source_widgets()
        self._build_preprocessing_widgets()
        self._build_augment_table()
        self._build_footer()
        form, form2 = self._build_layout(user_row, root_row)
        self._index_field_labels(form, form2, user_row, root_row)
        self._set_tooltips()
        self._load(spec)
        self._name_shown = self.name.currentData()
        self._connect_revalidation()
        self._revalidate()

    def _build_source_widgets(self) -> tuple[QHBoxLayout, QHBoxLayout]:
        """The dataset's name, your own Python file's fields, the root folder; returns the file's and root's
        rows."""
        self.name = QComboBox()
        for name in DATASETS:
            self.name.addItem(name, name)
        self.name.addItem("Python file…", USER_FILE)
        self.user_path = QLineEdit()
        self.user_path.setPlaceholderText("your_data.py")
        self.user_browse = QPushButton("Browse…")
        self.user_browse.clicked.connect(self._on_user_browse_clicked)
        user_row = QHBoxLayout()
        user_row.addWidget(self.user_path, 1)
        user_row.addWidget(self.user_browse)
        self.user_attr = QLineEdit()
        self.user_attr.setPlaceholderText("the Dataset class or function, e.g. MyDataset")
        self.user_args = QLineEdit()
        self.user_args.setPlaceholderText('keyword arguments: size=500, kind=train  or  {"size": 500}')
        self.user_path.setToolTip(
            "The Python file that defines your torch Dataset; its code runs with your "
            "permissions when the worker loads it."
        )
        self.user_attr.setToolTip(
            "A torch.utils.data.Dataset subclass, or a function returning one (or a dict "
            "of 'train', 'val', 'test' datasets). It is called with split='train', 'val', "
            "'test' if it takes a split argument."
        )
        self.user_args.setToolTip(DataSpec.field_help("args"))
        self.note = FittedNote()
        self.note.setStyleSheet("color: palette(placeholder-text)")
        self.root = QLineEdit()
        self.browse = QPushButton("Browse…")
        self.browse.clicked.connect(self._on_browse_clicked)
        root_row = QHBoxLayout()
        root_row.addWidget(self.root, 1)
        root_row.addWidget(self.browse)
        self.download = QCheckBox("Download when missing (needs internet)")
        return user_row, root_row

    def _build_preprocessing_widgets(self) -> None:
        """The splits, resizing, normalisation and loader fields."""
        self.val_fraction = self._fraction_box()
        self.test_fraction = self._fraction_box()
        self.seed = QSpinBox()
        self.seed.setRange(0, 2**31 - 1)
        self.image_size = QLineEdit()
        self.image_size.setPlaceholderText("keep (e.g. 32 or 224,224)")
        self.normalize = QComboBox()
        self.normalize.addItems(["auto", "none", "custom"])
        self.mean = QLineEdit()
        self.mean.setPlaceholderText("mean per channel, e.g. 0.5,0.5,0.5")
        self.std = QLineEdit()
        self.std.setPlaceholderText("std per channel, e.g. 0.25,0.25,0.25")
        self.size = QSpinBox()
        self.size.setRange(1, 10_000_000)
        self.num_classes = QSpinBox()
        self.num_classes.setRange(2, 100_000)
        self.num_workers = AutoSpinBox(64)
        self.pin_memory = QCheckBox("Pin memory (faster copies to CUDA)")

    def _build_augment_table(self) -> None:
        """One checkable row per augmentation, its parameters beside it."""
        self.augment = QTableWidget(len(AUGMENTATIONS), 2)
        self.augment.setHorizontalHeaderLabels(["Augmentation (training only)", "Parameters"])
        self.augment.horizontalHeader().setStretchLastSection(True)
        self.augment.verticalHeader().hide()
        for row, name in enumerate(AUGMENTATIONS):
            item = QTableWidgetItem(name)
            item.setFlags(Qt.ItemIsUserCheckable | Qt.ItemIsEnabled)
            item.setCheckState(Qt.Unchecked)
            self.augment.setItem(row, 0, item)
            self.augment.setItem(row, 1, QTableWidgetItem(AUGMENT_DEFAULTS[name]))
        self.augment.setColumnWidth(0, 200)
        self.augment.setMinimumHeight(self.augment.verticalHeader().length() + 30)

    def _build_footer(self) -> None:
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR_COLOUR}")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

    def _build_layout(self, user_row: QHBoxLayout, root_row: QHBoxLayout) -> tuple[QFormLayout, QFormLayout]:
        """The Source and Splits and preprocessing boxes, the augmentations and the buttons; returns both
        forms."""
        source = QGroupBox("Source")
        form = QFormLayout(source)
        form.addRow("Dataset", self.name)
        form.addRow("", self.note)
        form.addRow("Python file", user_row)
        form.addRow("Class or function", self.user_attr)
        form.addRow("Arguments", self.user_args)
        form.addRow("Root folder", root_row)
        form.addRow("", self.download)
        form.addRow("Fake: samples", self.size)
        form.addRow("Fake: classes", self.num_classes)
        splits = QGroupBox("Splits and preprocessing")
        form2 = QFormLayout(splits)
        form2.addRow("Validation fraction", self.val_fraction)
        form2.addRow("Test fraction", self.test_fraction)
        form2.addRow("Split seed", self.seed)
        form2.addRow("Resize to", self.image_size)
        form2.addRow("Normalise", self.normalize)
        form2.addRow("Mean", self.mean)
        form2.addRow("Std", self.std)
        form2.addRow("Loader workers", self.num_workers)
        form2.addRow("", self.pin_memory)
        layout = QVBoxLayout(self)
        layout.addWidget(source)
        layout.addWidget(splits)
        layout.addWidget(self.augment)
        layout.addWidget(self.error)
        layout.addWidget(self.buttons)
        return form, form2

    def _index_field_labels(
        self, form: QFormLayout, form2: QFormLayout, user_row: QHBoxLayout, root_row: QHBoxLayout
    ) -> None:
        # The label of the field an error names turns red too, so the message below points somewhere.
        self._field_labels = {}
        self._source_form, self._user_rows = form, (user_row, self.user_attr, self.user_args)
        for form_layout, rows in (
            (
                form,
                {
                    "name": self.name,
                    "root": root_row,
                    "size": self.size,
                    "num_classes": self.num_classes,
                    "file": user_row,
                    "args": self.user_args,
                },
            ),
            (
                form2,
                {
                    "val_fraction": self.val_fraction,
                    "test_fraction": self.test_fraction,
                    "seed": self.seed,
                    "image_size": self.image_size,
                    "normalize": self.normalize,
                    "normalize.mean": self.mean,
                    "normalize.std": self.std,
                    "num_workers": self.num_workers,
                },
            ),
        ):
            for field, field_widget in rows.items():
                self._field_labels[field] = form_layout.labelForField(field_widget)

    def _connect_revalidation(self) -> None:
        # before _revalidate: it resets fields first
        self.name.currentIndexChanged.connect(self._on_name_changed)
        for widget in (self.name, self.normalize):
            widget.currentIndexChanged.connect(self._revalidate)
        for widget in (
            self.root,
            self.image_size,
            self.mean,
            self.std,
            self.user_path,
            self.user_attr,
            self.user_args,
        ):
            widget.textChanged.connect(self._revalidate)
        for widget in (self.val_fraction, self.test_fraction):
            widget.textChanged.connect(self._revalidate)
        for widget in (self.seed, self.size, self.num_classes, self.num_workers):
            widget.valueChanged.connect(self._revalidate)
        for widget in (self.download, self.pin_memory):
            widget.toggled.connect(self._revalidate)
        self.augment.itemChanged.connect(self._revalidate)

    @staticmethod
    def _fraction_box() -> _NumberEdit:
        box = _NumberEdit()
        box.setPlaceholderText("a fraction, e.g. 0.1")
        return box

    def _set_tooltips(self) -> None:
        self._help = {}
        for widget, field in [
            (self.name, "name"),
            (self.root, "root"),
            (self.download, "download"),
            (self.val_fraction, "val_fraction"),
            (self.test_fraction, "test_fraction"),
            (self.seed, "seed"),
            (self.image_size, "image_size"),
            (self.normalize, "normalize"),
            (self.size, "size"),
            (self.num_classes, "num_classes"),
            (self.num_workers, "num_workers"),
            (self.pin_memory, "pin_memory"),
            (self.augment, "augment"),
        ]:
            self._help[widget] = DataSpec.field_help(field)
            widget.setToolTip(self._help[widget])

    def _load(self, spec: DataSpec) -> None:
        if spec.name.startswith(USER_FILE):
            # rpartition: a Windows path has a colon
            path, _, attr = spec.name[len(USER_FILE) :].rpartition(":")
            self.name.setCurrentIndex(self.name.findData(USER_FILE))
            self.user_path.setText(path)
            self.user_attr.setText(attr)
            self.user_args.setText(user_args.format_args(spec.args))
        else:
            self.name.setCurrentIndex(max(0, self.name.findData(spec.name)))
        self.root.setText(spec.root)
        self.download.setChecked(spec.download)
        self.val_fraction.setValue(spec.val_fraction)
        self.test_fraction.setValue(spec.test_fraction)
        self.seed.setValue(spec.seed)
        self.image_size.setText(",".join(str(n) for n in spec.image_size))
        if isinstance(spec.normalize, dict):
            self.normalize.setCurrentText("custom")
            self.mean.setText(",".join(f"{v:g}" for v in spec.normalize["mean"]))
            self.std.setText(",".join(f"{v:g}" for v in spec.normalize["std"]))
        else:
            self.normalize.setCurrentText(spec.normalize)
        self.size.setValue(spec.size)
        self.num_classes.setValue(spec.num_classes)
        self.num_workers.set_spec_value(spec.num_workers)
        self.pin_memory.setChecked(spec.pin_memory)
        self._set_augment(spec.augment)

    def _set_augment(self, steps) -> None:
        chosen = {step["name"]: step for step in steps}
        for row, name in enumerate(AUGMENTATIONS):
            self.augment.item(row, 0).setCheckState(Qt.Checked if name in chosen else Qt.Unchecked)
            self.augment.item(row, 1).setText(
                _format_params(chosen[name]) if name in chosen else AUGMENT_DEFAULTS[name]
            )

    def _on_name_changed(self, *args) -> None:
        """Another dataset: its augmentation starts from none, and an image folder's root is not another
        dataset's (an MNIST folder may hold FashionMNIST too, so torchvision roots stay). Back to the dataset
        the dialog opened on, its own settings return."""
        old, new = self._name_shown, self.name.currentData()
        self._name_shown = new
        if old == new:
            return
        opened = USER_FILE if self._opened.name.startswith(USER_FILE) else self._opened.name
        if new == opened:
            # digits' greyed root keeps what was typed
            if "root" not in inapplicable_fields(self._opened.name):
                self.root.setText(self._opened.root)
            self._set_augment(self._opened.augment)
            return
        if "imagefolder" in (old, new):
            self.root.setText("")
        self._set_augment([])

    def spec_data(self) -> dict:
        """The form as plain spec data (what `DataSpec.from_dict` takes)."""
        name = self.name.currentData()
        if name == USER_FILE:
            name = f"{USER_FILE}{self.user_path.text().strip()}:{self.user_attr.text().strip()}"
        data: dict = {
            "name": name,
            "root": self.root.text().strip(),
            "download": self.download.isChecked(),
            "val_fraction": self.val_fraction.text().strip(),
            "test_fraction": self.test_fraction.text().strip(),
            "seed": self.seed.value(),
            "image_size": self.image_size.text().strip(),
            "size": self.size.value(),
            "num_classes": self.num_classes.value(),
            "num_workers": self.num_workers.spec_value(),
            "pin_memory": self.pin_memory.isChecked(),
        }
        # What the dataset does not use stays out of its spec (and so of the TOML and the run comparison); the
        # greyed-out field keeps its text in case the user switches back.
        for field in inapplicable_fields(data["name"]):
            del data[field]
        if name.startswith(USER_FILE):
            data["args"] = parse_args(self.user_args.text())
        if self.normalize.currentText() == "custom":
            data["normalize"] = {"mean": self.mean.text().strip(), "std": self.std.text().strip()}
        else:
            data["normalize"] = self.normalize.currentText()
        steps = []
        for row, name in enumerate(AUGMENTATIONS):
            if self.augment.item(row, 0).checkState() == Qt.Checked:
                steps.append({"name": name, **_parse_params(self.augment.item(row, 1).text())})
        data["augment"] = steps
        return data

    def spec(self) -> DataSpec:
        return self._spec

    def _update_applicability(self, name: str) -> None:
        reasons = inapplicable_fields(name)
        for field, widgets in (
            ("root", (self.root, self.browse)),
            ("download", (self.download,)),
            ("size", (self.size,)),
            ("num_classes", (self.num_classes,)),
        ):
            reason = reasons.get(field)
            for widget in widgets:
                widget.setEnabled(reason is None)
                help_text = self._help.get(widget, "Choose the dataset's folder")
                widget.setToolTip(help_text if reason is None else f"{reason}\n\n{help_text}")
        shown = "your Dataset" if name == USER_FILE else name
        self.root.setPlaceholderText(
            f"not used by {shown}"
            if "root" in reasons
            else self.workspace_data_dir or "the workspace's data folder"
        )

    def _revalidate(self, *args) -> None:
        name = self.name.currentData()
        self.note.setText(DATASET_NOTES.get(name, ""))
        self._update_applicability(name)
        for row in self._user_rows:
            self._source_form.setRowVisible(row, name == USER_FILE)
        custom = self.normalize.currentText() == "custom"
        user = name == USER_FILE
        self.mean.setEnabled(custom and not user)
        self.std.setEnabled(custom and not user)
        # The workbench reads a user's samples as its Dataset gives them: its own transforms resize, normalise
        # and augment, so these would do nothing.
        for widget in (self.image_size, self.normalize, self.augment):
            widget.setEnabled(not user)
            help_text = self._help.get(widget, "")
            widget.setToolTip(f"{USER_TRANSFORMS}\n\n{help_text}" if user else help_text)
        try:
            problem = (
                user_file_problem(self.user_path.text().strip(), self.user_attr.text().strip())
                if name == USER_FILE
                else ""
            )
            spec = None
            if not problem:
                spec = DataSpec.from_dict(self.spec_data())
                problem = root_problem(spec.name, spec.root, spec.download, self.workspace_data_dir)
        except SpecError as exc:
            spec, problem = None, str(exc)
        self.error.setText(problem)
        self.buttons.button(QDialogButtonBox.Ok).setEnabled(not problem)
        named = field_named(problem, self._field_labels) if problem else None
        for field, label in self._field_labels.items():
            label.setStyleSheet(f"color: {ERROR_COLOUR}" if field == named else "")
        if spec is not None and not problem:
            self._spec = spec

    def accept(self) -> None:
        # The folder may have gone since it was typed: check once more before the dialog closes.
        self._revalidate()
        if self.buttons.button(QDialogButtonBox.Ok).isEnabled():
            super().accept()

    def _on_user_browse_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Python file with your Dataset", self.user_path.text() or "", "Python files (*.py)"
        )
        if path:
            self.user_path.setText(path)

    def _on_browse_clicked(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Dataset root folder", self.root.text() or "")
        if path:
            self.root.setText(path)
