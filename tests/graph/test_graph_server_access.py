"""Who may use the graph server, over real HTTP against the real server: only the workbench's own page (its
session token, its origin), converting only the graphs the workbench registered, taking no uploads, leaving no
temp files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest
from waiting import wait_until

from workbench.graph_server.process import GraphServer

EVIL = "http://evil.example"


def _request(url: str, *, data: bytes | None = None, headers: dict | None = None) -> tuple[int, bytes, dict]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def _token(server: GraphServer, graph: Path) -> str:
    """The session token in the page address the workbench opens for `graph` (which registers it)."""
    return parse_qs(urlparse(server.url_for(graph)).query).get("token", [""])[0]


def _send_command(
    server: GraphServer, token: str, path: str | Path, *, extension: str = "builtin_mlir", post: bool = False
) -> tuple[int, bytes]:
    command = {
        "extensionId": extension,
        "cmdId": "convert",
        "modelPath": str(path),
        "settings": {},
        "deleteAfterConversion": False,
    }
    if post:
        status, body, _ = _request(
            f"{server.base_url}apipost/v1/send_command?token={token}",
            data=json.dumps(command).encode(),
            headers={"Content-Type": "application/json"},
        )
    else:
        status, body, _ = _request(
            f"{server.base_url}api/v1/send_command?token={token}&json={quote(json.dumps(command))}"
        )
    return status, body


def _upload(server: GraphServer, query: str, origin: str, size: int) -> tuple[int, bytes]:
    boundary = "workbench-test-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="model.tflite"\r\n'
            f"Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + b"\0" * size
        + f"\r\n--{boundary}--\r\n".encode()
    )
    status, reply, _ = _request(
        f"{server.base_url}apipost/v1/upload{query}",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": origin},
    )
    return status, reply


def _graph(root: Path, name: str = "graph.json") -> Path:
    graph = root / "runs" / "r1" / "artifacts" / "graph" / name
    graph.parent.mkdir(parents=True, exist_ok=True)
    graph.write_text(json.dumps({"graphs": [{"id": "graph", "nodes": [{"id": "x", "label": "x"}]}]}))
    return graph


@pytest.fixture
def served(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"  # the system temp folder, for this server: what it leaves there is seen
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    root = tmp_path / "workspace"
    graph = _graph(root)
    server = GraphServer([root])
    server.start()
    assert server.wait_ready(60), server.error
    yield server, graph, tmp_path
    server.stop()


def test_converts_only_the_graphs_the_workbench_registered(served):
    """A secret file's first token came back in the MLIR adapter's error, and other errors told whether a path
    existed: now anything the workbench did not register gets the same bare 403."""
    server, graph, tmp_path = served
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET_TOKEN_abc123 = 1\n")
    secret.chmod(0o600)
    unregistered = _graph(tmp_path / "workspace", "other.json")  # inside the workspace, but never opened
    token = _token(server, graph)
    answers = set()
    for path in (secret, tmp_path / "no-such-file.mlir", unregistered, "/etc/passwd"):
        for post in (False, True):
            status, body = _send_command(server, token, path, post=post)
            assert status == 403 and b"SECRET_TOKEN" not in body, (path, post, status, body)
            answers.add(body)
    assert len(answers) == 1, answers  # one answer for all: nothing says whether a path exists
    status, _ = _send_command(server, token, graph, extension="builtin_json")
    assert status != 403  # the registered graph passes (Model Explorer itself reads JSON graphs another way)


def test_refuses_uploads_and_requests_from_other_origins(served):
    server, graph, tmp_path = served
    token = _token(server, graph)
    own = server.base_url.rstrip("/")
    for origin in (EVIL, own):  # no upload at all: the workbench never uploads, and a page must not either
        status, _ = _upload(server, f"?token={token}", origin, 1 << 20)
        assert status == 403, origin
    # its ready file, log and registry, in the temp folder while it runs
    own_folder = server.ready_file.parent
    assert [p for p in (tmp_path / "tmp").iterdir() if p != own_folder] == []  # nothing was written
    assert not list(own_folder.rglob("*model.tflite*"))
    read = f"{server.base_url}api/v1/read_text_file?path={graph}&token={token}"
    assert _request(read, headers={"Origin": own})[0] == 200
    assert _request(read, headers={"Origin": EVIL})[0] == 403
    assert _request(read, headers={"Sec-Fetch-Site": "cross-site"})[0] == 403
    assert _request(read, headers={"Sec-Fetch-Site": "same-site"})[0] == 403  # another port of 127.0.0.1


def test_every_request_needs_the_session_token(served):
    """Another local page cannot drive the server: the page needs the token in its address, its API calls the
    cookie that the page's answer set."""
    server, graph, _ = served
    url = server.url_for(graph)
    token = parse_qs(urlparse(url).query).get("token", [""])[0]
    assert len(token) >= 32 and url.startswith(server.base_url)
    read = f"{server.base_url}api/v1/read_text_file?path={graph}"
    for address in (server.base_url, read, f"{server.base_url}api/v1/get_extensions"):
        assert _request(address)[0] == 403, address
        assert _request(address + ("&" if "?" in address else "?") + "token=wrong")[0] == 403, address
        assert _request(address, headers={"Cookie": f"{server.cookie_name}=wrong"})[0] == 403, address
    status, page, headers = _request(url)
    assert status == 200 and b"<html" in page.lower()
    cookie = headers.get("Set-Cookie", "")
    assert cookie.startswith(f"{server.cookie_name}={token};"), cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie, cookie
    with_cookie = {"Cookie": f"{server.cookie_name}={token}"}
    status, body, _ = _request(read, headers=with_cookie)
    assert status == 200 and json.loads(json.loads(body)["content"]) == json.loads(graph.read_text())
    # the page's own scripts load with the cookie
    script = page.decode().split('src="', 1)[1].split('"', 1)[0]
    assert _request(server.base_url + script.lstrip("/"), headers=with_cookie)[0] == 200
    assert _request(server.base_url + script.lstrip("/"))[0] == 403
    assert _request(f"{server.base_url}check_health")[0] == 200  # a liveness probe that says nothing else


def test_leaves_nothing_in_the_temp_folder_after_stop(served):
    server, graph, tmp_path = served
    token = _token(server, graph)
    _upload(server, f"?token={token}", server.base_url.rstrip("/"), 1 << 20)
    _send_command(server, token, graph, extension="builtin_json")
    server.stop()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_orphaned_server_removes_its_temp_files(tmp_path):
    """The window is SIGKILLed, so it never calls stop(): the server exits by itself and takes its folder
    along."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from workbench.graph_server.process import GraphServer
        server = GraphServer([{str(tmp_path)!r}])
        server.start()
        assert server.wait_ready(60), server.error
        print(server.pid, flush=True)
        time.sleep(600)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    try:
        pid = int(owner.stdout.readline())
        assert list(temp.iterdir())  # the server's folder: its ready file and log
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        wait_until(lambda: not list(temp.iterdir()), 20, "the orphaned graph server to remove its folder")
        wait_until(
            lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 10, "the orphaned server to exit"
        )
    finally:
        owner.kill()
        owner.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
