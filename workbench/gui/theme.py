"""Light and dark palettes for the whole application, and the colours plots and status lights share.

A theme switch is live: the palette changes, widgets coloured by palette roles follow, and plots restyle
themselves (workbench.gui.plots).
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette, QPen
from PySide6.QtWidgets import QApplication, QProxyStyle, QStyle, QStyleFactory, QWidget

THEMES = ("light", "dark")

STATE_COLOURS = {
    "ready": "#2e9d4a",
    "busy": "#2e9d4a",
    "starting": "#d39a1c",
    "restarting": "#d39a1c",
    "unresponsive": "#e07b00",
    "dead": "#d0342c",
    "stopped": "#8a8f98",
}

JOB_STATE_COLOURS = {
    "done": "#2e9d4a",
    "failed": "#d0342c",
    "cancelled": "#8a8f98",
    "running": "#2f6fd6",
    "queued": "#d39a1c",
    "submitted": "#d39a1c",
}


def state_colour(state: str | None) -> str:
    """A job's or run's state as a colour; grey for a state not listed (interrupted, diverged, unknown)."""
    return JOB_STATE_COLOURS.get(state or "", "#888888")


def _dark_palette() -> QPalette:
    p = QPalette()
    base, alt, text, mid = QColor("#1e1f22"), QColor("#2a2c30"), QColor("#e6e6e6"), QColor("#3a3d42")
    for role, colour in [
        (QPalette.Window, QColor("#25272b")),
        (QPalette.WindowText, text),
        (QPalette.Base, base),
        (QPalette.AlternateBase, alt),
        (QPalette.ToolTipBase, alt),
        (QPalette.ToolTipText, text),
        (QPalette.Text, text),
        (QPalette.Button, QColor("#2f3236")),
        (QPalette.ButtonText, text),
        (QPalette.BrightText, QColor("#ff6b6b")),
        (QPalette.Highlight, QColor("#3b73d9")),
        (QPalette.HighlightedText, QColor("#ffffff")),
        (QPalette.Link, QColor("#6ea8ff")),
        (QPalette.Mid, mid),
        (QPalette.PlaceholderText, QColor("#8a8f98")),
        # Fusion draws frames and bevels with these; left unset they stay the light palette's near-white.
        (QPalette.Light, QColor("#4a4d52")),
        (QPalette.Midlight, QColor("#3f4247")),
        (QPalette.Dark, QColor("#151618")),
        (QPalette.Shadow, QColor("#000000")),
    ]:
        p.setColor(role, colour)
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6b6f76"))
    return p


class WorkbenchStyle(QProxyStyle):
    """Fusion, with check boxes that stay visible on a dark palette.

    Fusion outlines an unticked box in the window colour darkened by 40 %, which on a near-black window is
    invisible (the Show column of the runs list, "log x"); a light outline is drawn over it when dark.
    """

    def __init__(self):
        super().__init__(QStyleFactory.create("Fusion"))

    def drawPrimitive(self, element, option, painter, widget=None):
        super().drawPrimitive(element, option, painter, widget)
        # Item views draw their check boxes through PE_IndicatorCheckBox in Fusion, so one case covers both.
        if element == QStyle.PE_IndicatorCheckBox and option.palette.color(QPalette.Base).lightness() < 128:
            outline = QColor(option.palette.color(QPalette.PlaceholderText))
            if not option.state & QStyle.State_Enabled:
                outline.setAlpha(110)
            painter.save()
            painter.setRenderHint(painter.RenderHint.Antialiasing, True)
            painter.setBrush(QColor(0, 0, 0, 0))
            painter.setPen(QPen(outline, 1))
            painter.drawRoundedRect(
                option.rect.adjusted(0, 0, -1, -1).toRectF().adjusted(0.5, 0.5, 0, 0), 1.5, 1.5
            )
            painter.restore()


_STYLE: list[WorkbenchStyle] = []  # a Python reference for as long as Qt uses it: its override is Python code


def apply_theme(app: QApplication, theme: str) -> str:
    """Switch the whole application's palette, live: widgets that take their colours from palette roles (all
    of ours; plots restyle themselves on the change) follow without a restart."""
    theme = theme if theme in THEMES else "light"
    if not isinstance(app.style(), WorkbenchStyle):
        # The one style that honours a palette the same on every platform. Set once: a new style object per
        # switch would repolish every widget twice.
        _STYLE[:] = [WorkbenchStyle()]
        app.setStyle(_STYLE[0])
    app.setPalette(_dark_palette() if theme == "dark" else app.style().standardPalette())
    return theme


def refresh_style_sheets(root: QWidget) -> None:
    """Re-apply the style sheets under `root` that name palette() colours.

    Qt resolves palette(...) in a sheet once, when the sheet is set, so such a sheet keeps the old theme's
    colours after a switch. Prefer palette roles (setBackgroundRole, QPalette) to sheets; this is for the
    sheets that remain (notes in dialogs). Walks one window's children, never QApplication.allWidgets(),
    which can hand back widgets in the middle of being destroyed.
    """
    for widget in [root, *root.findChildren(QWidget)]:
        sheet = widget.styleSheet()
        if sheet and "palette(" in sheet:
            widget.setStyleSheet(sheet)
