"""The graph server process: loopback only, serves the worker's graph JSON (and nothing outside its roots),
stops with stop() and by itself when its owner dies. Who may use it (token, origin, uploads):
test_graph_server_access.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from waiting import wait_until

from workbench.graph_server.process import GraphServer


def _get(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of listening TCP sockets on `port`, read from /proc/net/tcp{,6}."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if state == "0A" and int(port_hex, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers signal 0; it has exited all the same
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "workspace"
    graph = root / "runs" / "r1" / "artifacts" / "graph" / "graph.json"
    graph.parent.mkdir(parents=True)
    graph.write_text(json.dumps({"graphs": [{"id": "graph", "nodes": [{"id": "x", "label": "x"}]}]}))
    server = GraphServer([root], runtime_dir=tmp_path / "rt")
    server.start()
    assert server.wait_ready(60), server.error
    yield server, graph, tmp_path
    server.stop()


def test_binds_to_loopback_only(served):
    server, _, _ = served
    assert server.base_url.startswith("http://127.0.0.1:")
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp to read listening sockets from")
    assert _listening_addresses(server.port) == {"0100007F"}  # 127.0.0.1, and no wildcard or IPv6 socket


def test_serves_the_web_app_and_graph_json(served):
    server, graph, _ = served
    url = server.url_for(graph, [graph.with_name("flops.json")])
    assert url.startswith(server.base_url + "?data=") and "graph.json" in url
    status, body = _get(url)  # the page's address carries the session's token (test_graph_server_access.py)
    assert status == 200 and b"<html" in body.lower()
    status, body = _get(f"{server.base_url}api/v1/read_text_file?path={graph}&token={server.token}")
    assert status == 200 and json.loads(json.loads(body)["content"]) == json.loads(graph.read_text())


def test_refuses_files_outside_its_roots_and_other_host_names(served):
    server, _, tmp_path = served
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    for path in (secret, "/etc/passwd", f"{tmp_path}/workspace/../secret.json"):
        status, body = _get(f"{server.base_url}api/v1/read_text_file?path={path}&token={server.token}")
        assert status == 403 and b"only reads" in body
    status, _ = _get(
        f"{server.base_url}?token={server.token}", headers={"Host": f"attacker.example:{server.port}"}
    )
    assert status == 403  # a web page that rebinds its own name to 127.0.0.1 gets nothing


def test_stop_ends_the_process_and_frees_the_port(served):
    server, _, _ = served
    pid, port = server.pid, server.port
    server.stop()
    assert not _alive(pid) and server.state == "stopped"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/check_health", timeout=2)
    server.stop()  # twice is fine


def test_server_stops_when_its_owner_dies(tmp_path):
    """The owner (the window) is SIGKILLed, so it never calls stop(): the server notices and exits by
    itself."""
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys, time
        from workbench.graph_server.process import GraphServer
        server = GraphServer([{str(tmp_path)!r}], runtime_dir={str(tmp_path / "rt")!r})
        server.start()
        assert server.wait_ready(60), server.error
        print(server.pid, server.port, flush=True)
        time.sleep(600)
    """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid, port = map(int, owner.stdout.readline().split())
        assert _alive(pid)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        wait_until(lambda: not _alive(pid), 10, "the orphaned graph server to exit")
    finally:
        owner.kill()
        owner.wait()


def test_a_server_that_cannot_start_says_why(tmp_path):
    server = GraphServer([tmp_path], python=sys.executable, runtime_dir=tmp_path / "rt")
    server.python = str(tmp_path / "no-such-python")
    with pytest.raises(OSError):
        server.start()
    broken = GraphServer([tmp_path], runtime_dir=tmp_path / "rt2")
    broken.start()
    broken.process.kill()
    wait_until(lambda: broken.poll() == "failed", 10, "the killed server to read as failed")
    assert "exited with code" in broken.error
    broken.stop()


def test_a_url_with_a_graph_beside_names_both_panes(tmp_path):
    import json as _json
    from urllib.parse import parse_qs, urlparse

    left, right = tmp_path / "a.json", tmp_path / "b.json"
    left.write_text(_json.dumps({"label": "fp32", "graphs": [{"id": "graph", "nodes": []}]}))
    right.write_text(_json.dumps({"label": "int8 (right)", "graphs": [{"id": "graph (right)", "nodes": []}]}))
    server = GraphServer([tmp_path], runtime_dir=tmp_path / "rt")
    server.port = 1  # url_for needs only the port: no server is started
    data = _json.loads(
        parse_qs(urlparse(server.url_for(left, beside=(right, "int8 (right)", "graph (right)"))).query)[
            "data"
        ][0]
    )
    assert [m["url"] for m in data["models"]] == [str(left.absolute()), str(right.absolute())]
    panes = data["uiState"]["paneStates"]
    assert [(p["selectedCollectionLabel"], p["selectedGraphId"]) for p in panes] == [
        ("fp32", "graph"),
        ("int8 (right)", "graph (right)"),
    ]
    assert [p["widthFraction"] for p in panes] == [0.5, 0.5] and panes[0]["selected"]


@pytest.mark.slow
# SIGTERM only with -m heavy (CI time): the two share every line but the signal.
@pytest.mark.parametrize("signame", ["SIGINT", pytest.param("SIGTERM", marks=pytest.mark.heavy)])
def test_workbench_graph_serves_on_the_port_asked_until_ctrl_c(tmp_path, signame):
    """Ctrl+C, or the SIGTERM a service manager sends, ends the serving with exit 0 and stops the viewer."""
    import signal
    import socket
    import urllib.request

    from cli_helpers import _argv as wb_argv
    from cli_helpers import _env as wb_env

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        wb_argv(
            "--workspace",
            str(tmp_path / "ws"),
            "graph",
            "--set",
            "model.name=cnn",
            "--set",
            "model.input_shape=1,8,8",
            "--set",
            f"port={port}",
        ),
        env=wb_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        lines = []
        for line in proc.stderr:  # the build's progress, then where the graph is served
            lines.append(line)
            if "the graph is at" in line:
                break
        assert any(f"http://127.0.0.1:{port}/" in line and "&token=" in line for line in lines), "".join(
            lines
        )
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/check_health", timeout=30) as reply:
            assert reply.status == 200
        proc.send_signal(getattr(signal, signame))
        # generous: the viewer's shutdown shares two cores with another test
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with socket.socket() as again:  # the viewer stopped with the command: its port is free again
        again.bind(("127.0.0.1", port))
