"""The dataset picker: registry choice, root folder, splits, resize, normalisation and augmentation, validated inline.

It builds a `DataSpec` through `DataSpec.from_dict`, so the dialog and the command line reject the same
values with the same words; OK is enabled only while the spec is valid.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
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
from workbench.specs import AUGMENTATIONS, DATASETS, DataSpec

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
}


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


def _format_params(step: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in step.items() if k != "name")


class DatasetDialog(QDialog):
    def __init__(self, spec: DataSpec, workspace_data_dir: str = "", parent=None):
        super().__init__(parent)
        self.setWindowTitle("Choose dataset")
        self.setMinimumWidth(560)
        self._spec = spec
        self.name = QComboBox()
        for name in DATASETS:
            self.name.addItem(name, name)
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: palette(placeholder-text)")
        self.root = QLineEdit()
        self.root.setPlaceholderText(workspace_data_dir or "the workspace's data folder")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_clicked)
        root_row = QHBoxLayout()
        root_row.addWidget(self.root, 1)
        root_row.addWidget(browse)
        self.download = QCheckBox("Download when missing (needs internet)")
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
        self.num_workers = QSpinBox()
        self.num_workers.setRange(0, 64)
        self.pin_memory = QCheckBox("Pin memory (faster copies to CUDA)")
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
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #d0342c")
        self.buttons = QDialogButtonBox(QDialogButtonBox.Ok | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        source = QGroupBox("Source")
        form = QFormLayout(source)
        form.addRow("Dataset", self.name)
        form.addRow("", self.note)
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
        self._set_tooltips()
        self._load(spec)
        for widget in (self.name, self.normalize):
            widget.currentIndexChanged.connect(self._revalidate)
        for widget in (self.root, self.image_size, self.mean, self.std):
            widget.textChanged.connect(self._revalidate)
        for widget in (self.val_fraction, self.test_fraction):
            widget.valueChanged.connect(self._revalidate)
        for widget in (self.seed, self.size, self.num_classes, self.num_workers):
            widget.valueChanged.connect(self._revalidate)
        for widget in (self.download, self.pin_memory):
            widget.toggled.connect(self._revalidate)
        self.augment.itemChanged.connect(self._revalidate)
        self._revalidate()

    @staticmethod
    def _fraction_box() -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setRange(0.0, 0.95)
        box.setSingleStep(0.05)
        box.setDecimals(3)
        return box

    def _set_tooltips(self) -> None:
        for widget, field in [(self.name, "name"), (self.root, "root"), (self.download, "download"),
                              (self.val_fraction, "val_fraction"), (self.test_fraction, "test_fraction"),
                              (self.seed, "seed"), (self.image_size, "image_size"), (self.normalize, "normalize"),
                              (self.size, "size"), (self.num_classes, "num_classes"),
                              (self.num_workers, "num_workers"), (self.pin_memory, "pin_memory"),
                              (self.augment, "augment")]:
            widget.setToolTip(DataSpec.field_help(field))

    def _load(self, spec: DataSpec) -> None:
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
        self.num_workers.setValue(spec.num_workers)
        self.pin_memory.setChecked(spec.pin_memory)
        chosen = {step["name"]: step for step in spec.augment}
        for row, name in enumerate(AUGMENTATIONS):
            if name in chosen:
                self.augment.item(row, 0).setCheckState(Qt.Checked)
                self.augment.item(row, 1).setText(_format_params(chosen[name]))

    def spec_data(self) -> dict:
        """The form as plain spec data (what `DataSpec.from_dict` takes)."""
        data: dict = {
            "name": self.name.currentData(), "root": self.root.text().strip(), "download": self.download.isChecked(),
            "val_fraction": self.val_fraction.value(), "test_fraction": self.test_fraction.value(),
            "seed": self.seed.value(), "image_size": self.image_size.text().strip(),
            "size": self.size.value(), "num_classes": self.num_classes.value(),
            "num_workers": self.num_workers.value(), "pin_memory": self.pin_memory.isChecked(),
        }
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

    def _revalidate(self, *args) -> None:
        name = self.name.currentData()
        self.note.setText(DATASET_NOTES.get(name, ""))
        fake = name == "fake"
        self.size.setEnabled(fake)
        self.num_classes.setEnabled(fake)
        custom = self.normalize.currentText() == "custom"
        self.mean.setEnabled(custom)
        self.std.setEnabled(custom)
        try:
            self._spec = DataSpec.from_dict(self.spec_data())
        except SpecError as exc:
            self.error.setText(str(exc))
            self.buttons.button(QDialogButtonBox.Ok).setEnabled(False)
            return
        self.error.setText("")
        self.buttons.button(QDialogButtonBox.Ok).setEnabled(True)

    def _on_browse_clicked(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Dataset root folder", self.root.text() or "")
        if path:
            self.root.setText(path)


