"""The per-layer table of a quantize run: one row per quantizer (a layer's weights or its output activation)
with SQNR, MSE, clipping and rounding error, range and scale, and for a layer's output how unevenly its
channels spread (the channel-range ratio); sorts by value, and the worst quantizers are marked."""

from __future__ import annotations

import math

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor

from workbench.results import dig

COLUMNS = (
    "Layer",
    "Tensor",
    "Bits",
    "Range",
    "SQNR (dB)",
    "MSE",
    "Clipping MSE",
    "Rounding MSE",
    "Min",
    "Max",
    "Data min",
    "Data max",
    "Scale",
    "Net SQNR (dB)",
    "Ch. range ratio",
)
TOOLTIPS = {
    "SQNR (dB)": "Signal-to-quantization-noise ratio of this tensor alone: 10·log10(Σx² / Σ(x − q(x))²). "
    "About 6 dB per bit; higher is better",
    "Clipping MSE": "Mean squared error from values outside the clipping range",
    "Rounding MSE": "Mean squared error from rounding values inside the range to the grid",
    "Net SQNR (dB)": "Activations: SQNR of this layer's output in the fully quantized network against FP32, "
    "on held-out data — low here but high in SQNR means the layer inherits harm from earlier ones",
    "Min": "Low end of the clipping range in use: the smallest value the grid represents",
    "Max": "High end of the clipping range in use: the largest value the grid represents",
    "Data min": "The smallest value seen (the weights, or the activations over the calibration set)",
    "Data max": "The largest value seen: beyond Max, values are clipped",
    "Scale": "Step of the quantization grid (per-channel weights: the smallest and largest channel's)",
    "Ch. range ratio": "A layer's output: the widest channel's range over the median channel's (max / median "
    "of the per-channel ranges on the calibration set). One activation scale covers every channel, so a "
    "large value means outlier channels squeeze the others onto few levels (common in transformers); near 1, "
    "the channels are alike. Hover a value for its widest channels",
}
RATIO = "Ch. range ratio"
SORT_ROLE = Qt.UserRole + 1
KEY_ROLE = Qt.UserRole + 2  # (layer, tensor)
WORST = 3  # quantizers marked per tensor kind at most, and no more than a quarter of that kind (at least one)
WORST_COLOUR = QColor(220, 50, 47, 70)


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _scale_text(scale) -> tuple[str, float | None]:
    if isinstance(scale, list):
        values = [v for v in (_number(s) for s in scale) if v is not None]
        if not values:
            return "—", None
        return f"{min(values):.3g} – {max(values):.3g} ({len(values)} ch)", max(values)
    value = _number(scale)
    return ("—", None) if value is None else (f"{value:.4g}", value)


def net_sqnr(entry: dict) -> float | None:
    """An activation's SQNR in the fully quantized network, held-out data first (else calibration)."""
    for where in ("held_out", "calibration"):
        value = _number(dig(entry, "error", where, "accumulated", "sqnr_db"))
        if value is not None:
            return value
    return None


