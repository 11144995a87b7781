"""A real worker facing peers without the session key: wrongly signed requests and raw garbage frames."""

from __future__ import annotations

import threading
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
import zmq
from waiting import wait_until

from workbench.client import WorkerClient, WorkerManager
from workbench.protocol import ConnectionInfo, Signer, encode, new_message
from workbench.protocol.wire import DELIM

pytestmark = pytest.mark.slow




@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    manager = WorkerManager(runtime_dir=tmp_path_factory.mktemp("hostile-runtime"), max_restarts=0,
                            start_timeout=30.0)
    messages: list = []
    lock = threading.Lock()

    def listen(kind, payload):
        if kind == "message":
            with lock:
                messages.append(payload)

    manager.add_listener(listen)
    try:
        assert manager.start(wait=True), manager.detail
        manager.heard = lambda: list(messages)  # what the legitimate client received, for the tests
        yield manager
    finally:
        manager.shutdown(timeout=1.0)


def _still_serving(manager: WorkerManager, pid: int) -> None:
    assert manager.state == "ready" and manager.process.poll() is None
    ping = manager.call("ping_request", timeout=5, channel="control")
    assert ping.content["pid"] == pid and ping.content["jobs"] == []
    assert manager.call("kernel_info_request", timeout=5).content["status"] == "ok"
    job = manager.submit("debug.count", {"steps": 2, "delay": 0})
    record = manager.wait_job(job.job_id, timeout=10)
    assert record.state == "done" and record.result["steps_completed"] == 2


def _stderr(manager: WorkerManager) -> str:
    return manager.stderr_path.read_text(errors="replace")


def test_a_client_with_the_wrong_key_gets_no_replies_and_runs_nothing(worker):
    pid = worker.process.pid
    real = worker.client.conn
    wrong = ConnectionInfo(key="not the session key", ip=real.ip, shell_port=real.shell_port,
                           control_port=real.control_port, iopub_port=real.iopub_port)
    heard: list = []
    bad = WorkerClient(wrong, lambda channel, msg: heard.append((channel, msg)), heartbeat_interval=0.05)
    try:
        job = bad.submit_job("debug.count", {"steps": 1000, "delay": 0.01})
        bad.send("shutdown_request", channel="control")
        bad.send("cancel_request", {"job_id": None}, channel="control")
        with pytest.raises(FutureTimeout):
            bad.call("kernel_info_request", timeout=1.0)
        with pytest.raises(FutureTimeout):
            bad.call("ping_request", channel="control", timeout=0.5)
        assert not bad.wait_ready(0.5)
        # The real client's heartbeat makes the worker publish; the bad client must reject all of it.
        wait_until(lambda: bad.rejected_frames > 0, 5, "the bad client to see (and reject) an event")
        assert heard == []
    finally:
        bad.close()
    assert not any(m.parent_id == job.msg_id for m in worker.heard())
    _still_serving(worker, pid)  # no job started, no shutdown, no cancel took effect
    assert "bad signature" in _stderr(worker)


GARBAGE = [
    [b""],
    [b"hello"],
    [DELIM],
    [DELIM, b"sig"],
    [DELIM, b"0" * 64, b"{}", b"{}", b"{}", b"{}"],
    [DELIM, b"0" * 64, b"[" * 100_000, b"{}", b"{}", b"{}"],
    [b"\x00" * (1 << 20)],
    [b""] * 200,
    [DELIM] * 10,
    [b"\xff\xfe<IDS|MSG>", b"\x00", b"\x80" * 3],
]


def _forged(key: str) -> list[bytes]:
    return encode(new_message("shutdown_request", {}, session="intruder"), Signer(key))


@pytest.mark.parametrize("channel", ["shell", "control"])
def test_garbage_frames_get_no_reply_and_the_worker_keeps_answering(worker, channel):
    pid = worker.process.pid
    real = worker.client.conn
    tampered = encode(new_message("kernel_info_request", {"x": 1}, session="intruder"), Signer(real.key))
    tampered[-1] = tampered[-1].replace(b"1", b"2")
    sent = [*GARBAGE, _forged("guessed key"), tampered]
    marker = f"rejected a {channel} message"
    before = _stderr(worker).count(marker)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(real.url(channel))
    try:
        for frames in sent:
            sock.send_multipart(frames)
        # every one of them reached the worker and was refused (and logged), none was answered
        wait_until(lambda: _stderr(worker).count(marker) >= before + len(sent), 10, "every rejection")
        assert sock.poll(300) == 0, f"the worker answered garbage on {channel}: {sock.recv_multipart()}"
    finally:
        sock.close()
    assert _stderr(worker).count(marker) == before + len(sent)
    _still_serving(worker, pid)


@pytest.mark.parametrize("channel", ["shell", "control"])
def test_a_signed_but_absurdly_nested_message_is_refused_and_the_worker_keeps_answering(worker, channel):
    # Even a peer holding the key must not be able to kill the shell loop or the control thread.
    pid = worker.process.pid
    conn = worker.client.conn
    signer = Signer(conn.key)
    parts = encode(new_message("ping_request", {}, session="peer"), signer)[2:5] + [b"[" * 200_000]
    marker = f"rejected a {channel} message"
    before = _stderr(worker).count(marker)
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(conn.url(channel))
    try:
        sock.send_multipart([DELIM, signer.sign(parts), *parts])
        wait_until(lambda: _stderr(worker).count(marker) > before or "Traceback" in _stderr(worker), 10,
                   "the worker to read it")
        assert "Traceback" not in _stderr(worker)
        assert sock.poll(0) == 0
    finally:
        sock.close()
    _still_serving(worker, pid)
