"""The quantization wizard: source run → scheme (bits, granularity, symmetry, range) → calibration subset →
pipeline steps → Quantize. Every field comes from QuantSpec, so the wizard and `workbench quantize` agree;
presets fill in the paper's two usual starting points."""

from __future__ import annotations

import copy

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QVBoxLayout, QWizard, QWizardPage

from workbench.errors import SpecError
from workbench.gui.widgets.checked_page import CheckedPage
from workbench.gui.widgets.spec_form import SpecForm, field_errors
from workbench.results import dig
from workbench.specs import QuantSpec

LAST_SPEC_KEY = "quant_spec"

# name: (what it is, the fields it sets over QuantSpec's defaults)
PRESETS: dict[str, tuple[str, dict]] = {
    "W8A8 (safe)": (
        "8-bit per-channel weights and 8-bit activations with MSE ranges: usually within a fraction of "
        "a point of FP32, no learning.",
        {},
    ),
    "W4A8 (paper's flow)": (
        "4-bit weights with the white paper's PTQ pipeline: BN folding, cross-layer "
        "equalisation, MSE weight ranges, AdaRound, then 8-bit activation ranges.",
        {
            "weights": {"bits": 4, "range": "mse"},
            "cle": True,
            "adaround": {"enabled": True, "iterations": 500},
        },
    ),
}
CUSTOM = "Custom"

SCHEME_FIELDS = [
    "weights.bits",
    "weights.granularity",
    "weights.symmetric",
    "weights.restricted",
    "weights.range",
    "weights.percentile",
    "activations.bits",
    "activations.symmetric",
    "activations.range",
    "activations.percentile",
]
CALIBRATION_FIELDS = ["calibration.samples", "calibration.seed", "eval_samples", "batch_size", "device"]
PIPELINE_FIELDS = [
    "fold_bn",
    "cle",
    "adaround.enabled",
    "adaround.iterations",
    "bias_correction",
    "qat.epochs",
    "qat.lr",
    "sensitivity",
    "mixed_precision.target_drop",
    "doctor.enabled",
    "doctor.apply",
]
# The doctor's checkboxes, said as what they do (the spec's field names alone read as jargon).
DOCTOR_TEXTS = {"doctor.enabled": "Doctor: diagnose after the ladder", "doctor.apply": "Apply verified fixes"}
# The allowed drop's tooltip where it is typed in percentage points (the spec's own help speaks of a
# fraction).
DROP_IN_POINTS = (
    "Accuracy (or mIoU, mean AP) that the mixed-precision proposal may lose against FP32, in "
    "percentage points: 1 allows one point (the spec keeps 0.01); 0 asks for no proposal. A "
    "proposal runs the sensitivity sweep too: it ranks the layers."
)


