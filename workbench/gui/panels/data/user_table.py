"""SampleTableItemModel: the samples of a user's Dataset whose inputs are not images, as table rows: token
sequences as their ids and decoded text, tabular rows as their target then one column per feature, signals as
a small line of their values beside their target, anything else as shapes, dtypes and value ranges. Rows
arrive a page at a time from `data.page` as the view scrolls (Qt's fetchMore)."""

from __future__ import annotations

from PySide6.QtCore import QAbstractTableModel, QModelIndex, Qt, Signal

from workbench.gui.panels.data.sparkline import sparkline
from workbench.gui.panels.data.thumbnails import INDEX_ROLE
from workbench.gui.plots import SERIES_COLOURS
from workbench.results import dig

PAGE_SIZE = 200
COLUMNS = ("#", "input", "shape", "dtype", "min", "max", "mean", "target", "target shape", "target range")
TOKEN_COLUMNS = ("#", "text", "ids", "length", "min id", "max id", "target")
# The target next to the picture of the signal: what a row is, before its numbers.
SIGNAL_COLUMNS = ("#", "signal", "target", "min", "max", "mean", "shape")
MAX_FEATURE_COLUMNS = 40  # a wider row keeps the summary columns: forty columns of numbers read as noise
NUMERIC = {"#", "min", "max", "mean", "length", "min id", "max id"}


def columns_for(kind: str, rows: list[dict]) -> tuple[str, ...]:
    """The columns a page of this input kind reads best in: tokens' text and ids, one per tabular feature, or
    the tensor summaries (with the input column only when a sample has several, named inputs)."""
    first = (rows[0].get("sample") or {}) if rows else {}
    if kind == "tokens":
        return TOKEN_COLUMNS if "text" in first else tuple(c for c in TOKEN_COLUMNS if c != "text")
    names = first.get("names") or []
    if kind == "tabular" and 0 < len(names) <= MAX_FEATURE_COLUMNS:
        # The target first: after a dozen feature columns it would be scrolled out of sight.
        return ("#", "target", *names)
    if kind == "signal" and first.get("kind") == "signal" and not any(len(row["inputs"]) > 1 for row in rows):
        return SIGNAL_COLUMNS
    several = any(len(row["inputs"]) > 1 for row in rows)
    return COLUMNS if several else tuple(c for c in COLUMNS if c != "input")


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
        self.columns: tuple[str, ...] = COLUMNS
        self.kind = ""
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
        self.columns, self.kind = COLUMNS, ""
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
        return 0 if parent.isValid() else len(self.columns)

    def headerData(self, section, orientation, role=Qt.DisplayRole):  # noqa: N802 (Qt override)
        if orientation == Qt.Horizontal and role == Qt.DisplayRole and 0 <= section < len(self.columns):
            return self.columns[section]
        return None

    def data(self, index, role=Qt.DisplayRole):
        if not index.isValid() or index.row() >= len(self.rows):
            return None
        row = self.rows[index.row()]
        if role == INDEX_ROLE:
            return row["index"]
        column = self.columns[index.column()]
        sample = row.get("sample") or {}
        if role == Qt.TextAlignmentRole and (
            column in NUMERIC or sample.get("kind") == "tabular" and column not in ("target",)
        ):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if column == "signal":
            return self._signal_cell(row, sample, role)
        if role not in (Qt.DisplayRole, Qt.ToolTipRole):
            return None
        if column == "#":
            return str(row["index"])
        if self.kind == "tokens" and sample.get("kind") == "tokens":
            return _token_cell(column, sample, row["target"], role == Qt.ToolTipRole)
        if self.kind == "tabular" and sample.get("kind") == "tabular" and column in sample.get("names", ()):
            value = sample["values"][sample["names"].index(column)]
            return f"{value:.6g}" if role == Qt.ToolTipRole else _number(value)
        inputs, target = row["inputs"], row["target"]
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

    def _signal_cell(self, row: dict, sample: dict, role):
        """The signal's line (its first channel) as the cell's picture, drawn once per row."""
        if role == Qt.DecorationRole:
            if "_sparkline" not in row:
                values = (sample.get("values") or [[]])[0]
                row["_sparkline"] = sparkline(values, SERIES_COLOURS[0])
            return row["_sparkline"]
        if role == Qt.ToolTipRole:
            channels = len(sample.get("values") or [])
            return (
                f"{sample.get('length', '')} steps"
                + (f", {channels} channels (the first drawn)" if channels > 1 else "")
                + "; open the row for its plot"
            )
        return None

    # -- fetching --------------------------------------------------------------------------------
    def canFetchMore(self, parent=QModelIndex()) -> bool:  # noqa: N802 (Qt override)
        return not parent.isValid() and self._in_flight is None and len(self.rows) < self._total

    def fetchMore(self, parent=QModelIndex()) -> None:  # noqa: N802 (Qt override)
        if self.canFetchMore(parent):
            self._request()

    def _request(self) -> None:
        generation = self._generation
        spec = {
            "dataset": self.dataset,
            "split": self.split,
            "offset": len(self.rows),
            "count": PAGE_SIZE,
            "request_id": generation,
        }
        self._in_flight = self.queries.query(
            "data.page",
            spec,
            lambda r: self._on_page(generation, r),
            lambda e: self._on_page_error(generation, e),
        )

    def _on_page(self, generation: int, result: dict) -> None:
        if generation != self._generation:
            return  # a reply for a split or dataset the user has already left
        self._in_flight = None
        rows = result.get("rows") or []
        if int(result.get("offset", 0)) != len(self.rows):
            return
        total = int(result["total"])
        if rows and not self.rows:
            kind = str(result.get("input_kind") or dig(rows[0], "sample", "kind", default=""))
            columns = columns_for(kind, rows)
            if columns != self.columns or kind != self.kind:
                self.beginResetModel()
                self.columns, self.kind = columns, kind
                self.endResetModel()
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


def _token_cell(column: str, sample: dict, target: dict, tooltip: bool) -> str:
    """A token sequence's cell: its decoded text, its ids, the count of non-padding tokens, its id range."""
    ids = sample.get("ids") or []
    if column == "text":
        return sample.get("text", "")
    if column == "ids":
        text = " ".join(str(i) for i in ids)
        more = sample.get("total", len(ids)) - len(ids)
        return text + (f" … (+{more})" if more > 0 else "")
    if column == "length":
        if tooltip:
            return "tokens other than the padding id 0" if sample.get("pad") else "tokens in the sequence"
        return str(sample.get("length", len(ids)))
    if column == "min id":
        return str(sample.get("min", ""))
    if column == "max id":
        return str(sample.get("max", ""))
    return target.get("text", "")