class LayerTableModel(QAbstractTableModel):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []
        self.worst: set[tuple[str, str]] = set()

    def set_layers(self, layers: list[dict]) -> None:
        self.beginResetModel()
        self.rows = [dict(entry) for entry in layers]
        self.worst = set()
        for tensor in ("weight", "activation"):
            scored = [
                (e["sqnr_db"], e["name"])
                for e in self.rows
                if e.get("tensor") == tensor and _number(e.get("sqnr_db")) is not None
            ]
            marked = min(WORST, max(1, len(scored) // 4))  # a mark means something only when few have it
            self.worst |= {(name, tensor) for _, name in sorted(scored)[:marked]}
        self.endResetModel()

    def key(self, row: int) -> tuple[str, str]:
        entry = self.rows[row]
        return entry.get("name", ""), entry.get("tensor", "")

    def row_of(self, layer: str, tensor: str) -> int:
        return next(
            (i for i, e in enumerate(self.rows) if (e.get("name"), e.get("tensor")) == (layer, tensor)), -1
        )

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation != Qt.Horizontal:
            return None
        if role == Qt.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ToolTipRole:
            return TOOLTIPS.get(COLUMNS[section])
        return None

    def _cell(self, entry: dict, column: str) -> tuple[str, object]:
        """(text, sort value) of one cell."""
        if column == "Layer":
            name = entry.get("name", "")
            return (name or "(model)"), name
        if column == "Tensor":
            return entry.get("tensor", ""), entry.get("tensor", "")
        if column == "Bits":
            return str(entry.get("bits", "")), _number(entry.get("bits"))
        if column == "Range":
            granularity = "per-channel" if entry.get("granularity") == "per_channel" else ""
            text = entry.get("range_method", "")
            return (f"{text} · {granularity}" if granularity else text), text
        if column == "Scale":
            return _scale_text(entry.get("scale"))
        if column == RATIO:  # blank where the run did not measure it (weights, other points, older runs)
            value = _number(entry.get("channel_range_ratio"))
            return ("" if value is None else f"{value:.3g}"), value
        if column == "Net SQNR (dB)":
            value = net_sqnr(entry) if entry.get("tensor") == "activation" else None
            return ("—" if value is None else f"{value:.1f}"), value
        key = {
            "SQNR (dB)": "sqnr_db",
            "MSE": "mse",
            "Clipping MSE": "clipping_mse",
            "Rounding MSE": "rounding_mse",
            "Min": "min",
            "Max": "max",
            "Data min": "data_min",
            "Data max": "data_max",
        }[column]
        raw = entry.get(key)
        if isinstance(raw, list):  # per-channel: the widest extent over the channels
            values = [v for v in (_number(x) for x in raw) if v is not None]
            raw = (min(values) if key in ("min", "data_min") else max(values)) if values else None
        value = _number(raw)
        if value is None:
            return "—", None
        return (f"{value:.1f}" if key == "sqnr_db" else f"{value:.3g}"), value

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        entry, column = self.rows[index.row()], COLUMNS[index.column()]
        if role == Qt.DisplayRole:
            return self._cell(entry, column)[0]
        if role == SORT_ROLE:
            value = self._cell(entry, column)[1]
            # Missing values sort below every number either way round, so they never hide the worst layers.
            return value if value is not None else -math.inf
        if role == KEY_ROLE:
            return entry.get("name", ""), entry.get("tensor", "")
        worst = (entry.get("name"), entry.get("tensor")) in self.worst
        if role == Qt.ToolTipRole and column == RATIO and entry.get("outlier_channels"):
            channels = ", ".join(str(c) for c in entry["outlier_channels"])
            return f"Widest channels, widest first: {channels}"
        if role == Qt.BackgroundRole and worst:
            return WORST_COLOUR
        if role == Qt.ToolTipRole and worst:
            marked = sum(1 for _, tensor in self.worst if tensor == entry.get("tensor"))
            return f"Among the {marked} {entry.get('tensor')} quantizers with the lowest SQNR"
        if role == Qt.TextAlignmentRole and column not in ("Layer", "Tensor", "Range"):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None


class LayerSortProxy(QSortFilterProxyModel):
    """Sorts by value (SORT_ROLE) and filters by layer name and tensor kind."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.setFilterKeyColumn(0)
        self.tensor = ""  # "" shows both

    def set_tensor(self, tensor: str) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt 6.9 and later; invalidateFilter is deprecated there
            self.beginFilterChange()
            self.tensor = tensor
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            self.tensor = tensor
            self.invalidateFilter()

    def filterAcceptsRow(self, row, parent) -> bool:  # noqa: N802 (Qt override)
        if self.tensor and self.sourceModel().rows[row].get("tensor") != self.tensor:
            return False
        return super().filterAcceptsRow(row, parent)
