"""A worker refuses to start unsafely: a weak key in its connection file, or a public address it cannot
encrypt.

Each refusal is a clear message on stderr and exit code 2, before any port is opened.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from waiting import wait_until

from workbench.protocol import ConnectionInfo

pytestmark = pytest.mark.slow

# The worker's own entry point, in a pyzmq that says it has no CurveZMQ (as one built without libsodium).
WITHOUT_CURVE = (
    "import sys, zmq; real = zmq.has; zmq.has = lambda f: False if f == 'curve' else real(f); "
    "from workbench.worker.__main__ import main; sys.exit(main(sys.argv[1:]))"
)


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    # A worker that wrongly starts would serve until killed: the timeout turns that into a failure.
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(
    ("key", "words"), [("", "the HMAC key is empty"), ("abc", "the HMAC key is 3 characters long")]
)
def test_a_worker_refuses_a_connection_file_with_a_weak_key(tmp_path, key, words):
    path = tmp_path / "conn.json"
    path.write_text(json.dumps({"key": key, "ip": "127.0.0.1"}))
    done = _run([sys.executable, "-m", "workbench.worker", "--connection-file", str(path)])
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"workbench worker: {path}: {words}")
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert json.loads(path.read_text()) == {"key": key, "ip": "127.0.0.1"}  # no ports were bound or written


@pytest.mark.parametrize("ip", ["0.0.0.0", "192.0.2.1"])
def test_without_curve_a_worker_refuses_a_non_loopback_address_and_suggests_a_tunnel(tmp_path, ip):
    path = tmp_path / "conn.json"
    ConnectionInfo.new().write(path)
    done = _run([sys.executable, "-c", WITHOUT_CURVE, "--connection-file", str(path), "--ip", ip])
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(
        f"workbench worker: refusing to listen on {ip}: it is not a loopback address"
    )
    assert "ssh -N -L PORT:127.0.0.1:PORT" in done.stderr
    assert not ConnectionInfo.read(path).bound


def test_without_curve_a_loopback_worker_still_starts(tmp_path):
    path = tmp_path / "conn.json"
    ConnectionInfo.new().write(path)
    worker = subprocess.Popen(
        [sys.executable, "-c", WITHOUT_CURVE, "--connection-file", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(
            lambda: ConnectionInfo.read(path).bound or worker.poll() is not None, 60, "the worker's ports"
        )
        assert worker.poll() is None, worker.stdout.read()
        assert ConnectionInfo.read(path).curve_public_key == ""
    finally:
        worker.terminate()
        worker.wait(timeout=30)
