"""GraphServer: starts Model Explorer's server as its own process on 127.0.0.1, tells when it answers, builds
the page address (with the session's token) for a graph JSON file, registering the graph, and stops it. The
GUI imports this module: it must import neither Qt nor torch nor model_explorer (only the launcher, run as
`python -m`, does).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

from workbench.graph_server.expansion import initial_expansion

LAUNCHER = "workbench.graph_server.launcher"
STATES = ("stopped", "starting", "ready", "failed")


def _pane(
    path: str | Path, label: str | None = None, graph_id: str | None = None, *, selected: bool, width: float
) -> dict:
    """One pane of Model Explorer's ui state (the fields of its createInitialPaneState) showing a graph of the
    JSON file at `path` (its first, or the one with `graph_id`), its layers opened as far as the graph fits a
    screen."""
    own_label, graphs = _layout_of(str(Path(path).absolute()))
    opened = dict(graphs)
    shown = graph_id if graph_id is not None else (graphs[0][0] if graphs else "")
    return {
        "deepestExpandedGroupNodeIds": list(opened.get(shown, graphs[0][1] if graphs else ())),
        "selectedNodeId": "",
        "selectedGraphId": shown,
        "selectedCollectionLabel": label if label is not None else own_label,
        "widthFraction": width,
        "selected": selected,
    }


def _layout_of(path: str) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """A graph JSON file's collection label and, for each of its graphs, (its id, the layers to open); ("",
    ()) when it cannot be read (the page then says so itself). Cached by size and time, so switching overlays
    does not parse a large graph again in the window's thread; only these few strings are kept, not the parsed
    file."""
    try:
        stat = os.stat(path)
    except OSError:
        return "", ()
    return _read_layout(path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read_layout(path: str, size: int, mtime_ns: int) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "", ()
    if not isinstance(data, dict):
        return "", ()
    graphs = [g for g in data.get("graphs") or [] if isinstance(g, dict)]
    return str(data.get("label", "")), tuple(
        (str(g.get("id", "")), tuple(initial_expansion(g))) for g in graphs
    )


class GraphServer:
    """One Model Explorer server for one owner (the window). `start` returns at once; `poll` says how it
    goes."""

    def __init__(
        self,
        roots: Sequence[str | Path],
        *,
        python: str = sys.executable,
        runtime_dir: str | Path | None = None,
        port: int = 0,
    ):
        self.roots = [Path(root).absolute() for root in roots]
        self.wanted_port = port  # 0: a free one
        self.python = python
        self._runtime_dir = Path(runtime_dir) if runtime_dir else None
        self._own_dir: tempfile.TemporaryDirectory | None = None
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        # the session token the server wants on each request (from its ready file)
        self.token: str | None = None
        self.cookie_name: str | None = None  # the cookie the page carries it in, once loaded with it
        self.state = "stopped"
        self.error = ""
        self._registered: list[str] = []  # graph files the server may convert: the ones our pages opened
        self.registry: Path | None = None  # where the server reads that list, while it runs
        self.temp_dir: Path | None = None  # Model Explorer's temp files, in a folder of ours rather than /tmp

    # -- lifetime --------------------------------------------------------------------------------
    def start(self) -> None:
        """Launch the server process (a no-op while one is starting or running)."""
        if self.state in ("starting", "ready") and self.process is not None and self.process.poll() is None:
            return
        folder = self._folder()
        self.ready_file = folder / "graph-server.json"
        self.log_path = folder / "graph-server.log"
        self.registry = folder / "graph-server-registry.json"
        self.temp_dir = folder / "graph-server-tmp"
        self.ready_file.unlink(missing_ok=True)
        self._write_registry()
        argv = [
            self.python,
            "-m",
            LAUNCHER,
            "--ready-file",
            str(self.ready_file),
            "--parent-pid",
            str(os.getpid()),
            "--registry",
            str(self.registry),
            "--temp-dir",
            str(self.temp_dir),
        ]
        if self._own_dir is not None:  # ours alone: if the window dies unannounced, the server removes it
            argv += ["--remove-when-orphaned", self._own_dir.name]
        for root in self.roots:
            argv += ["--root", str(root)]
        if self.wanted_port:
            argv += ["--port", str(self.wanted_port)]
        with open(self.log_path, "wb") as log:
            # Its own session: a Ctrl+C in the terminal reaches the window, which then stops it in order.
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.port, self.token, self.cookie_name, self.error, self.state = None, None, None, "", "starting"

    def poll(self) -> str:
        """Check, without waiting, whether a starting server answers yet or has died; returns the state."""
        if self.state not in ("starting", "ready") or self.process is None:
            return self.state
        code = self.process.poll()
        if code is not None:
            self.state, self.port = "failed", None
            self.error = f"the graph server exited with code {code}: {self._log_tail() or 'no output'}"
            return self.state
        if self.state == "starting":
            try:
                info = json.loads(self.ready_file.read_text())
            except (OSError, ValueError):
                return self.state
            self.port, self.token, self.cookie_name = (
                int(info["port"]),
                str(info["token"]),
                str(info["cookie"]),
            )
            self.state = "ready"
        return self.state

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until the server answers (tests, the command line; the window polls instead)."""
        deadline = time.monotonic() + timeout
        while self.poll() == "starting" and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.state == "ready"

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after `timeout` seconds. Safe to call twice."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)  # its own session: the group is the server alone
            except (ProcessLookupError, PermissionError):
                process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        self.port = self.token = self.cookie_name = None
        if self.state != "failed":
            self.state = "stopped"
        if self.temp_dir is not None:  # the server removes its temp files itself, unless it was SIGKILLed
            shutil.rmtree(self.temp_dir, ignore_errors=True)
        if self.registry is not None:
            self.registry.unlink(missing_ok=True)
            self.registry = None
        if self._own_dir is not None:
            self._own_dir.cleanup()
            self._own_dir = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    # -- pages -----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError("the graph server is not running")
        return f"http://127.0.0.1:{self.port}/"

    def register(self, *graphs: str | Path) -> None:
        """Let the server convert these graph files (it refuses any other): url_for registers what it
        shows."""
        added = [str(Path(graph).absolute()) for graph in graphs]
        added = [path for path in added if path not in self._registered]
        if added:
            self._registered += added
            if self.registry is not None:
                self._write_registry()

    def url_for(
        self,
        graph: str | Path,
        node_data: Sequence[str | Path] = (),
        beside: tuple[str | Path, str, str] | None = None,
    ) -> str:
        """The page showing `graph` (a Model Explorer graph JSON file), coloured by `node_data` (node-data
        JSON files; Model Explorer selects the last one). `beside` = (graph JSON, its collection label, its
        graph id) opens a second graph in Model Explorer's split pane, to the right of the first. The address
        carries the session token: whoever has it can use the server, so it goes only to the window's view or
        the terminal."""
        model = str(Path(graph).absolute())
        self.register(model, *([beside[0]] if beside is not None else []))
        data: dict = {"models": [{"url": model}]}
        if node_data:
            data["nodeData"] = [str(Path(p).absolute()) for p in node_data]
            # "": the first model, as model_explorer.config does
            data["nodeDataTargets"] = [""] * len(node_data)
        # The web app restores its panes from a ui state naming each pane's collection, graph and open layers;
        # a pane whose graph it cannot find shows the first collection's first graph instead.
        panes = [_pane(model, selected=True, width=1.0 if beside is None else 0.5)]
        if beside is not None:
            other, label, graph_id = beside
            data["models"].append({"url": str(Path(other).absolute())})
            panes.append(_pane(other, label, graph_id, selected=False, width=0.5))
        data["uiState"] = {"paneStates": panes}
        token = f"&token={quote(self.token)}" if self.token else ""
        return f"{self.base_url}?data={quote(json.dumps(data))}&renderer=webgl&show_open_in_new_tab=0{token}"

    # -- helpers ---------------------------------------------------------------------------------
    def _write_registry(self) -> None:
        assert self.registry is not None
        tmp = self.registry.with_name(self.registry.name + ".tmp")
        tmp.write_text(json.dumps(self._registered))
        os.replace(tmp, self.registry)  # whole or not at all: the server reads it while we write

    def _folder(self) -> Path:
        if self._runtime_dir is not None:
            self._runtime_dir.mkdir(parents=True, exist_ok=True)
            return self._runtime_dir
        if self._own_dir is None:
            self._own_dir = tempfile.TemporaryDirectory(prefix="workbench-graph-")
        return Path(self._own_dir.name)

    def _log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
