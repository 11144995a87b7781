"""Layout helpers shared by the panels that rebuild a row of widgets for each answer. Never imports torch."""

from __future__ import annotations

from PySide6.QtWidgets import QLayout


def clear_layout(layout: QLayout) -> None:
    """Take every item out of `layout`, deleting its widgets (later, as Qt wants for live widgets)."""
    while layout.count():
        item = layout.takeAt(0)
        if item.widget() is not None:
            item.widget().deleteLater()
