"""Which metric a Lightning run is judged by: the monitor of the module's own ModelCheckpoint (or
EarlyStopping), else the first `val_*` metric it logs; and whether higher or lower is better. No lightning
import: it reads plain attributes, so it is tested without a Trainer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# names that contain one of these are minimised
LOWER_IS_BETTER = ("loss", "error", "mse", "mae", "rmse", "nll")


@dataclass
class Monitor:
    name: str
    higher_is_better: bool
    # where it was found, for the log: "ModelCheckpoint", "EarlyStopping", "the first val_* metric"
    source: str

    def improves(self, value: float, best: float | None) -> bool:
        if not math.isfinite(value):
            return False
        return best is None or (value > best if self.higher_is_better else value < best)


def direction_of(name: str) -> bool:
    """True when a higher value is better: lower for names that say loss, error, mse, mae."""
    lowered = name.lower()
    return not any(word in lowered for word in LOWER_IS_BETTER)


def from_callbacks(callbacks, exclude=()) -> Monitor | None:
    """The monitor a ModelCheckpoint names (else an EarlyStopping), with its mode; None when none names
    one."""
    for kind in ("ModelCheckpoint", "EarlyStopping"):
        for callback in callbacks:
            if callback in exclude or not any(cls.__name__ == kind for cls in type(callback).__mro__):
                continue
            name = getattr(callback, "monitor", None)
            if name:
                mode = getattr(callback, "mode", "min")
                return Monitor(name, mode == "max", kind)
    return None


def from_logged(names) -> Monitor | None:
    """The first `val_*` name logged (Lightning's `_step` copies left out), with the direction its name
    implies."""
    for name in names:
        if name.startswith("val_") and not name.endswith("_step"):
            return Monitor(name, direction_of(name), "the first val_* metric logged")
    return None
