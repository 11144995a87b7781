"""The Jobs panel's progress bars fill from the left by the job's fraction, as a QProgressBar does."""

from __future__ import annotations

from PySide6.QtCore import QPersistentModelIndex, QRect, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QStyleOptionViewItem, QTableView

from workbench.gui.panels.jobs_panel import ProgressDelegate


def _paint(qtbot, fraction: float) -> QImage:
    model = QStandardItemModel(1, 1)
    item = QStandardItem()
    item.setData(fraction, Qt.UserRole)
    model.setItem(0, 0, item)
    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(model)
    image = QImage(200, 30, QImage.Format_ARGB32)
    image.fill(QColor("white"))
    option = QStyleOptionViewItem()
    option.rect = QRect(0, 0, 200, 30)
    option.widget = view
    painter = QPainter(image)
    ProgressDelegate().paint(painter, option, QPersistentModelIndex(model.index(0, 0)))
    painter.end()
    return image


def _filled_columns(image: QImage, y: int) -> list[bool]:
    """Which columns of row y carry the bar's fill colour (the style's highlight, bluish), inside the
    frame."""

    def bluish(x: int) -> bool:
        colour = image.pixelColor(x, y)
        return colour.blue() > colour.red() + 40

    return [bluish(x) for x in range(8, 192)]


def test_a_running_jobs_bar_fills_from_the_left_by_its_fraction(qtbot):
    quarter = _paint(qtbot, 0.25)
    # Near the top as at mid-height: filling by height would leave the top rows empty.
    for y in (8, 15):
        filled = _filled_columns(quarter, y)
        left, right = filled[:30], filled[-60:]
        assert sum(left) > 20 and not any(right), (y, filled)
    done = _paint(qtbot, 1.0)
    assert sum(_filled_columns(done, 8)) > 150
