"""`python -m workbench.graph_server.launcher`: Model Explorer's server on 127.0.0.1, without torch, answering
only the workbench's own page (session token, origin); writes {"port", "pid", "url", "token", "cookie"} to
--ready-file once it answers and exits with --parent-pid. It imports model_explorer: only the server process
may, never the GUI.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

# loopback only: Model Explorer reads any file it is asked for, so it must not face a network
HOST = "127.0.0.1"
READY_TIMEOUT = 60.0
# the page's own POSTs are small commands; an upload of a model is refused whatever its size
MAX_BODY = 1 << 20
# Model Explorer's endpoints that write (uploads into the temp folder) or steer every open page (its config, a
# reload): the workbench's page never needs them, so no page gets them.
REFUSED = frozenset({"/apipost/v1/upload", "/apipost/v1/update_config", "/apipost/v1/refresh_page"})
CONVERT = frozenset({"/api/v1/send_command", "/apipost/v1/send_command"})
# One answer for every refused conversion, whatever the path: the answer must not tell whether a file exists.
NOT_REGISTERED = {"error": "the workbench's graph server converts only the graphs the workbench opened in it"}
NO_ACCESS = {"error": "the workbench's graph server answers only the workbench's own page"}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        port = probe.getsockname()[1]
    return port if port != 8080 else _free_port()  # 8080 makes Model Explorer hunt for a port of its own


def _real(path: str) -> Path | None:
    try:
        return Path(os.path.realpath(os.path.expanduser(path)))
    except (OSError, ValueError, TypeError):
        return None


def _inside(path: str, roots: list[Path]) -> bool:
    real = _real(path)
    return real is not None and real.suffix == ".json" and any(real.is_relative_to(root) for root in roots)


def _registered(path, registry: Path | None) -> bool:
    """Whether `path` is one of the graph files the workbench registered (GraphServer writes the list as it
    opens pages; it is read again on each conversion asked for, which the page rarely asks)."""
    if registry is None or not isinstance(path, str) or not path:
        return False
    try:
        listed = json.loads(registry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    real = _real(path)
    return (
        real is not None
        and isinstance(listed, list)
        and any(isinstance(entry, str) and _real(entry) == real for entry in listed)
    )


def harden(app, port: int, roots: list[Path], token: str, cookie: str, registry: Path | None = None) -> None:
    """Answer only the workbench's page: the right host name (no DNS rebinding), no other origin, the session
    token (in the address or its cookie), no uploads, conversions of registered graphs only, file reads inside
    `roots`."""
    import flask

    hosts = {f"{HOST}:{port}", f"localhost:{port}"}
    origins = {f"http://{host}" for host in hosts}
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

    def refuse(body: dict, why: str):
        # In the server's log, for whoever wonders why a page shows nothing: the path only, never the query
        # (the token may be in it).
        print(
            f"graph server: refused {flask.request.method} {flask.request.path}: {why}",
            file=sys.stderr,
            flush=True,
        )
        return flask.jsonify(body), 403

    def has_token(request) -> bool:
        given = (
            request.args.get("token")
            or request.cookies.get(cookie)
            or request.headers.get("X-Workbench-Token")
        )
        return bool(given) and hmac.compare_digest(given.encode(), token.encode())

    def command(request):
        if request.method == "POST":
            return request.get_json(silent=True)
        try:
            return json.loads(request.args.get("json", "{}"))
        except ValueError:
            return None

    @app.before_request
    def _check():
        request = flask.request
        if request.host not in hosts:
            flask.abort(403)
        if request.path == "/check_health":
            return None  # the liveness probe (ours, a service manager's): it says nothing but that it answers
        origin = request.headers.get("Origin")
        if origin is not None and origin not in origins:
            return refuse(NO_ACCESS, f"it comes from another origin ({origin[:100]})")
        # A browser names where a request comes from: "same-site" is another page of 127.0.0.1, on another
        # port.
        site = request.headers.get("Sec-Fetch-Site", "none")
        if site not in ("same-origin", "none"):
            return refuse(NO_ACCESS, f"it comes from another page ({site[:20]})")
        if not has_token(request):
            return refuse(NO_ACCESS, "no session token")
        if request.path in REFUSED:
            return refuse(
                {"error": "the workbench's graph server takes no uploads and no changes of its config"},
                "the workbench's page never asks for it",
            )
        if request.path in CONVERT:
            asked = command(request)
            if not (
                isinstance(asked, dict)
                and asked.get("cmdId") == "convert"
                and _registered(asked.get("modelPath"), registry)
            ):
                return refuse(NOT_REGISTERED, "not a graph the workbench opened")
        if request.path == "/api/v1/read_text_file" and not _inside(request.args.get("path", ""), roots):
            return refuse(
                {
                    "error": "the workbench's graph server only reads graph and overlay JSON files "
                    "of its workspace"
                },
                "outside the workspace",
            )
        return None

    @app.after_request
    def _seal(response):
        request = flask.request
        if (
            request.path == "/"
            and response.status_code == 200
            and request.args.get("token")
            and request.cookies.get(cookie) != token
            and has_token(request)
        ):
            # The page came with the token in its address; its own API calls, scripts and styles carry this
            # cookie. Cookies are not kept apart by port, hence the port in its name (two windows, two
            # servers).
            response.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
        response.headers["Referrer-Policy"] = "no-referrer"  # the page's address holds the token
        response.headers["X-Frame-Options"] = "DENY"  # no other page may frame it and post it commands
        response.headers["Content-Security-Policy"] = "frame-ancestors 'none'"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def _write_ready(path: Path, port: int, token: str, cookie: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the session token
    with os.fdopen(fd, "w") as out:
        out.write(
            json.dumps(
                {
                    "port": port,
                    "pid": os.getpid(),
                    "url": f"http://{HOST}:{port}/",
                    "token": token,
                    "cookie": cookie,
                }
            )
        )
    os.replace(tmp, path)


def _announce_when_ready(port: int, ready_file: Path, token: str, cookie: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{port}/check_health", timeout=2) as reply:
                if reply.read() == b"model_explorer_ok":
                    _write_ready(ready_file, port, token, cookie)
                    return
        except OSError:
            time.sleep(0.05)
    print(f"graph server: no answer on port {port} after {READY_TIMEOUT:.0f} s", file=sys.stderr, flush=True)
    os._exit(3)


def _remove(*folders: Path | None) -> None:
    for folder in folders:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _watch_parent(pid: int, leftovers: tuple[Path | None, ...]) -> None:
    """Exit once `pid` (the window) is gone: a changed parent for our own parent, signal 0 for anyone else.
    Nobody will stop us or clean up after us then, so the temp files (and the owner's own folder) go with
    us."""
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
    _remove(*leftovers)
    os._exit(0)  # the server runs in non-daemon threads of Model Explorer's own; nothing here needs flushing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.graph_server.launcher", description=__doc__)
    parser.add_argument("--ready-file", required=True, type=Path)
    parser.add_argument("--parent-pid", type=int, default=0)
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        type=Path,
        help="a folder whose .json files may be read (repeat for more)",
    )
    parser.add_argument(
        "--registry",
        type=Path,
        default=None,
        help="a JSON list of the graph files the server may convert (the owner adds to it)",
    )
    parser.add_argument(
        "--temp-dir",
        type=Path,
        default=None,
        help="the temp folder for Model Explorer's own temp files; removed on exit",
    )
    parser.add_argument(
        "--remove-when-orphaned",
        type=Path,
        default=None,
        help="a folder of the owner's to remove if the owner dies without stopping the server",
    )
    parser.add_argument("--port", type=int, default=0, help="the port to serve on; 0 picks a free one")
    args = parser.parse_args(argv)
    temp_dir = args.temp_dir
    if temp_dir is not None:
        # Model Explorer makes temp folders (uploads, TF models) and removes them only on a Ctrl+C it never
        # gets here: they all land in this folder, which goes with the server however it ends.
        temp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tempfile.tempdir = str(temp_dir)
        os.environ["TMPDIR"] = str(temp_dir)
    if args.parent_pid:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid, (temp_dir, args.remove_when_orphaned)), daemon=True
        ).start()
    # SIGTERM (the owner's stop) would end the process before any `finally`: remove the temp files first.
    signal.signal(signal.SIGTERM, lambda *_: (_remove(temp_dir), os._exit(0)))
    roots = [Path(os.path.realpath(root)) for root in args.root]
    # The server only serves JSON the worker wrote; without torch it starts in a fraction of the time and
    # memory.
    sys.modules["torch"] = None  # type: ignore[assignment]  # makes `import torch` raise ImportError
    import flask
    from model_explorer import server

    # It asks PyPI and GitHub for a newer version on start and from the page: a desktop app must not phone
    # home.
    server._check_new_version = lambda print_msg=True: {
        "version": "",
        "runningVersion": "",
        "releaseUrl": "",
        "desktopAppUrl": "",
    }
    port = args.port or _free_port()
    token = secrets.token_urlsafe(32)
    cookie = f"workbench_graph_{port}"
    run = flask.Flask.run

    def hardened_run(app, *run_args, **run_kwargs):
        harden(app, port, roots, token, cookie, args.registry)
        return run(app, *run_args, **run_kwargs)

    flask.Flask.run = hardened_run
    threading.Thread(
        target=_announce_when_ready, args=(port, args.ready_file, token, cookie), daemon=True
    ).start()
    try:
        server.start(host=HOST, port=port, config=None, no_open_in_browser=True, skip_health_check=True)
    finally:
        _remove(temp_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
