"""The report's inline-SVG charts: round ticks, log axes, gaps for NaN, thinning that keeps spikes, escaped
text."""

from __future__ import annotations

import math
import re

from workbench.report import svg
from workbench.report.svg import Series


def test_nice_ticks_cover_the_data_with_round_steps():
    lo, hi, ticks = svg.nice_ticks(0.013, 2.31)
    assert lo <= 0.013 and hi >= 2.31
    assert ticks == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]
    lo, hi, ticks = svg.nice_ticks(5.0, 5.0)  # a flat line still gets an axis
    assert lo < 5 < hi and len(ticks) >= 2


def test_log_ticks_are_decades_with_2_and_5_between():
    lo, hi, ticks = svg.log_ticks(0.35, 11.9)
    assert lo <= 0.35 and hi >= 11.9
    assert 0.5 in ticks and 1 in ticks and 10 in ticks


def test_thin_keeps_spikes_and_gaps():
    n = 20_000
    x = list(range(n))
    y = [1.0] * n
    y[12_345] = 50.0
    y[777] = math.nan
    tx, ty = svg.thin(x, y)
    assert len(tx) <= svg.MAX_POINTS + 10
    assert 50.0 in ty and any(math.isnan(v) for v in ty)
    assert tx == sorted(tx)


def test_line_chart_breaks_at_nan_and_escapes_names():
    chart = svg.line_chart(
        [Series("<b>loss</b>", [1, 2, 3, 4, 5], [1.0, 0.5, math.nan, 0.3, 0.2])], title="a & b"
    )
    assert chart.startswith("<svg") and chart.endswith("</svg>")
    assert "<b>" not in chart and "&lt;b&gt;loss&lt;/b&gt;" in chart and "a &amp; b" in chart
    path = re.search(r'<path d="([^"]+)"', chart).group(1)
    assert path.count("M") == 2  # two segments either side of the NaN


def test_log_log_chart_drops_non_positive_values_and_uses_given_ticks():
    chart = svg.line_chart(
        [Series("ort", [1, 8, 64], [0.4, 0.0, 9.1], markers=True)],
        log_x=True,
        log_y=True,
        x_ticks=[1, 8, 64],
        x_format=lambda v: f"{v:g}",
    )
    for tick in (">1<", ">8<", ">64<"):
        assert tick in chart
    assert chart.count("<circle") == 2


def test_empty_chart_says_so():
    assert "no data" in svg.line_chart([Series("x", [], [])], title="Loss")


def test_bar_charts():
    chart = svg.bar_chart(
        ["fp32", "<w8>"],
        [0.98, 0.97],
        domain=(0.9, 1.0),
        reference=(0.98, "FP32"),
        value_format=lambda v: f"{v * 100:.2f} %",
    )
    assert "98.00 %" in chart and "97.00 %" in chart and "&lt;w8&gt;" in chart
    assert chart.count("<rect") == 2
    grouped = svg.grouped_bar_chart(
        ["batch 1", "batch 8"], [("eager", [100.0, 700.0]), ("ort", [150.0, math.nan])]
    )
    assert grouped.count("<rect") == 3 and ">eager<" in grouped


def test_fmt_number():
    assert svg.fmt_number(0.98111) == "0.981"
    assert svg.fmt_number(12_345.6) == "12,346"
    assert svg.fmt_number(1.2e-5) == "1.20e-05"
    assert svg.fmt_number(math.nan) == "–"
