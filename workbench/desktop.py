"""`workbench desktop install|uninstall`: the app's menu entry and icons in the user's XDG data folders.

Writes applications/torch-workbench.desktop (Exec and TryExec point at this installation's `workbench`) and
icons/hicolor/<N>x<N>/apps/torch-workbench.png plus scalable/apps/torch-workbench.svg under $XDG_DATA_HOME
(default ~/.local/share), the folders every freedesktop.org menu reads. No torch, no Qt.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbench.app_resources import APP_ID, ICON_SIZES, desktop_entry_text, icon_path
from workbench.errors import JobError, UsageError

__all__ = ["exec_command", "install", "installed_paths", "resolve_data_home", "uninstall"]

# Characters the Desktop Entry spec reserves in an Exec argument: such an argument must be double-quoted.
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def resolve_data_home(data_home: Path | None = None) -> Path:
    """Where the entry goes: the argument, else $XDG_DATA_HOME (when absolute, as the spec demands), else
    ~/.local/share."""
    if data_home is not None:
        return Path(data_home)
    env = os.environ.get("XDG_DATA_HOME", "")
    if env and os.path.isabs(env):
        return Path(env)
    return Path.home() / ".local" / "share"


def installed_paths(data_home: Path | None = None) -> list[Path]:
    """Every file install() writes, whether or not it is there now."""
    root = resolve_data_home(data_home)
    icons = root / "icons" / "hicolor"
    return [
        root / "applications" / f"{APP_ID}.desktop",
        *(icons / f"{size}x{size}" / "apps" / f"{APP_ID}.png" for size in ICON_SIZES),
        icons / "scalable" / "apps" / f"{APP_ID}.svg",
    ]


def _quote(arg: str) -> str:
    """One Exec argument, quoted as the Desktop Entry spec says (then escaped once more as a string value)."""
    if arg and not (_RESERVED & set(arg)):
        quoted = arg
    else:
        quoted = '"' + "".join("\\" + c if c in '"`$\\' else c for c in arg) + '"'
    # The key file layer unescapes backslashes before Exec is split, so each one is written twice; a literal %
    # is %% because % starts a field code.
    return quoted.replace("\\", "\\\\").replace("%", "%%")


def exec_command() -> tuple[list[str], str]:
    """(argv that starts the window, the program TryExec checks). Prefers the `workbench` script beside this
    interpreter (a venv's or pipx's bin, which need not be on PATH), then the one on PATH, then
    `python -m workbench` with this interpreter."""
    beside = Path(sys.executable).parent / "workbench"
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside), "gui"], str(beside)
    found = shutil.which("workbench")
    if found:
        found = str(Path(found).absolute())
        return [found, "gui"], found
    return [sys.executable, "-m", "workbench", "gui"], sys.executable


def _entry_text() -> str:
    argv, try_exec = exec_command()
    lines = []
    for line in desktop_entry_text().splitlines():
        if line.startswith("Exec="):
            lines.append("Exec=" + " ".join(_quote(arg) for arg in argv))
            # TryExec: a menu hides the entry once this installation is gone, instead of a launcher that
            # fails.
            lines.append("TryExec=" + try_exec.replace("\\", "\\\\"))
        elif not line.startswith("TryExec="):
            lines.append(line)
    return "\n".join(lines) + "\n"


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)  # a menu watching the folder never reads half a file
    finally:
        tmp.unlink(missing_ok=True)


def _refresh(root: Path) -> None:
    """Tell icon caches to look again; menus watch applications/ themselves (the entry has no MimeType, so
    there is no mimeinfo.cache to update)."""
    hicolor = root / "icons" / "hicolor"
    if hicolor.is_dir():
        os.utime(hicolor)  # the icon theme spec: a newer folder mtime makes caches re-scan it
    if (hicolor / "index.theme").is_file() and shutil.which("gtk-update-icon-cache"):
        # Only where a cache is kept: gtk-update-icon-cache refuses a theme folder without index.theme.
        try:
            subprocess.run(
                ["gtk-update-icon-cache", "-q", "-t", str(hicolor)],
                check=False,
                capture_output=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            pass


def _check_platform(data_home: Path | None) -> None:
    if data_home is None and sys.platform in ("darwin", "win32"):
        raise UsageError(
            "desktop install writes a freedesktop.org menu entry, which Linux and BSD desktops read; on "
            "macOS and Windows start the app with `workbench` (or pass a folder to write the entry into "
            "anyway)"
        )


def install(data_home: Path | None = None) -> list[Path]:
    """Write the desktop entry and the icons; returns the files written (all of them, every time).
    UsageError on macOS and Windows without an explicit folder; JobError naming the file when one cannot be
    written."""
    _check_platform(data_home)
    paths = installed_paths(data_home)
    entry, *pngs, svg = paths
    try:
        _write(entry, _entry_text().encode("utf-8"))
        os.chmod(entry, 0o644)
        for size, png in zip(ICON_SIZES, pngs):
            _write(png, icon_path(size).read_bytes())
        _write(svg, icon_path().read_bytes())
    except OSError as exc:
        raise JobError(
            f"cannot write {exc.filename or resolve_data_home(data_home)}: {exc.strerror or exc}"
        ) from None
    _refresh(resolve_data_home(data_home))
    return paths


def uninstall(data_home: Path | None = None) -> list[Path]:
    """Remove what install() writes; returns the files that were there and are now gone. Folders stay."""
    _check_platform(data_home)
    removed = []
    for path in installed_paths(data_home):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise JobError(f"cannot remove {path}: {exc.strerror or exc}") from None
        removed.append(path)
    if removed:
        _refresh(resolve_data_home(data_home))
    return removed
