"""Overlaying runs in the Training tab (#21 part 6.1): the Show ticks decide what is drawn, live runs
included; Ctrl+click ticks; the legend names only the runs drawn; the run palette's first colours are far
apart."""

from __future__ import annotations

import itertools
import math

import pytest
from PySide6.QtCore import Qt

from workbench.gui.plots import RUN_HUES
from workbench.specs import TrainSpec


@pytest.fixture
def window(fake_window, qtbot):
    qtbot.waitUntil(lambda: bool(fake_window.device_picker.devices), timeout=10_000)
    return fake_window


def _row(panel, run_id: str) -> int:
    return next(
        r for r in range(panel.table.rowCount()) if panel.table.item(r, 0).data(Qt.UserRole) == run_id
    )


def _drawn(panel) -> set[str]:
    return {run_id for run_id, _name in panel.curves._items}


def _finished_run(window, qtbot, spec: dict) -> str:
    panel = window.training_panel
    before = set(panel.runs)
    window.start_training(TrainSpec.from_dict(spec))
    qtbot.waitUntil(lambda: len(panel.runs) == len(before) + 1 and not panel.job_of_run, timeout=10_000)
    return next(iter(set(panel.runs) - before))


def test_a_running_run_is_drawn_only_while_ticked(window, qtbot):
    panel = window.training_panel
    first = _finished_run(window, qtbot, {"epochs": 1, "lr": 0.01})
    assert panel.shown_runs() == [first]  # the first run is shown: nothing else was
    # 20 ms a step: still running below
    window.start_training(TrainSpec.from_dict({"epochs": 40, "seed": 20}))
    qtbot.waitUntil(lambda: bool(panel.job_of_run), timeout=10_000)
    live = next(iter(panel.job_of_run))
    qtbot.waitUntil(
        lambda: len(panel.curves.runs.get(live, None).series.get("train/loss", ()) or ()) >= 5, timeout=10_000
    )
    panel.curves.redraw_if_needed()
    # A run started from the window is ticked and drawn beside the run already ticked.
    assert _drawn(panel) == {first, live} and set(panel.shown_runs()) == {first, live}
    panel.set_shown(live, False)
    panel.curves.redraw_if_needed()
    assert _drawn(panel) == {first} and panel.shown_runs() == [first]  # streaming, held, but not drawn
    assert (
        panel.curves.legend.texts()[:1] == [panel.curves.label(first)]
        and len(panel.curves.legend.texts()) == 4
    )

    panel.set_shown(live, True)
    panel.curves.redraw_if_needed()
    assert _drawn(panel) == {first, live}
    x, _y = panel.curves._items[(live, "train/loss")].getData()
    assert x[0] == 1  # its whole curve, from the first step
    assert panel.curves.hue(live) != panel.curves.hue(first)

    panel.set_shown(live, False)  # unticked while it runs: it stays unticked as its metrics keep coming
    count = len(panel.curves.runs[live].series["train/loss"])
    qtbot.waitUntil(lambda: len(panel.curves.runs[live].series["train/loss"]) > count + 3, timeout=10_000)
    panel.curves.redraw_if_needed()
    assert _drawn(panel) == {first}
    assert panel.curves.label(live) not in panel.curves.legend.texts()
    assert panel.table.item(_row(panel, live), 0).checkState() == Qt.Unchecked
    assert panel.curves.show_readout(3).count("\n") == 1  # the readout lists the shown run only


