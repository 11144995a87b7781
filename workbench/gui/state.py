"""GUI-side application state that several panels share: the chosen dataset and its calibration subset.

Panels read and change it; the training and quantization wizards start from it.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from workbench.specs import DataSpec


class DatasetState(QObject):
    changed = Signal()  # the dataset spec changed: views reload
    # A chosen dataset failed to load and was taken back: (its name, why). Emitted before the spec goes back,
    # so a view that chose it (the training wizard) can say why its choice did not stay.
    refused = Signal(str, str)
    calibration_changed = Signal()

    def __init__(self, spec: DataSpec | None = None, parent: QObject | None = None):
        super().__init__(parent)
        self.spec = spec or DataSpec()
        self.calibration_count = 256
        self.calibration_seed = 0

    def set_spec(self, spec: DataSpec) -> None:
        if spec != self.spec:
            self.spec = spec
            self.changed.emit()

    def set_calibration(self, count: int, seed: int) -> None:
        if (count, seed) != (self.calibration_count, self.calibration_seed):
            self.calibration_count, self.calibration_seed = count, seed
            self.calibration_changed.emit()

    def spec_dict(self) -> dict:
        return self.spec.to_dict()
