"""Which user code a spec names (`file:` and `lightning:` files), whether its folder is trusted in this
workspace, and the sha256 record a run keeps of the code it trained with, so a later job of the run refuses
code changed since. Stdlib only (plus the run store): no torch, no Qt.
"""

from __future__ import annotations

import errno
import hashlib
import json
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import JobError, SpecError, UsageError, WorkbenchError
from workbench.results import dig

PREFIXES = ("file:", "lightning:")
SETTINGS_FILE = "settings.json"  # in the workspace folder, beside runs/
RECORD_FILE = "user_code.json"  # in a training run's folder
TRUST_HINT = (
    "Pass --trust to trust {folders} for this workspace and go on, or run `workbench trust <folder>` "
    "once you have read the code"
)

# Set only by the command line's --allow-changed-code: one job per process there. The window's worker never
# sets it, so the window offers no silent way past a changed file.
_allow_changed_code = False


class ChangedCodeError(JobError):
    """A run's user code is not what it trained with: never to be caught and worked around by a fallback."""


@dataclass(frozen=True)
class UserFile:
    """One Python file a spec names: the dotted field (`dataset.name`), the spec's value and the file it
    means."""

    field: str
    ref: str
    path: Path

    @property
    def folder(self) -> Path:
        return self.path.parent


def resolve_path(path_text: str, base: str | Path | None = None) -> Path:
    """The file a `file:`/`lightning:` path means: relative to the spec's folder where it exists there and not
    in the working folder (as the spec loader anchors it), else relative to the working folder (as the worker
    imports it)."""
    path = Path(path_text).expanduser()
    if base is not None and not path.is_absolute() and not path.exists() and (Path(base) / path).is_file():
        path = Path(base) / path
    return path.absolute()


def user_files(spec_data: Mapping, base: str | Path | None = None) -> list[UserFile]:
    """Every `file:<path.py>:<Name>` and `lightning:<path.py>:<Name>` value in a spec's plain data, by
    field."""
    found: list[UserFile] = []

    def walk(value, field: str) -> None:
        if isinstance(value, Mapping):
            for key, child in value.items():
                walk(child, f"{field}.{key}" if field else str(key))
        elif isinstance(value, list):
            for index, child in enumerate(value):
                walk(child, f"{field}[{index}]")
        elif isinstance(value, str) and value.startswith(PREFIXES):
            prefix = next(p for p in PREFIXES if value.startswith(p))
            # rpartition: a Windows path has a colon
            path_text, colon, _ = value[len(prefix) :].rpartition(":")
            if colon and path_text:
                found.append(UserFile(field, value, resolve_path(path_text, base)))

    walk(spec_data, "")
    return found


def file_problem(path: Path) -> str | None:
    """Why `path` cannot be a Python file to import, in words ("does not exist", "is a folder", ...); None
    when it is a regular file."""
    try:
        info = path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "is a symbolic link that loops back on itself"
        if path.is_symlink():
            return "is a symbolic link to a file that does not exist"
        return "does not exist"
    except RuntimeError:  # pathlib's own "Symlink loop" on older Pythons
        return "is a symbolic link that loops back on itself"
    if stat.S_ISDIR(info.st_mode):
        return "is a folder, not a Python file"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a pipe, socket or device)"
    return None


def check_spec_files(spec_data: Mapping, base: str | Path | None = None) -> None:
    """A SpecError naming the field for each file: or lightning: path of a spec that is not a Python file to
    import:
    a bad path is a bad spec, refused before a run exists."""
    for f in user_files(spec_data, base):
        problem = file_problem(f.path)
        if problem is not None:
            raise SpecError(f"{f.field}: {f.path} {problem}")


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- trusted folders -----------------------------------------------------------------------------------------
def examples_folder() -> Path:
    """The bundled examples ship with the product: their folder is trusted everywhere."""
    return (Path(__file__).parent / "resources" / "examples").resolve()