def preset_data(name: str, base: dict | None = None) -> dict:
    """QuantSpec data for a preset: the defaults (or `base`'s source and calibration) with the preset's
    fields."""
    data = QuantSpec().to_dict()
    if base:
        for key in ("source", "calibration", "device", "eval_samples", "batch_size"):
            if key in base:
                data[key] = copy.deepcopy(base[key])
    for key, value in PRESETS.get(name, ("", {}))[1].items():
        if isinstance(value, dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def load_last_spec(settings) -> dict | None:
    text = settings.get(LAST_SPEC_KEY) if settings is not None else ""
    if not text:
        return None
    try:
        return QuantSpec.from_json(str(text), source="saved settings").to_dict()
    except SpecError:
        return None  # from an older version whose fields changed


class _FormPage(CheckedPage):
    def __init__(
        self, title: str, subtitle: str, fields: list[str], data: dict, headings: dict[str, str] | None = None
    ):
        super().__init__()
        self.setTitle(title)
        self.setSubTitle(subtitle)
        self.fields = fields
        self.form = SpecForm(QuantSpec, fields, data, headings=headings)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addStretch(1)


class SourcePage(QWizardPage):
    def __init__(self, runs: list[dict], source_run: str, preset: str):
        super().__init__()
        self.setTitle("Source and preset")
        self.setSubTitle(
            "The trained model to quantize (its checkpoint and dataset come with it), and where to "
            "start from."
        )
        self.run = QComboBox()
        self.run.setToolTip(
            "A finished training run of this workspace: its best (else last) checkpoint is quantized"
        )
        for entry in runs:
            self.run.addItem(entry.get("label") or f"{entry['id']}  ·  {entry.get('model', '')}", entry["id"])
            self.run.setItemData(self.run.count() - 1, entry.get("tooltip") or entry["id"], Qt.ToolTipRole)
        index = self.run.findData(source_run)
        self.run.setCurrentIndex(max(0, index))
        self.preset = QComboBox()
        for name, (about, _) in PRESETS.items():
            self.preset.addItem(name, name)
            self.preset.setItemData(self.preset.count() - 1, about, Qt.ToolTipRole)
        self.preset.addItem(CUSTOM, CUSTOM)
        self.preset.setItemData(
            self.preset.count() - 1, "The values you last used, or set on the next pages", Qt.ToolTipRole
        )
        self.preset.setCurrentIndex(max(0, self.preset.findData(preset)))
        self.about = QLabel()
        self.about.setWordWrap(True)
        self.empty = QLabel("No finished training run in this workspace yet: train one first (Ctrl+T).")
        self.empty.setStyleSheet("color: #c0392b")
        self.empty.setVisible(not runs)
        form = QFormLayout()
        form.addRow("Training run", self.run)
        form.addRow("Preset", self.preset)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.about)
        layout.addWidget(self.empty)
        layout.addStretch(1)
        self.preset.currentIndexChanged.connect(self._describe)
        self.run.currentIndexChanged.connect(self.completeChanged)
        self._describe()

    def _describe(self) -> None:
        self.about.setText(PRESETS.get(self.preset.currentData(), ("Start from the values you set.", {}))[0])

    def isComplete(self) -> bool:  # noqa: N802 (Qt override)
        return bool(self.run.currentData())


