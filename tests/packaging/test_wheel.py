"""The built wheel carries the app's resources, and the digits sample spec runs through the command line."""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cli_helpers import expect, no_traceback, one_json, wb

from workbench.app_resources import APP_ID, ICON_SIZES, SAMPLE_SPECS, icon_path, sample_spec

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """Build the wheel once per session, from a copy of the sources so the checkout gets no build/ or
    egg-info."""
    pytest.importorskip("build", reason="the dev extras install `build`")
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "workbench", src / "workbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(work / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list((work / "dist").glob("torch_workbench-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_carries_the_desktop_entry_icons_and_sample_specs(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        want = {
            f"workbench/resources/{APP_ID}.desktop",
            f"workbench/resources/icons/{APP_ID}.svg",
            *(f"workbench/resources/icons/{APP_ID}-{n}.png" for n in ICON_SIZES),
            *(f"workbench/resources/specs/{name}" for name in SAMPLE_SPECS),
            "workbench/app_resources.py",
            "workbench/desktop.py",
        }
        assert want <= names, sorted(want - names)
        # Byte for byte what the package holds (a PNG mangled by a text filter would still be listed).
        assert (
            zf.read("workbench/resources/specs/train-digits.toml") == sample_spec("train-digits").read_bytes()
        )
        assert zf.read(f"workbench/resources/icons/{APP_ID}-512.png") == icon_path(512).read_bytes()
        assert not [n for n in names if "__pycache__" in n or n.startswith(("tests/", "resources/"))]
        dist_info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = email.parser.Parser().parsestr(zf.read(dist_info).decode())
        entry_points = zf.read(dist_info.replace("METADATA", "entry_points.txt")).decode()
    assert metadata["Name"] == "torch-workbench"
    assert "workbench = workbench.cli:main" in entry_points


def test_the_digits_sample_spec_trains_through_the_command_line(tmp_path):
    proc = wb(
        tmp_path,
        "train",
        str(sample_spec("train-digits")),
        "--set",
        "epochs=1",
        "--set",
        "device=cpu",
        "--json",
        timeout=240,
    )
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done"
    run_dir = Path(result["run_dir"])
    assert run_dir.parent == tmp_path / "ws" / "runs"
    ran = (run_dir / "spec.toml").read_text()
    assert 'name = "digits"' in ran and "epochs = 1" in ran
