"""Where the workspace lives on disk (runs/, data/, cache/) and how a user's --workspace is checked.

Stdlib and platformdirs only: no torch, no Qt.
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from workbench.errors import UsageError

APP_NAME = "torch-workbench"
ENV_VAR = "WORKBENCH_WORKSPACE"
SUBDIRS = ("runs", "data", "cache")


def default_workspace() -> Path:
    """The workspace used when none is given: $WORKBENCH_WORKSPACE, else the platform's user data dir."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    return platformdirs.user_data_path(APP_NAME) / "workspace"


def resolve_workspace(path: str | Path | None) -> Path:
    """Return the absolute workspace directory, creating it and its subdirectories if needed."""
    if isinstance(path, str) and not path.strip():
        # Path("") is ".", so an empty --workspace (an unset shell variable) would quietly fill the current
        # folder.
        raise UsageError(
            f"--workspace is empty; name a folder, or leave the flag out to use {default_workspace()}"
        )
    root = Path(path).expanduser() if path is not None else default_workspace()
    root = root.absolute()
    if root.exists() and not root.is_dir():
        raise UsageError(f"Workspace {root} exists but is not a directory.")
    for sub in (root, *(root / name for name in SUBDIRS)):
        if sub.exists() and not sub.is_dir():
            raise UsageError(f"Workspace {root}: {sub} exists but is not a directory.")
        try:
            sub.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            # mkdir's own message (permission denied, read-only file system...) is the reason the user needs.
            reason = exc.strerror or str(exc)
            raise UsageError(f"Cannot create workspace {root}: {reason} ({sub}).") from exc
    return root
