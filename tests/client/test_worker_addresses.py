"""`python -m workbench.worker --ip ADDRESS` as people type it: IPv6 loopback with or without brackets, stray
spaces, and addresses that cannot be listened on (those exit 2 with one line, never a ZMQError's
traceback)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from waiting import wait_until

from workbench.client import WorkerClient
from workbench.protocol import ConnectionInfo

pytestmark = pytest.mark.slow


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback")


@pytest.mark.parametrize(
    ("typed", "written"),
    [
        pytest.param("::1", "::1", marks=needs_ipv6),
        pytest.param("[::1]", "::1", marks=needs_ipv6),
        ("127.0.0.1 ", "127.0.0.1"),
        (" localhost\t", "localhost"),
    ],
)
def test_a_worker_serves_a_loopback_address_as_typed(tmp_path, typed, written):
    path = tmp_path / "conn.json"
    argv = [sys.executable, "-m", "workbench.worker", "--connection-file", str(path), "--ip", typed]
    worker = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    client = None
    try:
        wait_until(
            lambda: (path.exists() and ConnectionInfo.read(path).bound) or worker.poll() is not None,
            60,
            "the worker's ports",
        )
        assert worker.poll() is None, worker.stdout.read()
        conn = ConnectionInfo.read(path)
        assert conn.ip == written
        assert conn.curve_public_key == "" and conn.plain_password  # loopback: the password admits, no Curve
        client = WorkerClient(conn, heartbeat_interval=0)
        assert client.call("ping_request", channel="control", timeout=30).content["pid"] == worker.pid
    finally:
        if client is not None:
            client.close()
        worker.terminate()
        worker.wait(timeout=30)


@pytest.mark.parametrize(
    ("typed", "words"),
    [
        ("", "the address to listen on is empty"),
        ("  ", "the address to listen on is empty"),
        ("127.0.0.1:5555", "looks like host:port"),
        ("127.0.0.1 0", "has spaces or control characters in it"),
        ("no-such-interface", "cannot listen on no-such-interface"),
    ],
)
def test_a_worker_refuses_an_address_it_cannot_listen_on_in_one_line(tmp_path, typed, words):
    path = tmp_path / "conn.json"
    ConnectionInfo.new().write(path)
    before = json.loads(path.read_text())
    done = subprocess.run(
        [sys.executable, "-m", "workbench.worker", "--connection-file", str(path), "--ip", typed],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("workbench worker: ") and words in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "ZMQError" not in done.stderr
    assert json.loads(path.read_text()) == before  # nothing was bound, nothing rewritten
