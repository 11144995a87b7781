"""The benchmark's results table: a row per backend and batch size, filling in as rows are measured. In each
numeric column the best cell is green and the worst red, compared among the rows of the same batch size (the
backends a choice is made between; across batch sizes when only one backend ran). Rows that could not run are
greyed, their reason in the tooltip."""

from __future__ import annotations

import textwrap

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from workbench.gui.panels.export.results import (
    finite_number,
    format_bytes,
    format_ms,
    format_rate,
    measured,
    row_key,
)
from workbench.results import BenchRow

# (header, how to read the value from a row, "low" or "high" is better, how to show it)
NUMERIC_COLUMNS = (
    ("p50 (ms)", lambda r: BenchRow.from_dict(r).latency("p50"), "low", format_ms),
    ("p90 (ms)", lambda r: BenchRow.from_dict(r).latency("p90"), "low", format_ms),
    ("p99 (ms)", lambda r: BenchRow.from_dict(r).latency("p99"), "low", format_ms),
    ("Mean (ms)", lambda r: BenchRow.from_dict(r).latency("mean"), "low", format_ms),
    ("Throughput (/s)", lambda r: r.get("throughput_per_s"), "high", format_rate),
    # 0 B is a probe that saw nothing (onnxruntime's own allocator, say), not the least memory: not measured.
    ("Peak memory", lambda r: r.get("peak_memory_bytes") or None, "low", format_bytes),
)
MEMORY_COLUMN = "Peak memory"
NOT_MEASURED = "not measured"
TEXT_COLUMNS = ("Backend", "Batch", "Dtype", "Status")
COLUMNS = TEXT_COLUMNS + tuple(c[0] for c in NUMERIC_COLUMNS)
FIRST_NUMERIC = len(TEXT_COLUMNS)
STATUS_COLUMN = 3
# Translucent, so the cell keeps reading on the light and the dark base alike.
BEST = QColor(46, 157, 74, 90)
WORST = QColor(208, 52, 44, 90)
GREYED = QColor("#8a8f98")
STATUS_COLOURS = {
    "done": "#2e9d4a",
    "ok": "#2e9d4a",
    "failed": "#d0342c",
    "unavailable": "#8a8f98",
    "pending": "#8a8f98",
}
KEY_ROLE = Qt.UserRole + 1


def best_and_worst(rows: list[dict]) -> dict[tuple[int, int], str]:
    """{(row index, column): "best" | "worst"} for every numeric column: among the measured rows of one batch
    size when some batch size has two or more of them, else across the column. Nothing is marked between equal
    values or in a column with fewer than two numbers."""
    done = [i for i, r in enumerate(rows) if measured(r)]
    by_batch: dict[object, list[int]] = {}
    for i in done:
        by_batch.setdefault(rows[i].get("batch_size"), []).append(i)
    groups = list(by_batch.values()) if any(len(g) > 1 for g in by_batch.values()) else [done]
    marks: dict[tuple[int, int], str] = {}
    for offset, (_, read, better, _) in enumerate(NUMERIC_COLUMNS):
        column = FIRST_NUMERIC + offset
        for group in groups:
            values = [(read(rows[i]), i) for i in group if finite_number(read(rows[i]))]
            if len(values) < 2:
                continue
            low, high = min(values), max(values)
            if low[0] == high[0]:
                continue
            best, worst = (low, high) if better == "low" else (high, low)
            marks[(best[1], column)] = "best"
            marks[(worst[1], column)] = "worst"
    return marks


def memory_unmeasured_reason(row: dict) -> str:
    """Why a measured row has no peak memory (None, or 0 B: a probe that saw nothing), or "" when it has
    one."""
    if not measured(row) or (finite_number(row.get("peak_memory_bytes")) and row["peak_memory_bytes"] > 0):
        return ""
    device = str(row.get("device") or "")
    if row.get("peak_memory_bytes") is None:
        return "this platform has no probe of the process's memory"
    if device.startswith("cuda"):
        return (
            f"torch's counter of device memory saw nothing: {row.get('backend', 'this backend')} allocates "
            "with its own allocator, which it does not count"
        )
    return (
        "the process's resident memory did not grow while this row ran: what it needed was already held "
        "(freed by an earlier row, or kept by its runtime's own allocator), which this probe cannot tell "
        "apart"
    )


def row_tooltip(row: dict) -> str:
    latency = row.get("latency_ms") or {}
    lines = [
        f"{row.get('backend', '?')}, batch {row.get('batch_size', '?')}, {row.get('dtype', '')} on "
        f"{row.get('device', '') or '?'}"
    ]
    if not measured(row):
        lines.append(f"{row.get('status', '')}: {row.get('reason') or 'no reason given'}")
        return "\n".join(lines)
    for key in ("p50", "p90", "p99", "mean", "std", "min"):
        if finite_number(latency.get(key)):
            lines.append(f"{key}: {format_ms(latency[key])} ms")
    if finite_number(row.get("transfer_ms")):
        lines.append(f"host↔device transfer: {format_ms(row['transfer_ms'])} ms")
    return "\n".join(lines)


