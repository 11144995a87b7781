"""`workbench --version` and `workbench desktop install|uninstall` through the real command line."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib.metadata import version

import pytest
from cli_helpers import expect, no_traceback, wb

from workbench.app_resources import APP_ID
from workbench.cli import build_parser


def _verbs() -> set[str]:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


def test_version_is_the_installed_distributions():
    proc = subprocess.run(
        [sys.executable, "-m", "workbench", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"workbench {version('torch-workbench')}"


@pytest.mark.skipif("desktop" not in _verbs(), reason="`workbench desktop` is not wired into cli.py yet")
def test_desktop_install_and_uninstall(tmp_path):
    share = tmp_path / "share"
    proc = wb(tmp_path, "desktop", "install", "--data-home", str(share), "--json")
    expect(proc, 0)
    no_traceback(proc)
    result = json.loads(proc.stdout)
    assert result["status"] == "done"
    entry = share / "applications" / f"{APP_ID}.desktop"
    assert str(entry) in result["files"] and entry.is_file()
    assert len(result["files"]) == 10  # the entry, 8 PNGs and the SVG

    proc = wb(tmp_path, "desktop", "uninstall", "--data-home", str(share), "--json")
    expect(proc, 0)
    assert sorted(json.loads(proc.stdout)["files"]) == sorted(result["files"])
    assert not entry.exists()
