"""`python -m workbench.graph_server.launcher`: Model Explorer's own server on 127.0.0.1 and a free port, run
without torch (it only serves JSON files), answering only for files under the given roots.

It writes {"port", "pid", "url"} to --ready-file once it answers, and exits as soon as --parent-pid is gone.
This module imports model_explorer: only the server process may import it, never the GUI.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"  # loopback only: Model Explorer reads any file it is asked for, so it must not face a network
READY_TIMEOUT = 60.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    return port if port != 8080 else _free_port()  # 8080 makes Model Explorer hunt for a port of its own


def _inside(path: str, roots: list[Path]) -> bool:
    try:
        real = Path(os.path.realpath(os.path.expanduser(path)))
    except (OSError, ValueError):
        return False
    return real.suffix == ".json" and any(real.is_relative_to(root) for root in roots)


def harden(app, port: int, roots: list[Path]) -> None:
    """Refuse requests for another host name (a web page's DNS rebinding) and file reads outside `roots`."""
    import flask

    hosts = {f"{HOST}:{port}", f"localhost:{port}"}

    @app.before_request
    def _check():
        request = flask.request
        if request.host not in hosts:
            flask.abort(403)
        if request.path == "/api/v1/read_text_file" and not _inside(request.args.get("path", ""), roots):
            return flask.jsonify({"error": "the workbench's graph server only reads graph and overlay JSON files "
                                           "of its workspace"}), 403
        return None


def _write_ready(path: Path, port: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"port": port, "pid": os.getpid(), "url": f"http://{HOST}:{port}/"}))
    os.replace(tmp, path)


def _announce_when_ready(port: int, ready_file: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/check_health", timeout=2) as reply:
                if reply.read() == b"model_explorer_ok":
                    _write_ready(ready_file, port)
                    return
        except OSError:
            time.sleep(0.05)
    print(f"graph server: no answer on port {port} after {READY_TIMEOUT:.0f} s", file=sys.stderr, flush=True)
    os._exit(3)


def _watch_parent(pid: int) -> None:
    """Exit once `pid` (the window) is gone: a changed parent for our own parent, signal 0 for anyone else."""
    is_parent = os.getppid() == pid
    while True:
        if is_parent and os.getppid() != pid:
            break
        if not is_parent:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
        time.sleep(0.25)
    os._exit(0)  # the server runs in non-daemon threads of Model Explorer's own; nothing here needs flushing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.graph_server.launcher", description=__doc__)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument("--root", action="append", default=[], type=Path,
                        help="a folder whose .json files may be served (repeat for more)")
    parser.add_argument("--port", type=int, default=0, help="the port to serve on; 0 picks a free one")
    args = parser.parse_args(argv)
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid,), daemon=True).start()
    roots = [Path(os.path.realpath(root)) for root in args.root]
    # The server only serves JSON the worker wrote; without torch it starts in a fraction of the time and memory.
    sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` raise ImportError
    import flask
    from model_explorer import server

    # It asks PyPI and GitHub for a newer version on start and from the page: a desktop app must not phone home.
    server._check_new_version = lambda print_msg=True: {"version": "", "runningVersion": "", "releaseUrl": "",
                                                         "desktopAppUrl": ""}
    port = args.port or _free_port()
    run = flask.Flask.run

    def hardened_run(app, *run_args, **run_kwargs):
        harden(app, port, roots)
        return run(app, *run_args, **run_kwargs)

    flask.Flask.run = hardened_run
    threading.Thread(target=_announce_when_ready, args=(port, args.ready_file), daemon=True).start()
    server.start(host=HOST, port=port, config=None, no_open_in_browser=True, skip_health_check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
