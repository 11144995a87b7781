"""The module table of a graph: name, type, output shape, parameters and FLOPs per module, as a Qt item model,
and the proxy that sorts it by value and filters it by text and by leaf layers. No torch.
"""

from __future__ import annotations

import csv
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt

COLUMNS = ("Module", "Type", "Output shape", "Params", "FLOPs")
CSV_COLUMNS = ("name", "type", "output_shape", "params", "flops")
SORT_ROLE = Qt.UserRole + 1
NAME_ROLE = Qt.UserRole + 2
ROOT_LABEL = "(model)"


def shape_text(shape) -> str:
    return "×".join(str(s) for s in shape) if shape else ("—" if shape is None else "scalar")


def flops_text(flops: int) -> str:
    for scale, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if flops >= scale:
            return f"{flops / scale:.2f}{suffix}"
    return str(int(flops))


class ModuleTableItemModel(QAbstractTableModel):
    """Rows are the `modules` of a graph.build result, in named_modules() order."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.rows: list[dict] = []

    def set_modules(self, rows: list[dict]) -> None:
        self.beginResetModel()
        self.rows = list(rows)
        self.endResetModel()

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        row, column = self.rows[index.row()], index.column()
        if role == NAME_ROLE:
            return row["name"]
        if role == SORT_ROLE:
            if column == 2:  # by size; a module never called (a branch not taken) sorts below every shape
                return _volume(row["output_shape"]) if row["output_shape"] else -1
            return (row["name"], row["type"], None, row["params"], row["flops"])[column]
        if role == Qt.DisplayRole:
            return (
                row["name"] or ROOT_LABEL,
                row["type"],
                shape_text(row["output_shape"]),
                f"{row['params']:,}",
                flops_text(row["flops"]),
            )[column]
        if role == Qt.ToolTipRole:
            if column == 0:  # the full path, which a narrow column elides
                return row["name"] or ROOT_LABEL
            if column == 4:
                return f"{row['flops']:,} FLOPs per sample (2 per multiply-add)"
            if column == 2 and row["output_shape"] is None:
                return "not called in the traced forward pass (a branch not taken, or an unused module)"
            return None
        if role == Qt.TextAlignmentRole and column >= 3:
            return int(Qt.AlignRight | Qt.AlignVCenter)
        return None

    def write_csv(self, path: str | Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            for row in self.rows:
                shape = "x".join(map(str, row["output_shape"])) if row["output_shape"] else ""
                writer.writerow([row["name"], row["type"], shape, row["params"], row["flops"]])


def _volume(shape) -> int:
    total = 1
    for side in shape:
        total *= int(side)
    return total


class ModuleFilterProxy(QSortFilterProxyModel):
    """Sorts by value (SORT_ROLE); keeps rows whose name or type holds the search text, and only leaf layers
    (modules without children) when `leaves_only` is on."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.leaves_only = True
        self.text = ""
        self.setSortRole(SORT_ROLE)

    def set_text(self, text: str) -> None:
        self._refilter(lambda: setattr(self, "text", text.strip().lower()))

    def _refilter(self, change) -> None:
        if hasattr(self, "beginFilterChange"):  # Qt 6.9 and later; invalidateFilter is deprecated there
            self.beginFilterChange()
            change()
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)
        else:
            change()
            self.invalidateFilter()

    def set_leaves_only(self, on: bool) -> None:
        self._refilter(lambda: setattr(self, "leaves_only", on))

    def filterAcceptsRow(self, source_row, source_parent) -> bool:  # noqa: N802 (Qt override)
        row = self.sourceModel().rows[source_row]
        if self.leaves_only and not row.get("leaf", True):
            return False
        return not self.text or self.text in row["name"].lower() or self.text in row["type"].lower()