def test_ctrl_click_ticks_runs_and_the_legend_lists_only_the_shown_ones(window, qtbot):
    panel = window.training_panel
    runs = [_finished_run(window, qtbot, {"epochs": 1, "lr": lr}) for lr in (0.01, 0.02)]
    failed = None
    before = set(panel.runs)
    window.start_training(TrainSpec.from_dict({"model": {"name": "file:/tmp/broken.py:Net"}, "epochs": 1}))
    qtbot.waitUntil(lambda: len(panel.runs) == 3 and not panel.job_of_run, timeout=10_000)
    failed = next(iter(set(panel.runs) - before))
    assert panel.runs[failed]["status"] == "failed"
    for run_id in panel.runs:
        panel.set_shown(run_id, False)
    panel.curves.redraw_if_needed()
    assert panel.curves.legend.texts() == [] and not _drawn(panel)

    def click(run_id, modifier=Qt.NoModifier):
        rect = panel.table.visualItemRect(panel.table.item(_row(panel, run_id), 1))
        qtbot.mouseClick(panel.table.viewport(), Qt.LeftButton, modifier, rect.center())

    click(runs[0])  # a plain click selects, and shows the run as nothing else is shown
    click(runs[1], Qt.ControlModifier)  # Ctrl+click adds a run to the overlay
    click(failed, Qt.ControlModifier)
    assert set(panel.shown_runs()) == {*runs, failed}
    assert len(panel.table.selectionModel().selectedRows()) == 3
    assert panel.selected_run_id() == failed  # the details follow the run clicked last
    panel.curves.redraw_if_needed()
    # The failed run never logged a point: the legend names the two runs drawn, then the three line styles.
    assert sorted(panel.curves.legend.texts()[:-3]) == sorted(panel.curves.label(r) for r in runs)
    assert _drawn(panel) == set(runs)
    panel.tabs.setCurrentIndex(3)  # the spec comparison follows the same ticks
    assert panel.spec_table.columnCount() == 3

    click(runs[1], Qt.ControlModifier)  # Ctrl+click again takes it out
    panel.curves.redraw_if_needed()
    assert set(panel.shown_runs()) == {runs[0], failed}
    assert panel.curves.legend.texts()[:-3] == [panel.curves.label(runs[0])]
    assert panel.spec_table.columnCount() == 2
    click(runs[1])  # a plain click selects a row and leaves the ticks as they are
    assert set(panel.shown_runs()) == {runs[0], failed} and panel.selected_run_id() == runs[1]


def _lab(colour: str) -> tuple[float, float, float]:
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def ciede2000(c1: str, c2: str) -> float:
    """The CIEDE2000 colour difference (Sharma, Wu and Dalal's formulation)."""
    (l1, a1, b1), (l2, a2, b2) = _lab(c1), _lab(c2)
    c_bar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_bar**7 / (c_bar**7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    cp1, cp2 = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = math.degrees(math.atan2(b1, a1)) % 360, math.degrees(math.atan2(b2, a2)) % 360
    dh = 0.0 if cp1 * cp2 == 0 else (h2 - h1 + 180) % 360 - 180
    d_l, d_c = l2 - l1, cp2 - cp1
    d_h = 2 * math.sqrt(cp1 * cp2) * math.sin(math.radians(dh / 2))
    l_bar, cp_bar = (l1 + l2) / 2, (cp1 + cp2) / 2
    h_bar = h1 + h2 if cp1 * cp2 == 0 else (h1 + h2) / 2 + (180 if abs(h1 - h2) > 180 else 0)
    t = (
        1
        - 0.17 * math.cos(math.radians(h_bar - 30))
        + 0.24 * math.cos(math.radians(2 * h_bar))
        + 0.32 * math.cos(math.radians(3 * h_bar + 6))
        - 0.20 * math.cos(math.radians(4 * h_bar - 63))
    )
    r_c = 2 * math.sqrt(cp_bar**7 / (cp_bar**7 + 25**7))
    r_t = -math.sin(math.radians(60 * math.exp(-((((h_bar % 360) - 275) / 25) ** 2)))) * r_c
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / math.sqrt(20 + (l_bar - 50) ** 2)
    s_c, s_h = 1 + 0.045 * cp_bar, 1 + 0.015 * cp_bar * t
    return math.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2 + r_t * (d_c / s_c) * (d_h / s_h))


def test_the_run_palette_keeps_its_first_colours_apart():
    assert ciede2000("#e8710a", "#c49a00") < 25  # the orange and gold that were mistaken for each other
    assert min(ciede2000(a, b) for a, b in itertools.combinations(RUN_HUES[:6], 2)) > 25
    assert min(ciede2000(a, b) for a, b in itertools.combinations(RUN_HUES[:8], 2)) > 20
    assert len(set(RUN_HUES)) == 10
