"""SpecForm: form widgets generated from a spec's fields (type, bounds, choices, help), read back as plain data.

Wizards lay these out; validation stays in the spec (`from_dict`), so the form and the CLI agree.
"""

from __future__ import annotations

from typing import Literal, get_args, get_origin

from PySide6.QtCore import Signal
from PySide6.QtGui import QDoubleValidator
from PySide6.QtWidgets import QCheckBox, QComboBox, QFormLayout, QLineEdit, QSpinBox, QWidget

from workbench.specs import Spec


def _field_info(spec_cls: type[Spec], dotted: str):
    for path, hint, default, meta in spec_cls.iter_fields():
        if path == dotted:
            return hint, default, meta
    raise KeyError(f"{spec_cls.__name__} has no field {dotted!r}")


# Where a field's name makes a poor label (abbreviations, jargon), the form says it in words.
LABELS = {"lr": "Learning rate", "nproc": "Processes", "num_workers": "Loader workers",
          "no_decay_bias_norm": "No weight decay on biases and norms", "grad_accum_steps": "Gradient accumulation",
          "clip_grad_norm": "Clip gradient norm", "clip_grad_value": "Clip gradient value",
          "pin_memory": "Pin memory", "input_shape": "Input shape (C,H,W)", "num_classes": "Classes",
          "replace_head": "Replace the classifier head", "freeze": "Freeze modules"}


PLACEHOLDERS = {"input_shape": "from the dataset, e.g. 1,28,28", "checkpoint": "none: start from fresh weights",
                "weights": "none (e.g. DEFAULT for torchvision weights, needs internet)",
                "freeze": "none (module prefixes, or backbone)"}


def _label(dotted: str) -> str:
    name = dotted.split(".")[-1]
    return LABELS.get(name, name.replace("_", " ").capitalize())


class SpecForm(QWidget):
    changed = Signal()

    def __init__(self, spec_cls: type[Spec], fields: list[str], values: dict | None = None, parent=None):
        super().__init__(parent)
        self.spec_cls = spec_cls
        self.widgets: dict[str, QWidget] = {}
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        for dotted in fields:
            hint, default, meta = _field_info(spec_cls, dotted)
            widget = self._make_widget(hint, meta)
            widget.setToolTip(meta.get("help", ""))
            if isinstance(widget, QLineEdit) and dotted.split(".")[-1] in PLACEHOLDERS:
                widget.setPlaceholderText(PLACEHOLDERS[dotted.split(".")[-1]])
            self.widgets[dotted] = widget
            label = _label(dotted)
            layout.addRow("" if isinstance(widget, QCheckBox) else label, widget)
            if isinstance(widget, QCheckBox):
                widget.setText(label)
            self.set_value(dotted, default)
        if values:
            self.set_values(values)

    @staticmethod
    def _make_widget(hint, meta) -> QWidget:
        if hint is bool:
            return QCheckBox()
        if get_origin(hint) is Literal:
            widget = QComboBox()
            for choice in get_args(hint):
                widget.addItem(str(choice), choice)
            return widget
        if meta.get("choices") and hint is str:
            widget = QComboBox()
            for choice in meta["choices"]:
                widget.addItem(str(choice), choice)
            return widget
        if hint is int:
            widget = QSpinBox()
            low = meta.get("min", 0)
            widget.setRange(int(low) + (1 if meta.get("min_exclusive") else 0), int(meta.get("max", 2**31 - 1)))
            return widget
        widget = QLineEdit()
        if hint is float:
            # A line edit, not a spin box: learning rates want 3e-4, not a fixed number of decimals.
            widget.setValidator(QDoubleValidator())
        return widget

    # -- values ----------------------------------------------------------------------------------
    def set_value(self, dotted: str, value) -> None:
        widget = self.widgets[dotted]
        if isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))
        elif isinstance(widget, QComboBox):
            index = widget.findData(value)
            widget.setCurrentIndex(max(0, index))
        elif isinstance(widget, QSpinBox):
            widget.setValue(int(value))
        elif isinstance(value, list):
            widget.setText(",".join(str(v) for v in value))
        else:
            widget.setText(f"{value:g}" if isinstance(value, float) else str(value))

    def set_values(self, values: dict) -> None:
        """Set every form field found in a nested spec dict (e.g. a TrainSpec's to_dict())."""
        for dotted in self.widgets:
            node = values
            for part in dotted.split("."):
                if not isinstance(node, dict) or part not in node:
                    break
                node = node[part]
            else:
                self.set_value(dotted, node)

    def value(self, dotted: str):
        widget = self.widgets[dotted]
        if isinstance(widget, QCheckBox):
            return widget.isChecked()
        if isinstance(widget, QComboBox):
            return widget.currentData()
        if isinstance(widget, QSpinBox):
            return widget.value()
        return widget.text().strip()  # the spec coerces text to floats and lists and says what is wrong

    def apply_to(self, data: dict) -> dict:
        """Write the form's values into a nested spec dict (in place) and return it."""
        for dotted in self.widgets:
            node = data
            *parents, leaf = dotted.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = self.value(dotted)
        return data

    def connect_changes(self, slot) -> None:
        for widget in self.widgets.values():
            if isinstance(widget, QCheckBox):
                widget.toggled.connect(slot)
            elif isinstance(widget, QComboBox):
                widget.currentIndexChanged.connect(slot)
            elif isinstance(widget, QSpinBox):
                widget.valueChanged.connect(slot)
            else:
                widget.textChanged.connect(slot)
