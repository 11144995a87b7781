"""A loopback worker flooded by local peers without the key: its memory stays bounded and keyed jobs still
run.

Issue #19: 16 peers each sending complete 15 MiB unsigned messages made zmq queue 16 of them per peer in the
worker (3.4 GB). The flood here is bounded (a fixed number of messages, zero-copy on our side) so that a
regression shows as a failed assertion on the worker's peak memory, not as an OOM kill of the test machine.
"""

from __future__ import annotations

import pytest
import zmq
from waiting import wait_until

from workbench.client import WorkerManager
from workbench.protocol.wire import DELIM

pytestmark = pytest.mark.slow

PEERS = 16
MESSAGES = 4  # per peer: about 1 GB offered in all, far over the bound below, yet harmless if it all arrived
PAYLOAD = bytes(15 << 20)
PEAK_LIMIT = 300 << 20


def _peak_rss(pid: int) -> int:
    """The process's high-water mark of resident memory (VmHWM): a peak no polling could miss."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM line")


def test_unkeyed_peers_flooding_complete_messages_neither_grow_the_worker_nor_stall_a_keyed_job(tmp_path):
    # A worker of its own: VmHWM is a lifetime peak, so no earlier test may have raised it.
    manager = WorkerManager(runtime_dir=tmp_path, max_restarts=0, start_timeout=60.0)
    assert manager.start(wait=True), manager.detail
    ctx = zmq.Context()
    peers = []
    try:
        pid = manager.process.pid
        url = manager.client.conn.url("shell")
        for _ in range(PEERS):
            peer = ctx.socket(zmq.DEALER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.setsockopt(zmq.SNDHWM, MESSAGES + 1)
            peer.connect(url)
            peers.append(peer)
        for peer in peers:
            for _ in range(MESSAGES):
                # copy=False: every queued message shares the one payload, so the flood costs this process
                # nothing.
                try:
                    peer.send_multipart(
                        [DELIM, b"0" * 64, PAYLOAD, b"{}", b"{}", b"{}"], copy=False, flags=zmq.NOBLOCK
                    )
                # a peer turned away has nowhere to queue between its retries: it sends less
                except zmq.Again:
                    break

        job = manager.submit("debug.count", {"steps": 3, "delay": 0})
        record = manager.wait_job(job.job_id, timeout=120)

        def flood_dealt_with() -> bool:
            # Either every peer was turned away at the door, or every message was read and refused.
            ping = manager.call("ping_request", timeout=30, channel="control").content
            refused = ping.get("refused_connections", {}).get("shell", 0)
            return refused >= PEERS or ping["rejected"]["shell"] >= PEERS * MESSAGES

        wait_until(flood_dealt_with, 120, "the worker to deal with every flooding peer")
        peak = _peak_rss(pid)
        assert manager.process.poll() is None
    finally:
        for peer in peers:
            peer.close(linger=0)
        ctx.term()
        manager.shutdown(timeout=1.0)
    assert record.state == "done" and record.result["steps_completed"] == 3
    assert peak < PEAK_LIMIT, f"the worker peaked at {peak / 2**20:.0f} MiB against {PEERS} unkeyed peers"