class QuantWizard(QWizard):
    """On accept, `spec` holds the validated QuantSpec to start."""

    def __init__(
        self,
        runs: list[dict],
        *,
        source_run: str = "",
        start: dict | None = None,
        calibration=None,
        device: str = "",
        settings=None,
        parent=None,
    ):
        super().__init__(parent)
        self.setWindowTitle("New quantization")
        self.setWizardStyle(QWizard.ModernStyle)
        self.setButtonText(QWizard.FinishButton, "Quantize")
        self.setOption(QWizard.HaveHelpButton, False)
        self.resize(720, 560)
        self.settings = settings
        self.spec: QuantSpec | None = None
        self.error = ""
        last = start or load_last_spec(settings)
        preset = CUSTOM if last else next(iter(PRESETS))
        data = copy.deepcopy(last) if last else preset_data(preset)
        if not start:
            # The Data tab's calibration subset and the toolbar's device are the defaults of a new
            # quantization.
            if calibration is not None:
                data["calibration"] = {"samples": int(calibration[0]), "seed": int(calibration[1])}
            if device:
                data["device"] = device
        self.start_data = data
        self.source_page = SourcePage(runs, source_run or dig(data, "source", "run", default=""), preset)
        self.scheme_page = _FormPage(
            "Scheme",
            "How weights and activations are quantized: hover a field for what it does.",
            SCHEME_FIELDS,
            data,
            headings={"weights.bits": "Weights", "activations.bits": "Activations"},
        )
        self.calibration_page = _FormPage(
            "Calibration subset",
            "The training samples that ranges, AdaRound and "
            "bias correction are fitted on (the Data tab's count and seed), and where "
            "accuracy is measured.",
            CALIBRATION_FIELDS,
            data,
        )
        self.pipeline_page = _FormPage(
            "Pipeline steps",
            "The white paper's PTQ steps, in order; each adds a rung to the accuracy ladder.",
            PIPELINE_FIELDS,
            data,
            headings={
                "fold_bn": "Post-training steps",
                "qat.epochs": "Quantization-aware training",
                "sensitivity": "Analysis",
                "doctor.enabled": "Doctor",
            },
        )
        self.form_pages = [self.scheme_page, self.calibration_page, self.pipeline_page]
        self._readable_widgets()
        for page in (self.source_page, *self.form_pages):
            self.addPage(page)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b")
        self.pipeline_page.layout().addWidget(self.error_label)
        for page in self.form_pages:
            page.form.changed.connect(self.rebuild)
        self.source_page.preset.currentIndexChanged.connect(self._apply_preset)
        self.source_page.run.currentIndexChanged.connect(self._on_run_changed)
        self._tasks = {entry["id"]: entry.get("learned", "") for entry in runs}
        self._on_run_changed()

    def _readable_widgets(self) -> None:
        """What the spec's values mean, in the widgets: per-channel rather than per_channel, a count of 0 that
        means all or none said in words, and the long allowed-drop label wrapped rather than widening its
        page's label column."""
        granularity = self.scheme_page.form.widgets["weights.granularity"]
        for i in range(granularity.count()):
            granularity.setItemText(i, str(granularity.itemData(i)).replace("_", "-"))
        self.calibration_page.form.widgets["eval_samples"].setSpecialValueText("all (the whole test split)")
        self.pipeline_page.form.widgets["qat.epochs"].setSpecialValueText("0 (no QAT)")
        form = self.pipeline_page.form
        label = form.layout_.labelForField(form.widgets["mixed_precision.target_drop"].parentWidget())
        label.setWordWrap(True)
        label.setFixedWidth(label.fontMetrics().horizontalAdvance("Mixed precision: allowed drop") + 4)
        label.setMinimumHeight(2 * label.fontMetrics().lineSpacing() + 2)
        # the spec's, in its own units
        self._drop_help = form.widgets["mixed_precision.target_drop"].toolTip()
        for dotted, text in DOCTOR_TEXTS.items():
            form.widgets[dotted].setText(text)

    def _on_run_changed(self, *args) -> None:
        """A share (accuracy, mIoU, mean AP) drops by percentage points, typed as 1 for 1 %; a regression's or
        a custom monitor's drop is in its own units (an MAE), typed as the spec keeps it."""
        task = self._tasks.get(self.source_page.run.currentData() or "", "")
        form = self.pipeline_page.form
        points = task not in ("regression", "custom")
        form.set_percent("mixed_precision.target_drop", points)
        form.widgets["mixed_precision.target_drop"].setToolTip(DROP_IN_POINTS if points else self._drop_help)
        self.rebuild()

    def _applicability(self) -> None:
        """Grey out what the rest of the spec leaves unused, with the reason as tooltip (as the other
        wizards)."""
        scheme, pipeline = self.scheme_page.form, self.pipeline_page.form
        for kind in ("weights", "activations"):
            method = scheme.value(f"{kind}.range")
            scheme.set_applicable(
                f"{kind}.percentile",
                method == "percentile",
                f"Not used with range method {method}: only percentile takes a percentile.",
            )
        pipeline.set_applicable(
            "adaround.iterations", pipeline.value("adaround.enabled"), "Not used: AdaRound is off."
        )
        pipeline.set_applicable(
            "qat.lr", pipeline.value("qat.epochs") > 0, "Not used: QAT epochs is 0 (no QAT)."
        )
        pipeline.set_applicable(
            "doctor.apply",
            pipeline.value("doctor.enabled"),
            "Not used: the doctor is off (it applies only the fixes it diagnosed and measured).",
        )

    def _apply_preset(self) -> None:
        name = self.source_page.preset.currentData()
        if name not in PRESETS:
            return
        data = preset_data(name, self.spec_data())
        for page in self.form_pages:
            page.form.set_values(data)
        self.rebuild()

    def spec_data(self) -> dict:
        data = copy.deepcopy(self.start_data)
        data["source"] = {**(data.get("source") or {}), "run": self.source_page.run.currentData() or ""}
        for page in self.form_pages:
            page.form.apply_to(data)
        return data

    def rebuild(self, *args) -> QuantSpec | None:
        self._applicability()
        data = self.spec_data()
        fields = [field for page in self.form_pages for field in page.fields]
        errors, general = field_errors(QuantSpec, data, fields)
        for page in self.form_pages:
            page.form.set_errors(errors)
            page.set_has_errors(any(field in errors for field in page.fields))
        first = next(iter(errors.values()), general)
        if first:
            self.spec, self.error = None, f"Fix this before starting: {first}"
        elif not data["source"]["run"]:
            self.spec, self.error = None, "Pick a training run to quantize."
        else:
            self.spec, self.error = QuantSpec.from_dict(data), ""
        self.error_label.setText(self.error)
        return self.spec

    def accept(self) -> None:
        if self.rebuild() is None:
            return
        if self.settings is not None:
            self.settings.set(LAST_SPEC_KEY, self.spec.to_json())
        super().accept()
