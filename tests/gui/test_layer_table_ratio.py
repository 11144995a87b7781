"""The layer table's channel-range ratio column: the ratio with its widest channels where a run measured it,
blank for weights and for runs saved before it was measured."""

from __future__ import annotations

from PySide6.QtCore import Qt

from workbench.gui.panels.quant.layer_table import COLUMNS, SORT_ROLE, TOOLTIPS, LayerTableModel

RATIO = COLUMNS.index("Ch. range ratio")


def test_the_ratio_column_shows_measured_ratios_and_blanks_for_old_runs(qtbot):
    model = LayerTableModel()
    model.set_layers(
        [
            {
                "name": "encoder.0",
                "tensor": "activation",
                "bits": 8,
                "sqnr_db": 30.0,
                "channel_range_ratio": 57.25,
                "outlier_channels": [5, 2, 7],
            },
            {"name": "encoder.0", "tensor": "weight", "bits": 8, "sqnr_db": 40.0},
            {
                "name": "fc",
                "tensor": "activation",
                "bits": 8,
                "sqnr_db": 35.0,
            },  # a run from before the column
            {
                "name": "dead",
                "tensor": "activation",
                "bits": 8,
                "sqnr_db": 35.0,
                "channel_range_ratio": None,
                "outlier_channels": [],
            },
        ]
    )
    cell = lambda row, role=Qt.DisplayRole: model.data(model.index(row, RATIO), role)  # noqa: E731
    assert cell(0) == "57.2" and cell(0, SORT_ROLE) == 57.25
    assert "5, 2, 7" in cell(0, Qt.ToolTipRole)
    assert cell(1) == "" and cell(2) == "" and cell(3) == ""
    assert cell(2, SORT_ROLE) < 0  # blanks sort below every ratio
    header = model.headerData(RATIO, Qt.Horizontal, Qt.ToolTipRole)
    assert header == TOOLTIPS["Ch. range ratio"] and "median" in header and "outlier" in header
