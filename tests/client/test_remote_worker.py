"""A real worker bound beyond loopback: every channel is CurveZMQ, so only holders of the connection file get
in.

The worker binds this machine's own non-loopback address (found without sending a packet) or, failing
that, 0.0.0.0 reached through 127.0.0.1; nothing here connects anywhere but this machine.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading

import pytest
import zmq
from waiting import wait_until

from workbench.client import WorkerClient, WorkerManager
from workbench.protocol import ConnectionInfo, Signer, encode, new_message
from workbench.protocol.metrics import metric_rows

pytestmark = pytest.mark.slow


def _own_address() -> tuple[str, str]:
    """(address to bind, address to connect to). The wildcard is not loopback, so the worker must serve it
    with CurveZMQ, exactly as on a LAN address; the tests then reach it through 127.0.0.1, so no test traffic
    ever leaves the loopback range."""
    return "0.0.0.0", "127.0.0.1"


BIND, CONNECT = _own_address()


@pytest.fixture(scope="module")
def remote(tmp_path_factory):
    manager = WorkerManager(
        command=[sys.executable, "-m", "workbench.worker", "--ip", BIND],
        runtime_dir=tmp_path_factory.mktemp("remote-runtime"),
        max_restarts=0,
        start_timeout=30.0,
    )
    heard: list = []
    lock = threading.Lock()

    def listen(kind, payload):
        if kind == "message":
            with lock:
                heard.append(payload)

    manager.add_listener(listen)
    try:
        assert manager.start(wait=True), manager.detail
        manager.heard = lambda: list(heard)
        yield manager
    finally:
        manager.shutdown(timeout=1.0)


def _url(conn: ConnectionInfo, channel: str) -> str:
    return f"tcp://{CONNECT}:{getattr(conn, f'{channel}_port')}"


def _connection_file(manager: WorkerManager):
    return next(manager.runtime_dir.glob("worker-*.json"))


def test_the_connection_file_holds_the_public_key_and_no_secret(remote):
    path = _connection_file(remote)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(path.read_text())
    assert set(data) == {
        "key",
        "ip",
        "transport",
        "shell_port",
        "control_port",
        "iopub_port",
        "pid",
        "curve_public_key",
        "plain_password",
    }
    assert data["ip"] == BIND and len(data["curve_public_key"]) == 40
    assert data["plain_password"] == ""  # off loopback the Curve server key admits, not a password
    assert remote.client.conn.curve_public_key == data["curve_public_key"]


def test_a_curve_client_with_the_server_key_works_end_to_end(remote, tmp_path):
    ping = remote.call("ping_request", timeout=10, channel="control")
    assert ping.content["pid"] == remote.process.pid
    job = remote.submit("debug.count", {"steps": 5, "delay": 0}, workspace=tmp_path)
    record = remote.wait_job(job.job_id, timeout=30)
    assert record.state == "done" and record.result["steps_completed"] == 5
    metrics = [m for m in remote.heard() if m.parent_id == job.job_id and m.msg_type == "metrics"]
    steps = sorted(
        step for m in metrics for step, name, _, _ in metric_rows(m.content, m.buffers) if name == "value"
    )
    assert steps == [0, 1, 2, 3, 4]  # events arrived, decrypted, verified, with their buffers


def test_a_plain_peer_hears_nothing_and_is_not_heard_even_with_the_hmac_key(remote, tmp_path):
    conn = remote.client.conn
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    dealer = ctx.socket(zmq.DEALER)
    for sock, channel in ((sub, "iopub"), (dealer, "control")):
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(_url(conn, channel))
    before = remote.call("ping_request", timeout=10, channel="control").content["rejected"]
    try:
        # Signed with the real session key, but outside Curve: it must never reach the worker's code. A DEALER
        # whose handshake failed may have no pipe left to queue in, and then a blocking send waits forever.
        try:
            dealer.send_multipart(
                encode(new_message("shutdown_request", {}, session="eavesdropper"), Signer(conn.key)),
                flags=zmq.NOBLOCK,
            )
        except zmq.Again:
            pass  # not even queued: it cannot reach the worker either
        # Meanwhile the worker publishes plenty: a job's progress and metrics, and a status per heartbeat.
        job = remote.submit("debug.count", {"steps": 20, "delay": 0.01}, workspace=tmp_path)
        assert remote.wait_job(job.job_id, timeout=30).state == "done"
        wait_until(
            lambda: sum(m.parent_id == job.job_id for m in remote.heard()) >= 3, 10, "the job's events"
        )
        assert sub.poll(300) == 0, f"a plain subscriber read an event: {sub.recv_multipart()}"
        assert dealer.poll(0) == 0
    finally:
        sub.close()
        dealer.close()
    assert remote.process.poll() is None and remote.state == "ready"
    after = remote.call("ping_request", timeout=10, channel="control").content["rejected"]
    assert after == before  # not even rejected: the handshake failed before any message was read


def test_a_client_with_the_wrong_server_key_gets_nothing(remote):
    conn = remote.client.conn
    impostor_key = zmq.curve_keypair()[0].decode()
    wrong = ConnectionInfo(
        key=conn.key,
        ip=CONNECT,
        shell_port=conn.shell_port,
        control_port=conn.control_port,
        iopub_port=conn.iopub_port,
        curve_public_key=impostor_key,
    )
    client = WorkerClient(wrong, heartbeat_interval=0.1)
    try:
        assert not client.wait_ready(1.0)
        assert client.rejected_frames == 0
    finally:
        client.close()
    assert remote.call("ping_request", timeout=10, channel="control").content["status"] == "ok"
