"""Light and dark palettes for the whole application, and the colours plots and status lights share."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

THEMES = ("light", "dark")

STATE_COLOURS = {
    "ready": "#2e9d4a", "busy": "#2e9d4a", "starting": "#d39a1c", "restarting": "#d39a1c",
    "unresponsive": "#e07b00", "dead": "#d0342c", "stopped": "#8a8f98",
}

JOB_STATE_COLOURS = {"done": "#2e9d4a", "failed": "#d0342c", "cancelled": "#8a8f98", "running": "#2f6fd6",
                     "queued": "#d39a1c", "submitted": "#d39a1c"}


def _dark_palette() -> QPalette:
    p = QPalette()
    base, alt, text, mid = QColor("#1e1f22"), QColor("#2a2c30"), QColor("#e6e6e6"), QColor("#3a3d42")
    for role, colour in [
        (QPalette.Window, QColor("#25272b")), (QPalette.WindowText, text), (QPalette.Base, base),
        (QPalette.AlternateBase, alt), (QPalette.ToolTipBase, alt), (QPalette.ToolTipText, text),
        (QPalette.Text, text), (QPalette.Button, QColor("#2f3236")), (QPalette.ButtonText, text),
        (QPalette.BrightText, QColor("#ff6b6b")), (QPalette.Highlight, QColor("#3b73d9")),
        (QPalette.HighlightedText, QColor("#ffffff")), (QPalette.Link, QColor("#6ea8ff")), (QPalette.Mid, mid),
        (QPalette.PlaceholderText, QColor("#8a8f98")),
    ]:
        p.setColor(role, colour)
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6b6f76"))
    return p


def apply_theme(app: QApplication, theme: str) -> str:
    theme = theme if theme in THEMES else "light"
    app.setStyle("Fusion")  # the one style that honours a palette the same on every platform
    app.setPalette(_dark_palette() if theme == "dark" else app.style().standardPalette())
    return theme
