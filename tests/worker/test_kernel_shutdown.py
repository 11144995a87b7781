"""A job that finishes after the worker has closed its sockets (past the shutdown grace) drops its reply
quietly instead of raising in the jobs thread."""

from __future__ import annotations

from fake_worker import FakeWorker


def test_a_message_sent_after_the_sockets_closed_is_dropped_not_raised(tmp_path):
    worker = FakeWorker(tmp_path)
    worker.stop()
    assert not worker.thread.is_alive() and worker.kernel.shell.closed
    worker.kernel.publish("status", {"state": "late"})  # raised ZMQError from the closed wake socket before
    assert worker.kernel._outgoing.qsize() >= 1
