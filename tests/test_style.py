"""The code's form is checked like its behaviour: `ruff format` leaves every file as it is, and ruff's
rules (line length 110 included, see [tool.ruff] in pyproject.toml) find nothing. Fix with `ruff format`
and `python tools/wrap_long_lines.py <paths>` for long comments, docstrings and strings."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    return ruff


def test_every_file_is_formatted():
    result = subprocess.run(
        [_ruff(), "format", "--check", "."], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, "run `ruff format .`:\n" + result.stdout[-4000:] + result.stderr[-2000:]


def test_ruff_rules_and_line_length_hold():
    result = subprocess.run(
        [_ruff(), "check", "--output-format", "concise", "."],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