class BenchResultsTable(QTableWidget):
    row_selected = Signal(object)  # the row's dict, or None

    def __init__(self, parent=None):
        super().__init__(0, len(COLUMNS), parent)
        self.rows: list[dict] = []
        self.marks: dict[tuple[int, int], str] = {}
        self.setHorizontalHeaderLabels(COLUMNS)
        self.verticalHeader().hide()
        self.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.setSelectionMode(QAbstractItemView.SingleSelection)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setAlternatingRowColors(False)  # the best/worst colours are the only backgrounds
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeToContents)
        for column in (0, *range(FIRST_NUMERIC, len(COLUMNS))):  # the room left goes to the names and numbers
            header.setSectionResizeMode(column, QHeaderView.Stretch)
        self.setToolTip(
            "Green: the best value of its column among the backends at that batch size; red: the "
            "worst. Click a row to see its latency distribution."
        )
        self.itemSelectionChanged.connect(self._on_selection)

    def set_rows(self, rows: list[dict]) -> None:
        """Show `rows` (the report's contract), keeping the selected row selected."""
        selected = self.selected_key()
        self.rows = [dict(r) for r in rows]
        self.marks = best_and_worst(self.rows)
        self.blockSignals(True)
        self.setRowCount(len(self.rows))
        for index, row in enumerate(self.rows):
            self._fill(index, row)
        self.blockSignals(False)
        if selected and not self.select_key(selected):
            self.row_selected.emit(None)

    def _fill(self, index: int, row: dict) -> None:
        status = str(row.get("status", ""))
        tooltip = row_tooltip(row)
        texts = [
            str(row.get("backend", "")),
            str(row.get("batch_size", "")),
            str(row.get("dtype", "")),
            "waiting…" if status == "pending" else status,
        ]
        unmeasured = memory_unmeasured_reason(row)
        texts += [
            (NOT_MEASURED if header == MEMORY_COLUMN and unmeasured else show(read(row)))
            if measured(row)
            else "—"
            for header, read, _, show in NUMERIC_COLUMNS
        ]
        for column, text in enumerate(texts):
            item = QTableWidgetItem(text)
            item.setToolTip(tooltip)
            # said in the cell, the reason on hover
            if text == NOT_MEASURED and COLUMNS[column] == MEMORY_COLUMN:
                item.setForeground(QBrush(GREYED))
                font = QFont(item.font())
                font.setItalic(True)
                item.setFont(font)
                item.setToolTip(
                    f"{textwrap.fill(f'Peak memory not measured: {unmeasured}.', 72)}\n\n{tooltip}"
                )
            if column == 0:
                item.setData(KEY_ROLE, row_key(row))
            if column >= FIRST_NUMERIC or column == 1:
                item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
            if not measured(row):
                item.setForeground(QBrush(GREYED))
                font = QFont(item.font())
                font.setItalic(True)
                item.setFont(font)
            if column == STATUS_COLUMN and status in STATUS_COLOURS:
                item.setForeground(QBrush(QColor(STATUS_COLOURS[status])))
            mark = self.marks.get((index, column))
            if mark:
                item.setBackground(QBrush(BEST if mark == "best" else WORST))
                font = QFont(item.font())
                font.setBold(True)
                item.setFont(font)
                item.setToolTip(
                    f"{'Best' if mark == 'best' else 'Worst'} {COLUMNS[column]} "
                    f"{'at this batch size' if self._grouped() else 'of the run'}\n\n{tooltip}"
                )
            self.setItem(index, column, item)

    def _grouped(self) -> bool:
        batches = [r.get("batch_size") for r in self.rows if measured(r)]
        return len(batches) != len(set(batches))

    def mark(self, row: int, column: int) -> str:
        """ "best", "worst" or "" for a cell (what its colour means)."""
        return self.marks.get((row, column), "")

    def selected_key(self) -> str | None:
        rows = self.selectionModel().selectedRows()
        if not rows:
            return None
        item = self.item(rows[0].row(), 0)
        return item.data(KEY_ROLE) if item else None

    def selected_row(self) -> dict | None:
        rows = self.selectionModel().selectedRows()
        return self.rows[rows[0].row()] if rows and rows[0].row() < len(self.rows) else None

    def select_key(self, key: str) -> bool:
        for index in range(self.rowCount()):
            if self.item(index, 0).data(KEY_ROLE) == key:
                self.selectRow(index)
                return True
        return False

    def _on_selection(self) -> None:
        self.row_selected.emit(self.selected_row())
