"""The Export tab's "By module" table against the fake worker (tests/fake_export.py): a QDQ export's codes per
PyTorch module, worst first and sortable, ties explained on hover, TensorRT's absence said; hidden for other
formats."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from test_export_panel import Harness, _export, _trained_run

from workbench.gui.panels.export.by_module_table import ByModuleTable


@pytest.fixture
def harness(qtbot, tmp_path):
    h = Harness(tmp_path)
    qtbot.addWidget(h.panel)
    h.panel.resize(1400, 850)
    h.panel.show()
    yield h
    h.close()


def _column(table, column: int) -> list[str]:
    return [table.item(row, column).text() for row in range(table.rowCount())]


def test_a_qdq_export_shows_its_codes_by_module_worst_first(harness, qtbot):
    panel = harness.panel
    broken = _trained_run(harness.workspace, "file:/models/broken_net.py:Net")
    _export(qtbot, harness, broken, format="onnx_qdq")
    view = panel.export_view.by_module
    assert view.isVisibleTo(panel)
    table = view.table
    headers = [table.horizontalHeaderItem(c).text() for c in range(4)]
    assert headers == ["Module", "Codes off", "Ties", "Worst step"]
    assert _column(table, 0) == ["features.3", "features.0", "(input)", "classifier"]
    assert [_column(table, c)[0] for c in (1, 2, 3)] == ["42 of 40,000", "2", "3"]
    assert "40 code(s) off away from a rounding tie" in table.item(0, 1).toolTip()
    assert table.item(3, 0).toolTip() == "quantizers: classifier, classifier@1"
    assert "rounding tie" in table.horizontalHeaderItem(2).toolTip()
    assert "one code apart is expected" in table.horizontalHeaderItem(2).toolTip()
    assert "one code apart is expected" in table.item(0, 2).toolTip()
    assert view.tensorrt_note.text() == "TensorRT comparison: not available here (no CUDA)"
    # Sortable by its numbers, not their text.
    table.sortItems(3, Qt.AscendingOrder)
    assert _column(table, 3) == ["0", "0", "1", "3"]
    table.sortItems(0, Qt.AscendingOrder)
    assert _column(table, 0)[0] == "(input)"


def test_other_formats_hide_the_table(harness, qtbot):
    panel = harness.panel
    trained = _trained_run(harness.workspace)
    _export(qtbot, harness, trained, format="onnx_qdq")
    assert panel.export_view.by_module.isVisibleTo(panel)
    _export(qtbot, harness, trained, format="onnx")
    assert not panel.export_view.by_module.isVisibleTo(panel)


def test_a_report_without_rows_hides_it_and_tensorrt_rows_join_onnxruntimes(qtbot):
    table = ByModuleTable()
    qtbot.addWidget(table)
    table.show_report("onnx_qdq", {"parity": {"skipped": True}})
    assert table.isHidden()
    row = {
        "module": "fc",
        "quantizers": ["fc"],
        "codes": 10,
        "codes_off": 1,
        "ties": 1,
        "worst_step": 1,
        "configuration": "deployed",
    }
    trt = {
        "module": "fc",
        "codes": 10,
        "codes_off": 3,
        "ties": None,
        "worst_step": 2,
        "configuration": "TensorRT",
    }
    table.show_report(
        "onnx_qdq",
        {"by_module": [row], "tensorrt_by_module": {"available": True, "reason": "", "rows": [trt]}},
    )
    assert not table.isHidden() and table.table.rowCount() == 2
    assert sorted(_column(table.table, 4)) == ["TensorRT", "deployed"]
    assert table.tensorrt_note.isHidden()
