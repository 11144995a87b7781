"""Socket setup shared by worker and client: frame caps hold the same with and without CurveZMQ."""

from __future__ import annotations

import pytest
import zmq

from workbench.protocol.sockets import connect_curve, limit_incoming, serve_curve

CAP = 4096


@pytest.fixture(params=["plain", "curve"])
def pair(request):
    ctx = zmq.Context.instance()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for sock in (server, client):
        sock.setsockopt(zmq.LINGER, 0)
    limit_incoming(server, CAP)
    if request.param == "curve":
        connect_curve([client], serve_curve([server]))
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    yield server, client
    server.close(0)
    client.close(0)


def test_a_frame_of_exactly_the_cap_arrives(pair):
    server, client = pair
    client.send_multipart([b"a" * CAP, b"b" * CAP])
    assert server.poll(10_000)
    assert [len(f) for f in server.recv_multipart()[1:]] == [CAP, CAP]


def test_a_frame_well_over_the_cap_never_arrives(pair):
    server, client = pair
    client.send(b"x" * (2 * CAP))  # (tests/client/raw_zmtp.py shows the sender is cut off unread)
    assert server.poll(500) == 0


def test_a_curve_server_refuses_a_client_without_its_key():
    ctx = zmq.Context.instance()
    server, client = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    for sock in (server, client):
        sock.setsockopt(zmq.LINGER, 0)
    serve_curve([server])
    connect_curve([client], zmq.curve_keypair()[0].decode())  # some other server's key
    port = server.bind_to_random_port("tcp://127.0.0.1")
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        client.send(b"hello")
        assert server.poll(500) == 0
    finally:
        server.close(0)
        client.close(0)
