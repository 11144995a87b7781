"""SpecForm: form widgets generated from a spec's fields (type, bounds, choices, help), read back as plain
data.

Wizards lay these out; validation stays in the spec (`from_dict`), so the form and the CLI agree. Also the
pure helpers that attach a spec's errors to fields and compare two specs' plain data.
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Mapping
from typing import Literal, Union, get_args, get_origin

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.errors import SpecError
from workbench.specs import Spec

QT_INT_MAX = 2**31 - 1  # the largest value a QSpinBox (a C int) holds

ERROR_COLOUR = "#d0342c"


def _field_info(spec_cls: type[Spec], dotted: str):
    for path, hint, default, meta in spec_cls.iter_fields():
        if path == dotted:
            return hint, default, meta
    raise KeyError(f"{spec_cls.__name__} has no field {dotted!r}")


# Where a field's name makes a poor label (abbreviations, jargon), the form says it in words.
LABELS = {
    "lr": "Learning rate",
    "nproc": "Processes",
    "num_workers": "Loader workers",
    "no_decay_bias_norm": "No weight decay on biases and norms",
    "grad_accum_steps": "Gradient accumulation",
    "clip_grad_norm": "Clip gradient norm",
    "clip_grad_value": "Clip gradient value",
    "pin_memory": "Pin memory",
    "input_shape": "Input shape (C,H,W)",
    "num_classes": "Classes",
    "replace_head": "Replace the classifier head",
    "freeze": "Freeze modules",
    "layer_stats_every": "Layer statistics every (steps)",
}


# Fields whose leaf name reads poorly once its section is gone (`adaround.iterations` is not any
# "Iterations").
DOTTED_LABELS = {
    "fold_bn": "Fold BatchNorm",
    "cle": "Cross-layer equalisation",
    "adaround.enabled": "AdaRound",
    "adaround.iterations": "AdaRound iterations",
    "bias_correction": "Bias correction",
    "qat.epochs": "QAT epochs",
    "qat.lr": "QAT learning rate",
    "sensitivity": "Sensitivity sweep",
    "mixed_precision.target_drop": "Mixed precision: allowed drop",
    "eval_samples": "Evaluation samples",
    "calibration.samples": "Calibration samples",
    "calibration.seed": "Calibration seed",
    "weights.range": "Range method",
    "activations.range": "Range method",
    "weights.restricted": "Restricted grid (no -2^(bits-1))",
}


PLACEHOLDERS = {
    "input_shape": "from the dataset, e.g. 1,28,28",
    "checkpoint": "none: start from fresh weights",
    "weights": "none (e.g. DEFAULT for torchvision weights, needs internet)",
    "freeze": "none (module prefixes, or backbone)",
}


def _label(dotted: str) -> str:
    if dotted in DOTTED_LABELS:
        return DOTTED_LABELS[dotted]
    name = dotted.split(".")[-1]
    return LABELS.get(name, name.replace("_", " ").capitalize())


def _set_path(data: dict, dotted: str, value) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


# -- errors, field by field --------------------------------------------------------------------------------
def field_named(message: str, fields) -> str | None:
    """The field of `fields` that a SpecError message starts with (`model.input_shape[1]: ...` names
    model.input_shape), or None when it names none of them."""
    path = re.sub(r"\[\d+\]", "", message.split(": ", 1)[0])
    named = [f for f in fields if path == f or path.startswith(f + ".")]
    return max(named, key=len) if named else None


def _is_int_or_auto(hint) -> bool:
    """An `int | Literal["auto"]` field, such as dataset.num_workers."""
    if get_origin(hint) not in (Union, types.UnionType):
        return False
    args = get_args(hint)
    return (
        len(args) == 2
        and int in args
        and any(get_origin(a) is Literal and get_args(a) == ("auto",) for a in args)
    )


class AutoSpinBox(QSpinBox):
    """A spin box whose lowest step reads "auto": a count the job may choose itself (dataset.num_workers)."""

    def __init__(self, maximum: int, parent=None):
        super().__init__(parent)
        self.setRange(-1, maximum)
        self.setSpecialValueText("auto")

    def spec_value(self) -> int | str:
        return "auto" if self.value() < 0 else self.value()

    def set_spec_value(self, value: int | str) -> None:
        self.setValue(-1 if value == "auto" else int(value))


def _bool_or_literal_choices(hint) -> list:
    """The choices of a `bool | Literal[...]` field (literal values first, then true, false); [] otherwise."""
    if get_origin(hint) not in (Union, types.UnionType):
        return []
    args = get_args(hint)
    literals = [a for a in args if get_origin(a) is Literal]
    if bool not in args or not literals or len(args) != 1 + len(literals):
        return []
    return [value for literal in literals for value in get_args(literal)] + [True, False]


def field_errors(spec_cls: type[Spec], data: dict, fields) -> tuple[dict[str, str], str]:
    """Validate plain spec data with `spec_cls.from_dict` and attach each error to the field it names.

    from_dict stops at the first error, so a field found wrong is put back to its default and the check runs
    again to find the next one; cross-field rules (nproc needs ddp) are judged against the real values of
    every other field. Returns ({field: message}, an error that names no field of `fields`, or "").
    """
    data = copy.deepcopy(data)
    defaults = {path: default for path, _, default, _ in spec_cls.iter_fields()}
    errors: dict[str, str] = {}
    for _ in range(len(fields) + 1):
        try:
            spec_cls.from_dict(data)
            return errors, ""
        except SpecError as exc:
            message = str(exc)
        field = field_named(message, fields)
        if field is None or field in errors or field not in defaults:
            return errors, message
        errors[field] = message
        _set_path(data, field, copy.deepcopy(defaults[field]))
    return errors, ""


# -- comparing specs ---------------------------------------------------------------------------------------
def canonical(value):
    """A hashable form of plain spec data in which the key order of a table does not count.

    Lists keep their order (an augmentation pipeline runs in list order); their items, tables included, are
    compared by content. bool stays apart from int, so `true` never equals `1`.
    """
    if isinstance(value, Mapping):
        return ("table", tuple(sorted((str(k), canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return ("list", tuple(canonical(v) for v in value))
    if isinstance(value, bool):
        return ("bool", value)
    return value


def spec_differences(a: dict, b: dict, prefix: str = "") -> list[tuple[str, object, object]]:
    """Fields whose values differ between two specs' plain data: [(dotted path, value in a, value in b)].

    Tables present in both are compared field by field; anything else (lists, a table against a string such as
    normalize = "auto") is compared whole with `canonical`. A field missing on one side reads as None there.
    """
    differences = []
    for key in sorted(set(a) | set(b), key=str):
        path = f"{prefix}{key}"
        left, right = a.get(key), b.get(key)
        if isinstance(left, Mapping) and isinstance(right, Mapping):
            differences.extend(spec_differences(dict(left), dict(right), path + "."))
        elif canonical(left) != canonical(right):
            differences.append((path, left, right))
    return differences


# -- the form ----------------------------------------------------------------------------------------------
class SpecForm(QWidget):
    changed = Signal()  # any field edited (by the user or in code)

    def __init__(
        self,
        spec_cls: type[Spec],
        fields: list[str],
        values: dict | None = None,
        parent=None,
        *,
        headings: dict[str, str] | None = None,
    ):
        """`headings`: {field: a section heading shown above it} (Weights, Activations)."""
        super().__init__(parent)
        self.spec_cls = spec_cls
        self.widgets: dict[str, QWidget] = {}
        self.error_labels: dict[str, QLabel] = {}
        self.errors: dict[str, str] = {}
        self.inapplicable: dict[str, str] = {}  # field -> why it does not apply now (it is greyed out)
        self._help: dict[str, str] = {}
        self._rows: dict[str, QWidget] = {}
        self._labels: dict[str, str] = {}
        # fraction fields entered and shown in percentage points (see set_percent)
        self.percent: set[str] = set()
        self.layout_ = layout = QFormLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)  # the page around it has margins; rows it gains line up with it
        layout.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        for dotted in fields:
            hint, default, meta = _field_info(spec_cls, dotted)
            widget = self._make_widget(hint, meta)
            self._help[dotted] = meta.get("help", "")
            widget.setToolTip(self._help[dotted])
            if isinstance(widget, QLineEdit) and dotted.split(".")[-1] in PLACEHOLDERS:
                widget.setPlaceholderText(PLACEHOLDERS[dotted.split(".")[-1]])
            self.widgets[dotted] = widget
            # The message sits right under its field, so a wrong value is explained where it was typed.
            error = QLabel()
            error.setWordWrap(True)
            error.setStyleSheet(f"color: {ERROR_COLOUR}")
            error.hide()
            self.error_labels[dotted] = error
            row = QWidget()
            row_layout = QVBoxLayout(row)
            row_layout.setContentsMargins(0, 0, 0, 0)
            row_layout.setSpacing(2)
            row_layout.addWidget(widget)
            row_layout.addWidget(error)
            self._rows[dotted] = row
            if headings and dotted in headings:
                heading = QLabel(f"<b>{headings[dotted]}</b>")
                heading.setObjectName(f"heading:{headings[dotted]}")
                if layout.rowCount():  # a section after another one stands apart from it
                    heading.setContentsMargins(0, 8, 0, 0)
                layout.addRow(heading)
            label = self._labels[dotted] = _label(dotted)
            layout.addRow("" if isinstance(widget, QCheckBox) else label, row)
            if isinstance(widget, QCheckBox):
                widget.setText(label)
            self.set_value(dotted, default)
        if values:
            self.set_values(values)
        self.connect_changes(lambda *args: self.changed.emit())

    @staticmethod
    def _make_widget(hint, meta) -> QWidget:
        if hint is bool:
            return QCheckBox()
        choices = _bool_or_literal_choices(hint)
        if choices:  # e.g. channels_last: true | false | "auto": three choices, not free text
            widget = QComboBox()
            for choice in choices:
                widget.addItem(str(choice).lower() if isinstance(choice, bool) else str(choice), choice)
            return widget
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
        if _is_int_or_auto(hint):
            return AutoSpinBox(min(int(meta.get("max", QT_INT_MAX)), QT_INT_MAX))
        if hint is int:
            widget = QSpinBox()
            low = meta.get("min", 0)
            # QSpinBox holds a C int: a wider bound (a 64-bit seed) is clamped to what the box can show.
            widget.setRange(
                int(low) + (1 if meta.get("min_exclusive") else 0),
                min(int(meta.get("max", QT_INT_MAX)), QT_INT_MAX),
            )
            if widget.minimum() == 0 and "0 (auto)" in str(meta.get("help", "")):
                widget.setSpecialValueText("auto")  # model.num_classes: 0 means the job counts them, not zero
            return widget
        # A line edit, not a spin box: learning rates want 3e-4, not a fixed number of decimals. No validator
        # either: one silently swallows keystrokes, while the spec's inline message says what is wrong.
        return QLineEdit()

    # -- values ----------------------------------------------------------------------------------
    def set_percent(self, dotted: str, on: bool) -> None:
        """Enter and show a fraction field in percentage points (1 for 0.01), or back as the spec keeps it;
        the value stays the same, and the label says the unit."""
        if on == (dotted in self.percent):
            return
        value = self.value(dotted)
        try:
            value = float(value)  # the typed text, which the spec would coerce the same way
        except (TypeError, ValueError):
            pass  # text that is no number stays as typed; the spec says what is wrong with it
        (self.percent.add if on else self.percent.discard)(dotted)
        self.set_value(dotted, value)
        label = self.layout_.labelForField(self._rows[dotted])
        if label is not None:
            label.setText(self._labels[dotted] + (" (percentage points)" if on else ""))

    def set_value(self, dotted: str, value) -> None:
        widget = self.widgets[dotted]
        if dotted in self.percent and isinstance(value, (int, float)) and not isinstance(value, bool):
            widget.setText(f"{value * 100:.6g}")
            return
        if isinstance(widget, QCheckBox):
            widget.setChecked(bool(value))
        elif isinstance(widget, QComboBox):
            # By identity of type and value: findData would match True to 1, and a bool to a number.
            index = next(
                (
                    i
                    for i in range(widget.count())
                    if type(widget.itemData(i)) is type(value) and widget.itemData(i) == value
                ),
                -1,
            )
            widget.setCurrentIndex(max(0, index))
        elif isinstance(widget, AutoSpinBox):
            widget.set_spec_value(value)
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
        if isinstance(widget, AutoSpinBox):
            return widget.spec_value()
        if isinstance(widget, QSpinBox):
            return widget.value()
        text = widget.text().strip()
        if dotted in self.percent:
            try:
                return round(float(text) / 100, 12)  # 1 (point) is 0.01, without 0.010000000000000002
            except ValueError:
                return text  # the spec says what is wrong with it
        return text  # the spec coerces text to floats and lists and says what is wrong

    def apply_to(self, data: dict) -> dict:
        """Write the form's values into a nested spec dict (in place) and return it.

        Fields that do not apply now (greyed out) are left as `data` has them: their value is not used, and a
        stale or invalid one the user cannot edit must not block the spec.
        """
        for dotted in self.widgets:
            if dotted not in self.inapplicable:
                _set_path(data, dotted, self.value(dotted))
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

    # -- errors and applicability ----------------------------------------------------------------
    def set_errors(self, errors: dict[str, str]) -> None:
        """Show each field's message under it ({field: message}); fields not named are cleared."""
        self.errors = {field: text for field, text in errors.items() if field in self.widgets}
        for dotted, label in self.error_labels.items():
            text = self.errors.get(dotted, "")
            label.setText(text)
            label.setVisible(bool(text))
            name_label = self.layout_.labelForField(self._rows[dotted])
            if name_label is not None:
                name_label.setStyleSheet(f"color: {ERROR_COLOUR}" if text else "")

    def set_applicable(self, dotted: str, applies: bool, reason: str = "") -> None:
        """Grey a field out when the rest of the spec makes it meaningless, with the reason as its tooltip."""
        widget = self.widgets[dotted]
        if applies:
            self.inapplicable.pop(dotted, None)
        else:
            self.inapplicable[dotted] = reason
        widget.setEnabled(applies)
        help_text = self._help[dotted]
        widget.setToolTip(help_text if applies else f"{reason}\n\n{help_text}")
        label = self.layout_.labelForField(self._rows[dotted])
        if label is not None:
            label.setEnabled(applies)
            label.setToolTip(widget.toolTip())
