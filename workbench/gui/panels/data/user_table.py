"""SampleTableItemModel: the samples of a user's Dataset whose inputs are not images, as table rows of shapes,
dtypes and value ranges. Rows arrive a page at a time from `data.page` as the view scrolls (Qt's fetchMore)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal

from workbench.gui.panels.data.thumbnails import INDEX_ROLE

PAGE_SIZE = 200
COLUMNS = ("#", "input", "shape", "dtype", "min", "max", "mean", "target", "target shape", "target range")


def _number(value) -> str:
    return "" if value is None else f"{value:.4g}"


def _shape(shape) -> str:
    return "×".join(str(n) for n in shape) if shape else "scalar"


def _range(summary: dict) -> str:
    if summary.get("min") is None:
        return ""
    return f"{_number(summary['min'])} … {_number(summary['max'])}"


class SampleTableItemModel(QAbstractTableModel):
    """One row per sample; a sample with several inputs lists each (shape, dtype, range) on its own line."""

    load_failed = Signal(str)
    total_changed = Signal(int)

    def __init__(self, queries, parent=None):
        super().__init__(parent)
        self.queries = queries
        self.dataset: dict | None = None
        self.split = "train"
        self.rows: list[dict] = []
        self._total = 0
        self._generation = 0
        self._in_flight: str | None = None

    def configure(self, dataset: dict | None, split: str = "train") -> None:
        self.beginResetModel()
        self.dataset, self.split = dataset, split
        self._generation += 1
        if self._in_flight:
            self.queries.forget(self._in_flight)
        self._in_flight = None
        self.rows = []
        self._total = 0
        self.endResetModel()
        if dataset is not None:
            self._request()

    @property
    def total(self) -> int:
        return self._total

    # -- Qt model --------------------------------------------------------------------------------
    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802 (Qt override)
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation == Qt.Horizontal and role == Qt.DisplayRole and 0 <= section < len(COLUMNS):
            return COLUMNS[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == INDEX_ROLE:
            return row["index"]
        if role == Qt.TextAlignmentRole and index.column() in (0, 4, 5, 6):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role not in (Qt.DisplayRole, Qt.ToolTipRole):
            return None
        inputs, target = row["inputs"], row["target"]
        column = COLUMNS[index.column()]
        per_input = {
            "input": lambda s: s.get("name", "input"),
            "shape": lambda s: _shape(s["shape"]),
            "dtype": lambda s: s["dtype"],
            "min": lambda s: _number(s["min"]),
            "max": lambda s: _number(s["max"]),
            "mean": lambda s: _number(s["mean"]),
        }
        if column == "#":
            return str(row["index"])
        if column in per_input:
            return "\n".join(per_input[column](s) for s in inputs)
        if column == "target":
            return target.get("text", "")
        if column == "target shape":
            return f"{_shape(target['shape'])} {target['dtype']}"
        return _range(target)

    # -- fetching --------------------------------------------------------------------------------
    def canFetchMore(self, parent=QModelIndex()) -> bool:  # noqa: N802 (Qt override)
        return not parent.isValid() and self._in_flight is None and len(self.rows) < self._total

    def fetchMore(self, parent=QModelIndex()) -> None:  # noqa: N802 (Qt override)
        if self.canFetchMore(parent):
            self._request()

    def _request(self) -> None:
        generation = self._generation
        spec = {"dataset": self.dataset, "split": self.split, "offset": len(self.rows), "count": PAGE_SIZE,
                "request_id": generation}
        self._in_flight = self.queries.query("data.page", spec, lambda r: self._on_page(generation, r),
                                             lambda e: self._on_page_error(generation, e))

    def _on_page(self, generation: int, result: dict) -> None:
        if generation != self._generation:
            return  # a reply for a split or dataset the user has already left
        self._in_flight = None
        rows = result.get("rows") or []
        if int(result.get("offset", 0)) != len(self.rows):
            return
        total = int(result["total"])
        if rows:
            self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows) + len(rows) - 1)
            self.rows.extend(rows)
            self.endInsertRows()
        if total != self._total:
            self._total = total
            self.total_changed.emit(total)

    def _on_page_error(self, generation: int, error: dict) -> None:
        if generation != self._generation:
            return
        self._in_flight = None
        self._total = len(self.rows)  # stop asking for more of a dataset that cannot be read
        self.load_failed.emit(error.get("message", "the dataset could not be read"))
