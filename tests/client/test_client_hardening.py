"""WorkerClient facing a hostile worker address: oversized frames are dropped unread, junk is logged
sparingly."""

from __future__ import annotations

import logging
from concurrent.futures import TimeoutError as FutureTimeout

import pytest
import raw_zmtp
import zmq
from waiting import wait_until

from workbench.client import WorkerClient
from workbench.protocol import ConnectionInfo, ProtocolError, Signer, decode
from workbench.protocol.rejections import BURST
from workbench.protocol.wire import MAX_FRAME, MAX_JSON_FRAME

KEY = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("channel", "server_type"), [("shell", b"ROUTER"), ("control", b"ROUTER"), ("iopub", b"PUB")]
)
def test_an_oversized_frame_from_the_worker_address_is_dropped_unread(channel, server_type):
    # Whoever answers on the worker's ports (a worker that died and a squatter that took the port, say) must
    # not make the client hold a gigabyte before the signature is checked.
    servers = {name: raw_zmtp.listen() for name in ("shell", "control", "iopub")}
    conn = ConnectionInfo(key=KEY, **{f"{name}_port": s.getsockname()[1] for name, s in servers.items()})
    client = WorkerClient(conn, heartbeat_interval=0)
    try:
        peer = raw_zmtp.accept(servers[channel], server_type)
        try:
            sent, closed = raw_zmtp.stream_frame(peer, announced=1 << 30, limit=MAX_FRAME + (8 << 20))
        finally:
            peer.close()
        assert closed, (
            f"the client read {sent:,} bytes of a 1 GiB frame on {channel} without dropping the peer"
        )
        assert sent < MAX_FRAME
        assert client.rejected_frames == 0  # never reached the decoder: zmq refused it by its length
    finally:
        client.close()
        for server in servers.values():
            server.close()


def test_a_flood_of_junk_events_is_counted_in_full_and_logged_in_a_few_lines(caplog):
    caplog.set_level(logging.WARNING, logger="workbench.client.client")
    ctx = zmq.Context.instance()
    shell, control, iopub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER), ctx.socket(zmq.XPUB)
    iopub.setsockopt(zmq.SNDHWM, 0)  # queue everything: the test counts every frame arriving
    ports = {
        name: sock.bind_to_random_port("tcp://127.0.0.1")
        for name, sock in (("shell", shell), ("control", control), ("iopub", iopub))
    }
    client = WorkerClient(
        ConnectionInfo(key=KEY, **{f"{n}_port": p for n, p in ports.items()}), heartbeat_interval=0
    )
    flood = 5_000
    try:
        assert iopub.poll(10_000) and iopub.recv() == b"\x01", "the client never subscribed"
        for i in range(flood):
            iopub.send(b"junk %d" % i)
        wait_until(lambda: client.rejected_frames >= flood, 30, "the client to refuse every junk frame")
    finally:
        client.close()
        for sock in (shell, control, iopub):
            sock.close(linger=0)
    assert client.rejected_frames == flood
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rejected")]
    assert 1 <= len(lines) <= 2 * (BURST + 1), lines  # at most two windows' worth, however fast it came
    assert lines[0].startswith("rejected a iopub message from the worker: no <IDS|MSG> delimiter")


def test_a_request_too_big_for_the_worker_fails_here_and_the_client_keeps_working():
    ctx = zmq.Context.instance()
    shell, control, iopub = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUB)
    ports = {
        name: sock.bind_to_random_port("tcp://127.0.0.1")
        for name, sock in (("shell", shell), ("control", control), ("iopub", iopub))
    }
    client = WorkerClient(
        ConnectionInfo(key=KEY, **{f"{n}_port": p for n, p in ports.items()}), heartbeat_interval=0
    )
    try:
        too_big = client.request("kernel_info_request", {"pad": "x" * MAX_JSON_FRAME})
        with pytest.raises(ProtocolError, match="over the .* byte frame limit"):
            too_big.result(timeout=10)
        fine = client.request("kernel_info_request", {})
        assert shell.poll(10_000), "the I/O thread stopped sending after the refused request"
        _, sent = decode(shell.recv_multipart(), Signer(KEY))
        assert sent.msg_id == fine.msg_id  # the next request went out, intact and signed
        with pytest.raises(FutureTimeout):
            fine.result(timeout=0.01)  # nobody answers here; it is simply still waiting
    finally:
        client.close()
        for sock in (shell, control, iopub):
            sock.close(linger=0)
