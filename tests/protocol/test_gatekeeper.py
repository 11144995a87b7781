"""The gatekeeper admits only peers presenting the connection password, reads nothing from the rest, and
counts them."""

from __future__ import annotations

import logging

import pytest
import zmq
from waiting import wait_until

from workbench.protocol.gatekeeper import Gatekeeper
from workbench.protocol.sockets import connect_plain, serve_plain

PASSWORD = "s" * 64


@pytest.fixture
def door():
    # A context of its own: libzmq asks the one ZAP handler of a context about every PLAIN socket in it.
    ctx = zmq.Context()
    gatekeeper = Gatekeeper(ctx, logging.getLogger("test.gatekeeper"), PASSWORD)
    server = ctx.socket(zmq.ROUTER)
    server.setsockopt(zmq.LINGER, 0)
    gatekeeper.guard("shell", server)
    serve_plain([server])
    port = server.bind_to_random_port("tcp://127.0.0.1")
    gatekeeper.start()
    clients = []

    def connect(password: str | None) -> zmq.Socket:
        client = ctx.socket(zmq.DEALER)
        clients.append(client)  # closed at the end whatever happens next, or the context would never end
        client.setsockopt(zmq.LINGER, 0)
        if password is not None:
            connect_plain([client], password)
        client.connect(f"tcp://127.0.0.1:{port}")
        return client

    yield server, gatekeeper, connect
    gatekeeper.close()
    for sock in (server, *clients):
        sock.close(linger=0)
    ctx.term()


def test_a_peer_with_the_password_is_read(door):
    server, gatekeeper, connect = door
    connect(PASSWORD).send(b"hello")
    assert server.poll(10_000)
    assert server.recv_multipart()[1:] == [b"hello"]
    assert gatekeeper.refused() == {"shell": 0}


@pytest.mark.parametrize("password", [None, "s" * 63, "t" * 64])  # None: no PLAIN at all
def test_a_peer_without_the_password_is_refused_unread_and_counted(door, password, caplog):
    caplog.set_level(logging.WARNING, logger="test.gatekeeper")
    server, gatekeeper, connect = door
    outsider = connect(password)
    try:
        outsider.send(b"let me in", zmq.NOBLOCK)
    except zmq.Again:  # turned away before it could queue anything: just as good
        pass
    wait_until(lambda: gatekeeper.refused()["shell"] > 0, 10, "the gatekeeper to refuse the peer")
    connect(PASSWORD).send(b"hello")  # a keyed peer after it: the door stays open to it
    assert server.poll(10_000)
    assert server.recv_multipart()[1:] == [b"hello"]
    assert server.poll(200) == 0  # and the outsider's message never arrived
    assert any(
        r.getMessage().startswith("rejected a connection: ") and r.getMessage().endswith("(shell channel)")
        for r in caplog.records
    )


def test_without_a_password_the_gatekeeper_only_counts():
    # Off loopback Curve admits by its server key: no ZAP handler, so libzmq asks nobody about Curve peers.
    ctx = zmq.Context()
    try:
        gatekeeper = Gatekeeper(ctx, logging.getLogger("test.gatekeeper"))
        other = ctx.socket(zmq.REP)
        other.bind("inproc://zeromq.zap.01")  # the endpoint is free: the gatekeeper did not take it
        other.close(linger=0)
        gatekeeper.close()
    finally:
        ctx.term()