def _settings_path(workspace: str | Path) -> Path:
    return Path(workspace) / SETTINGS_FILE


def _read_settings(workspace: str | Path) -> dict:
    path = _settings_path(workspace)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} cannot be read as JSON ({exc}); fix or delete it") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} must hold a JSON object")
    return data


def _write_folders(workspace: str | Path, folders: list[str]) -> None:
    from workbench.runs import atomic_write_json

    data = _read_settings(workspace)  # other settings in the file are kept
    data["trusted_folders"] = folders
    Path(workspace).mkdir(parents=True, exist_ok=True)
    atomic_write_json(_settings_path(workspace), data)


def trusted_folders(workspace: str | Path) -> list[Path]:
    """The folders trusted in this workspace, as recorded (absolute, symlinks resolved)."""
    folders = _read_settings(workspace).get("trusted_folders") or []
    return [Path(text) for text in folders if isinstance(text, str)]


def trust_folder(workspace: str | Path, folder: str | Path) -> Path:
    """Record `folder` (and every folder inside it) as trusted in this workspace; returns it as recorded."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"trust: {path} is not a folder")
    current = [str(p) for p in trusted_folders(workspace)]
    if str(path) not in current:
        _write_folders(workspace, current + [str(path)])
    return path


def untrust_folder(workspace: str | Path, folder: str | Path) -> Path:
    """Take `folder` off this workspace's trusted folders; a UsageError naming the recorded ones when it is
    not there."""
    path = Path(folder).expanduser().resolve()
    current = [str(p) for p in trusted_folders(workspace)]
    if str(path) not in current:
        listed = ", ".join(current) or "none"
        raise UsageError(
            f"trust --remove: {path} is not a trusted folder of this workspace (trusted: {listed})"
        )
    _write_folders(workspace, [text for text in current if text != str(path)])
    return path


def is_trusted(path: str | Path, workspace: str | Path | None) -> bool:
    """Whether the file's real folder is the bundled examples or inside a folder trusted in `workspace`."""
    real = Path(path).resolve()  # a symlink is judged by where its code really is
    roots = [examples_folder()] + (trusted_folders(workspace) if workspace is not None else [])
    return any(real.parent == root or root in real.parents for root in roots)


def untrusted(files: Iterable[UserFile], workspace: str | Path | None) -> list[UserFile]:
    """The files that would run and are not trusted (a missing file runs nothing: the job itself says it is
    missing)."""
    return [f for f in files if f.path.is_file() and not is_trusted(f.path, workspace)]


def describe(files: Iterable[UserFile]) -> str:
    """`dataset.name: /p/data.py, model.name: /p/net.py`."""
    return ", ".join(f"{f.field}: {f.path}" for f in files)


def folders_of(files: Iterable[UserFile]) -> list[Path]:
    return sorted({f.path.resolve().parent for f in files})


def refusal(files: list[UserFile]) -> str:
    """The message that refuses a job whose user code is from folders not trusted yet."""
    folders = folders_of(files)
    named = ", ".join(str(p) for p in folders)
    return (
        f"this job runs Python code from a folder not trusted in this workspace ({describe(files)}); it "
        "would run with your permissions. " + TRUST_HINT.format(folders=named)
    )


# -- the job's code, through the runs it names ---------------------------------------------------------------
def run_user_files(
    workspace: str | Path, ref: str, *, field: str = "source.run", _hops: int = 1
) -> list[UserFile]:
    """The user files a later job of run `ref` imports: its training spec's (a quantize run's through its own
    source.run). Empty when the run cannot be read: the job itself then says why."""
    from workbench.runs import RunStore

    try:
        with RunStore(workspace).open_run(str(ref)) as run:
            task, data = run.task, run.read_spec()
    except WorkbenchError:
        return []
    if task.startswith("quant.") and _hops > 0:  # a quantize run rebuilds its training run's model
        source = dig(data, "source", "run")
        return (
            run_user_files(workspace, source, field=f"{field}.source.run", _hops=_hops - 1) if source else []
        )
    if not task.startswith("train."):
        return []
    return [UserFile(f"{field} {f.field}", f.ref, f.path) for f in user_files(data)]


