"""The "By module" table of a QDQ export: per PyTorch module, how many of its quantizers' codes onnxruntime
computed differently from the quantize run's simulation (fed the same input), how many of those were rounding
ties, and the worst difference in steps; TensorRT's own rows beside them where it ran, else why it did not."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

COLUMNS = (
    ("Module", "The PyTorch module whose output the quantizers quantize (the model's input: (input))"),
    (
        "Codes off",
        "Codes that differ from the simulation's, fed the same input, out of all the module's "
        "codes compared (ties included)",
    ),
    (
        "Ties",
        "Codes one step off where the value before rounding lay on a rounding tie (within a hundredth "
        "of a step of a half step): another kernel's float sum lands it on the other side, so one code "
        "apart is expected there",
    ),
    (
        "Worst step",
        "The largest difference between the two codes, in steps of the module's quantizer: 1 at "
        "a tie is rounding; 2 or more means the backend computes something else there",
    ),
    (
        "Configuration",
        "Where the module differs most: onnxruntime as deployed (graph optimizations on, fused "
        "int8 kernels), as written (optimizations off), or TensorRT",
    ),
)


class _Item(QTableWidgetItem):
    """A cell that sorts by its key (numbers) where it has one, not by its text."""

    def __init__(self, text: str, key: tuple | None = None):
        super().__init__(text)
        self.key = key

    def __lt__(self, other) -> bool:
        theirs = getattr(other, "key", None)
        if self.key is not None and theirs is not None:
            return self.key < theirs
        return self.text() < other.text()  # QTableWidgetItem's own operator< would call this one again


class ByModuleTable(QWidget):
    """Shows `show_report(format, report)`: visible for an onnx_qdq export whose parity ran, hidden
    otherwise."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.title = QLabel(
            "<b>By module</b>: each module's quantizer codes in the backend against the simulation's"
        )
        self.title.setTextFormat(Qt.RichText)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels([name for name, _ in COLUMNS])
        for column, (_, tip) in enumerate(COLUMNS):
            self.table.horizontalHeaderItem(column).setToolTip(tip)
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.Stretch)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectRows)
        # Worst first: most codes off away from a tie (what is not rounding), then most codes off.
        self.table.horizontalHeader().setSortIndicator(1, Qt.DescendingOrder)
        self.table.setSortingEnabled(True)
        self.table.setMinimumHeight(160)
        self.tensorrt_note = QLabel()
        self.tensorrt_note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.title)
        layout.addWidget(self.table)
        layout.addWidget(self.tensorrt_note)
        self.hide()

    def show_report(self, fmt: str, report: dict) -> None:
        rows = report.get("by_module") if fmt == "onnx_qdq" else None
        if not isinstance(rows, list):
            self.table.setRowCount(0)
            self.hide()
            return
        tensorrt = report.get("tensorrt_by_module")
        tensorrt = tensorrt if isinstance(tensorrt, dict) else {}
        shown = [r for r in rows if isinstance(r, dict)] + [
            r for r in tensorrt.get("rows") or [] if isinstance(r, dict)
        ]
        self.table.setSortingEnabled(False)  # rows fill in place; sorting resumes on the filled table
        self.table.setRowCount(len(shown))
        for index, row in enumerate(shown):
            for column, item in enumerate(_cells(row)):
                self.table.setItem(index, column, item)
        self.table.setSortingEnabled(True)
        note = str(tensorrt.get("reason") or "")
        self.tensorrt_note.setText(note)
        self.tensorrt_note.setVisible(bool(note))
        self.show()


def _cells(row: dict) -> list[QTableWidgetItem]:
    """A row's cells: the module (its quantizers in the tooltip), codes off of all codes, ties, worst step and
    the configuration."""
    codes, off, ties, worst = row.get("codes"), row.get("codes_off"), row.get("ties"), row.get("worst_step")
    module = _Item(str(row.get("module", "")))
    quantizers = row.get("quantizers") or []
    module.setToolTip(
        f"quantizers: {', '.join(map(str, quantizers))}" if quantizers else str(row.get("error") or "")
    )
    counted = isinstance(off, int)
    beyond = off - ties if counted and isinstance(ties, int) else (off if counted else -1)
    off_item = _Item(
        f"{off:,} of {codes:,}"
        if isinstance(off, int) and isinstance(codes, int)
        else ("error" if row.get("error") else "—"),
        (beyond, off if isinstance(off, int) else -1),
    )
    if row.get("error"):
        off_item.setToolTip(str(row["error"]))
    elif isinstance(off, int) and isinstance(ties, int) and off > ties:
        off_item.setToolTip(f"{off - ties:,} code(s) off away from a rounding tie: not rounding")
    ties_item = _Item(f"{ties:,}" if isinstance(ties, int) else "—", (ties if isinstance(ties, int) else -1,))
    ties_item.setToolTip(
        COLUMNS[2][1]
        if isinstance(ties, int)
        else "not measured: TensorRT's outputs are "
        "compared with the free-running simulation, not fed the same input"
    )
    worst_item = _Item(
        str(worst) if isinstance(worst, int) else "—", (worst if isinstance(worst, int) else -1,)
    )
    items = [module, off_item, ties_item, worst_item, _Item(str(row.get("configuration") or ""))]
    for item in items[1:4]:
        item.setTextAlignment(Qt.AlignRight | Qt.AlignVCenter)
    return items
