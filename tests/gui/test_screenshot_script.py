"""packaging/screenshot.py drives the real window for the README's pictures, outside the test suite: every
`window.<name>` (and `window.<piece>.<name>`) it reaches for must exist on the window, so a refactor of the
window cannot quietly break the scenes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_window_attribute_the_screenshot_script_uses_exists(fake_window):
    script = (ROOT / "packaging" / "screenshot.py").read_text()
    paths = set(re.findall(r"\bwindow((?:\.[A-Za-z_]\w*)+)", script))
    assert len(paths) > 10, paths  # the scenes reach the window through many names
    missing = []
    for path in sorted(paths):
        names = path.strip(".").split(".")
        owner = fake_window
        for depth, name in enumerate(names[:2]):  # the window and one piece down; deeper are the panels' own
            if not hasattr(owner, name):
                missing.append("window." + ".".join(names[: depth + 1]))
                break
            owner = getattr(owner, name)
            if callable(owner) and depth == 0:
                break
    assert not missing, f"packaging/screenshot.py uses names the window no longer has: {sorted(set(missing))}"
