"""RejectionLog: every refused frame is counted; a flood is logged as a few lines and a summary per window."""

from __future__ import annotations

import logging
import re

import pytest

from workbench.protocol import RejectionLog


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def rejections(clock, caplog):
    caplog.set_level(logging.WARNING, logger="test.rejections")
    return RejectionLog(
        logging.getLogger("test.rejections"), "shell message", burst=3, interval=5.0, clock=clock
    )


def _lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def _accounted(lines: list[str]) -> int:
    full = sum(line.startswith("rejected a shell message:") for line in lines)
    return full + sum(
        int(m) for line in lines for m in re.findall(r"rejected (\d+) more shell messages", line)
    )


def test_the_first_few_are_logged_in_full_then_counted(rejections, caplog):
    for i in range(10):
        rejections.reject(f"bad signature {i}")
    assert rejections.count == 10
    assert _lines(caplog) == [
        "rejected a shell message: bad signature 0",
        "rejected a shell message: bad signature 1",
        "rejected a shell message: bad signature 2 (further rejections are counted and summarised every 5 s)",
    ]


def test_a_summary_with_the_count_comes_once_the_window_is_over(rejections, caplog, clock):
    for i in range(10):
        rejections.reject(f"junk {i}")
    rejections.flush()  # the window is not over: nothing yet
    assert len(_lines(caplog)) == 3
    clock.now += 5
    rejections.flush()
    assert _lines(caplog)[3] == "rejected 7 more shell messages in the last 5 s (the last: junk 9)"
    rejections.flush()
    clock.now += 60
    rejections.flush()  # nothing more was refused: no further line
    assert len(_lines(caplog)) == 4


def test_a_flood_of_200000_costs_a_few_lines_per_window_and_loses_no_count(rejections, caplog, clock):
    for i in range(200_000):
        if i % 20_000 == 0:
            clock.now += 1  # the flood lasts 10 s: two windows
        rejections.reject("no <IDS|MSG> delimiter in the frames")
    rejections.close()
    lines = _lines(caplog)
    assert len(lines) <= 3 * (3 + 1)
    assert sum(len(line) for line in lines) < 2_000
    assert rejections.count == 200_000 == _accounted(lines)


def test_after_a_quiet_window_the_next_rejections_are_logged_in_full_again(rejections, caplog, clock):
    for _ in range(5):
        rejections.reject("first")
    clock.now += 30
    rejections.reject("second")
    lines = _lines(caplog)
    assert lines[-2] == "rejected 2 more shell messages in the last 30 s (the last: first)"
    assert lines[-1] == "rejected a shell message: second"


def test_close_writes_a_pending_summary_at_once(rejections, caplog):
    for _ in range(4):
        rejections.reject("x")
    rejections.close()
    assert _lines(caplog)[-1].startswith("rejected 1 more shell messages in the last 0 s")
