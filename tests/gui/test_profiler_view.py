"""The profiler view opens sorted by self CPU time, as its title says, and hides a device column of zeros."""

from __future__ import annotations

import json

from workbench.gui.panels.training.profiler import COLUMNS, ProfilerView


def _run_with_profile(tmp_path, device_times):
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    rows = [
        {
            "name": name,
            "calls": 3,
            "self_cpu_time_total_us": cpu,
            "cpu_time_total_us": cpu * 2,
            "device_time_total_us": dev,
        }
        for name, cpu, dev in zip(
            ("aten::add", "aten::conv2d", "aten::mm"), (50.0, 900.0, 300.0), device_times
        )
    ]
    (run_dir / "artifacts" / "profile_top_ops.json").write_text(json.dumps(rows))
    return run_dir


def test_opens_sorted_by_self_cpu_time_and_hides_an_all_zero_device_column(qtbot, tmp_path):
    view = ProfilerView()
    qtbot.addWidget(view)
    assert view.show_run(_run_with_profile(tmp_path, (0.0, 0.0, 0.0)))
    names = [view.table.item(r, 0).text() for r in range(view.table.rowCount())]
    assert names == ["aten::conv2d", "aten::mm", "aten::add"]
    assert "self CPU time" in view.title.text()
    assert view.table.isColumnHidden(len(COLUMNS) - 1)


def test_a_device_column_with_time_is_shown(qtbot, tmp_path):
    view = ProfilerView()
    qtbot.addWidget(view)
    assert view.show_run(_run_with_profile(tmp_path, (1.0, 20.0, 0.0)))
    assert not view.table.isColumnHidden(len(COLUMNS) - 1)
