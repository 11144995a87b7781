"""`workbench.desktop`: the menu entry and icons written into (and removed from) the user's XDG data
folders."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workbench import desktop
from workbench.app_resources import APP_ID, ICON_SIZES, icon_path


def read_entry(path: Path) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str
    parser.read_string(path.read_text(encoding="utf-8"))
    return parser["Desktop Entry"]


def exec_args(value: str) -> list[str]:
    """Split an Exec value as the Desktop Entry spec says: spaces separate, double quotes group, and inside
    them a backslash escapes " ` $ and itself (shlex would keep the backslash before $)."""
    args, current, quoted, i, started = [], [], False, 0, False
    while i < len(value):
        c = value[i]
        if quoted and c == "\\" and i + 1 < len(value) and value[i + 1] in '"`$\\':
            current.append(value[i + 1])
            i += 1
        elif c == '"':
            quoted, started = not quoted, True
        elif c == " " and not quoted:
            if current or started:
                args.append("".join(current))
            current, started = [], False
        else:
            current.append(c)
        i += 1
    assert not quoted, f"unbalanced quotes in {value!r}"
    if current or started:
        args.append("".join(current))
    return args


def validate(path: Path) -> None:
    if shutil.which("desktop-file-validate"):
        proc = subprocess.run(["desktop-file-validate", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def expected_files(root: Path) -> set[Path]:
    icons = root / "icons" / "hicolor"
    return {
        root / "applications" / f"{APP_ID}.desktop",
        icons / "scalable" / "apps" / f"{APP_ID}.svg",
        *(icons / f"{n}x{n}" / "apps" / f"{APP_ID}.png" for n in ICON_SIZES),
    }


def test_install_writes_the_entry_and_icons_under_xdg_data_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    written = desktop.install()
    root = tmp_path / "share"
    assert set(written) == expected_files(root)
    assert {p for p in root.rglob("*") if p.is_file()} == expected_files(root)  # nothing else, no temp files
    for n in ICON_SIZES:
        assert (root / "icons" / "hicolor" / f"{n}x{n}" / "apps" / f"{APP_ID}.png").read_bytes() == icon_path(
            n
        ).read_bytes()
    entry_path = root / "applications" / f"{APP_ID}.desktop"
    validate(entry_path)
    entry = read_entry(entry_path)
    assert entry["Icon"] == APP_ID and entry["Type"] == "Application"
    argv = exec_args(entry["Exec"])
    # The workbench script beside this interpreter (the venv's), or this interpreter with -m workbench.
    assert argv[-1] == "gui"
    assert argv[0] in (
        str(Path(sys.executable).parent / "workbench"),
        shutil.which("workbench"),
        sys.executable,
    )
    assert Path(entry["TryExec"]).is_file()


def test_install_defaults_to_local_share_and_takes_an_explicit_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert desktop.resolve_data_home() == tmp_path / "home" / ".local" / "share"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/share")  # the spec: a relative value is ignored
    assert desktop.resolve_data_home() == tmp_path / "home" / ".local" / "share"
    explicit = tmp_path / "elsewhere"
    assert set(desktop.install(explicit)) == expected_files(explicit)
    assert not (tmp_path / "home").exists()


def test_install_twice_replaces_and_uninstall_removes_everything_it_wrote(tmp_path):
    root = tmp_path / "share"
    (root / "applications").mkdir(parents=True)
    other = root / "applications" / "someone-else.desktop"
    other.write_text("[Desktop Entry]\nType=Application\nName=Other\nExec=other\n")
    first = desktop.install(root)
    assert desktop.install(root) == first
    removed = desktop.uninstall(root)
    assert set(removed) == expected_files(root)
    assert not any(path.exists() for path in removed)
    assert other.exists()  # only our own files go
    assert desktop.uninstall(root) == []  # nothing left to remove is not an error


def test_exec_quotes_a_path_with_spaces_and_reserved_characters(tmp_path, monkeypatch):
    bin_dir = tmp_path / "my tools $HOME"
    bin_dir.mkdir()
    script = bin_dir / "workbench"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    desktop.install(tmp_path / "share")
    entry_path = tmp_path / "share" / "applications" / f"{APP_ID}.desktop"
    validate(entry_path)
    raw = entry_path.read_text(encoding="utf-8")
    assert 'Exec="' in raw
    # Undo the key-file escape (\\ -> \), then split by the Desktop Entry spec's quoting rules.
    assert exec_args(read_entry(entry_path)["Exec"].replace("\\\\", "\\")) == [str(script), "gui"]


def test_without_a_workbench_script_exec_runs_this_python(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python3"))
    monkeypatch.setattr(desktop.shutil, "which", lambda name: None)
    argv, try_exec = desktop.exec_command()
    assert argv == [str(tmp_path / "python3"), "-m", "workbench", "gui"]
    assert try_exec == str(tmp_path / "python3")


@pytest.mark.skipif(sys.platform != "linux", reason="XDG folders are a Linux desktop's")
def test_desktop_file_validate_is_strict_about_what_we_write(tmp_path):
    """The validator itself catches a broken entry, so the checks above are not vacuous."""
    if not shutil.which("desktop-file-validate"):
        pytest.skip("desktop-file-validate is not installed (apt-get install desktop-file-utils)")
    bad = tmp_path / "bad.desktop"
    bad.write_text("[Desktop Entry]\nType=Application\nExec=workbench\n")  # no Name
    proc = subprocess.run(["desktop-file-validate", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0


def test_a_folder_that_cannot_be_written_is_named_in_a_clear_error(tmp_path):
    from workbench.errors import JobError

    blocker = tmp_path / "share"
    blocker.write_text("a file where the data folder should be")
    with pytest.raises(JobError, match="cannot write .*share"):
        desktop.install(blocker)


def test_macos_and_windows_are_told_there_is_no_such_menu(tmp_path, monkeypatch):
    from workbench.errors import UsageError

    monkeypatch.setattr(desktop.sys, "platform", "darwin")
    with pytest.raises(UsageError, match="freedesktop.org"):
        desktop.install()
    with pytest.raises(UsageError, match="freedesktop.org"):
        desktop.uninstall()
    assert desktop.install(tmp_path / "share")  # an explicit folder is written anywhere