def job_user_files(
    spec_data: Mapping, workspace: str | Path | None, base: str | Path | None = None
) -> list[UserFile]:
    """The user files a job would import: those its spec names, and those of the runs it names (source.run,
    and a graph's quant_run)."""
    files = user_files(spec_data, base)
    if workspace is not None:
        source = spec_data.get("source") if isinstance(spec_data.get("source"), Mapping) else {}
        for field, ref in (("source.run", source.get("run")), ("quant_run", spec_data.get("quant_run"))):
            if isinstance(ref, str) and ref.strip():
                files += run_user_files(workspace, ref, field=field)
    return files


# -- what a run trained with ---------------------------------------------------------------------------------
def record_user_code(run_dir: str | Path, spec_data: Mapping) -> None:
    """Write the sha256 of every user file the run's spec names into `<run>/user_code.json` (nothing when
    none)."""
    from workbench.runs import atomic_write_json

    files = [f for f in user_files(spec_data) if f.path.is_file()]
    if not files:
        return
    atomic_write_json(
        Path(run_dir) / RECORD_FILE,
        {
            "files": [
                {"field": f.field, "ref": f.ref, "path": str(f.path), "sha256": sha256(f.path)} for f in files
            ]
        },
    )


def set_allow_changed_code(allow: bool) -> None:
    global _allow_changed_code
    _allow_changed_code = bool(allow)


def changed_code(run_dir: str | Path, spec_data: Mapping) -> list[str]:
    """One line per user file of the run that is not the code it trained with (empty: unchanged, or a run from
    before runs recorded their code)."""
    path = Path(run_dir) / RECORD_FILE
    if not path.is_file():
        return []
    try:
        recorded = {entry["field"]: entry for entry in json.loads(path.read_text(encoding="utf-8"))["files"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{path} cannot be read ({exc}), so the run's code cannot be checked"]
    lines = []
    for f in user_files(spec_data):
        entry = recorded.get(f.field)
        if entry is None:
            lines.append(f"{f.field}: {f.path} was not part of the run's recorded code")
        elif not f.path.is_file():
            lines.append(
                f"{f.field}: {f.path} no longer exists (the run trained with it, sha256 "
                f"{entry['sha256'][:12]})"
            )
        elif str(f.path) != entry.get("path"):
            lines.append(
                f"{f.field}: {f.ref} now means {f.path}, not {entry.get('path')} that the run trained with"
            )
        else:
            now = sha256(f.path)
            if now != entry.get("sha256"):
                lines.append(
                    f"{f.field}: {f.path} changed since the run trained (sha256 {entry['sha256'][:12]} then, "
                    f"{now[:12]} now)"
                )
    return lines


def check_run_code(run_dir: str | Path, spec_data: Mapping) -> None:
    """A JobError when the run's user code changed since it trained, unless --allow-changed-code was given."""
    if _allow_changed_code:
        return
    lines = changed_code(run_dir, spec_data)
    if lines:
        raise ChangedCodeError(
            f"run {Path(run_dir).name}: its code is not what it trained with: {'; '.join(lines)}. "
            "A later job of a run runs the code it trained with only; train again, put the file back, or "
            "pass --allow-changed-code to run the file as it is now"
        )


__all__ = [
    "ChangedCodeError",
    "UserFile",
    "check_run_code",
    "changed_code",
    "describe",
    "examples_folder",
    "is_trusted",
    "job_user_files",
    "record_user_code",
    "refusal",
    "resolve_path",
    "run_user_files",
    "set_allow_changed_code",
    "sha256",
    "trust_folder",
    "trusted_folders",
    "untrust_folder",
    "untrusted",
    "user_files",
]
