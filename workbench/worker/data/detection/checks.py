"""The one-line messages for bad detection annotations (each names the file and the entry), and how many are
said before the rest are only counted, so a broken file does not flood the log."""

from __future__ import annotations

from collections.abc import Callable

MAX_LINES = 40  # problems said one by one; the rest are counted in one last line


class Problems:
    """Collects annotation problems: says the first MAX_LINES through `log` as warnings, counts the rest."""

    def __init__(self, log: Callable[..., None], source: str):
        self.log = log
        self.source = source
        self.count = 0

    def say(self, text: str) -> None:
        self.count += 1
        if self.count <= MAX_LINES:
            self.log(f"{self.source}: {text}", "warning")

    def finish(self) -> None:
        if self.count > MAX_LINES:
            self.log(
                f"{self.source}: {self.count - MAX_LINES:,} more annotation problem(s) like those above",
                "warning",
            )


def clip_box(
    box: list[float], width: float, height: float, where: str, problems: Problems
) -> list[float] | None:
    """x1, y1, x2, y2 clipped to the image (said when it had to be), or None for a box with no area (said)."""
    x1, y1, x2, y2 = box
    clipped = [
        min(max(x1, 0.0), width),
        min(max(y1, 0.0), height),
        min(max(x2, 0.0), width),
        min(max(y2, 0.0), height),
    ]
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        problems.say(f"{where}: box {_text(box)} has zero area; dropped")
        return None
    if clipped != [x1, y1, x2, y2]:
        if clipped[2] - clipped[0] <= 0 or clipped[3] - clipped[1] <= 0:
            problems.say(f"{where}: box {_text(box)} lies outside the {width:g}x{height:g} image; dropped")
            return None
        problems.say(
            f"{where}: box {_text(box)} reaches outside the {width:g}x{height:g} image; clipped to it"
        )
    return clipped


def _text(box) -> str:
    return "[" + ", ".join(f"{v:g}" for v in box) + "]"
