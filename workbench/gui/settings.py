"""Persistent window settings (QSettings), with one place that knows each key, its type and default."""

from __future__ import annotations

from PySide6.QtCore import QSettings

ORGANIZATION = "TorchWorkbench"
APPLICATION = "Torch Workbench"
SETTINGS_VERSION = 1

DEFAULTS = {
    "theme": "light",
    "device": "cpu",
    "workspace": "",
    "geometry": None,
    "window_state": None,
    "show_debug_details": False,
    "dataset_spec": "",  # the chosen dataset as spec JSON
    "thumbnail_size": 64,
    "calibration_count": 256,
    "calibration_seed": 0,
    "current_tab": 0,
    "train_spec": "",  # the last spec the training wizard started, as JSON: the next wizard starts from it
    "quant_spec": "",  # the same for the quantization wizard
    "quant_splitters": None,  # the Quantization tab's splitter positions ({name: QSplitter state})
    "spec_folder": "",  # where File ▸ Open spec ▸ Other spec file… last looked
}


class Settings:
    def __init__(self, qsettings: QSettings | None = None):
        self.qsettings = qsettings or QSettings(ORGANIZATION, APPLICATION)
        if int(self.qsettings.value("settings_version", 0) or 0) != SETTINGS_VERSION:
            # Future migrations go here; today there is only version 1.
            self.qsettings.setValue("settings_version", SETTINGS_VERSION)

    def get(self, key: str):
        default = DEFAULTS[key]
        value = self.qsettings.value(key, default)
        if isinstance(default, bool):  # QSettings' INI backend hands bools back as strings
            return value in (True, "true", "1", 1)
        return value

    def set(self, key: str, value) -> None:
        if key not in DEFAULTS:
            raise KeyError(f"unknown setting {key!r}")
        self.qsettings.setValue(key, value)

    def sync(self) -> None:
        self.qsettings.sync()
