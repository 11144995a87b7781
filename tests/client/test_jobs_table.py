"""JobTable: folding a job's events and reply into its record, and failing jobs whose worker died."""

from __future__ import annotations

import threading

from workbench.client.jobs import JobTable
from workbench.protocol import Message, new_message

WORKER = "worker-session"


def _request(task: str = "debug.count") -> Message:
    return new_message("job_request", {"task": task, "spec": {}}, session="client-session")


def _event(req: Message, msg_type: str, content: dict) -> Message:
    return new_message(msg_type, content, session=WORKER, parent=req)


def test_a_job_goes_from_submitted_to_done():
    table = JobTable()
    req = _request()
    added = table.add(req.msg_id, "debug.count", {"steps": 4})
    assert (added.state, added.active, added.spec) == ("submitted", True, {"steps": 4})

    assert table.apply(_event(req, "status", {"state": "queued", "task": "debug.count"})).state == "queued"
    running = table.apply(_event(req, "status", {"state": "running", "run_dir": "/ws/runs/r1"}))
    assert (running.state, running.run_dir) == ("running", "/ws/runs/r1")
    progress = table.apply(
        _event(req, "progress", {"done": 2, "total": 4, "fraction": 0.5, "text": "step 2/4"})
    )
    assert (progress.fraction, progress.text, progress.state) == (0.5, "step 2/4", "running")
    # a status without run_dir keeps the one we know
    assert table.apply(_event(req, "status", {"state": "running"})).run_dir == "/ws/runs/r1"

    reply = {"status": "done", "run_dir": "/ws/runs/r1", "steps_completed": 4, "elapsed_s": 0.1}
    done = table.apply(_event(req, "job_reply", reply))
    assert done.state == "done" and not done.active
    assert done.fraction == 1.0 and done.result == reply and done.error is None
    assert done.finished is not None and done.finished >= done.submitted
    assert table.get(req.msg_id) == done
    assert table.active() == []


def test_progress_alone_marks_a_job_running():
    table = JobTable()
    req = _request()
    table.add(req.msg_id, "debug.count")
    record = table.apply(_event(req, "progress", {"done": 1, "total": None, "fraction": None, "text": ""}))
    assert record.state == "running" and record.fraction is None


def test_late_events_after_the_finish_change_nothing():
    table = JobTable()
    req = _request()
    table.add(req.msg_id, "debug.sleep")
    table.apply(_event(req, "status", {"state": "running"}))
    cancelled = table.apply(
        _event(
            req,
            "job_reply",
            {"status": "cancelled", "run_dir": None, "error": {"type": "JobCancelled", "message": "stop"}},
        )
    )
    assert cancelled.state == "cancelled" and cancelled.error_message == "stop"
    for late in (
        _event(req, "progress", {"done": 9, "total": 10, "fraction": 0.9, "text": "late"}),
        _event(req, "status", {"state": "running", "run_dir": "/elsewhere"}),
        _event(req, "status", {"state": "queued"}),
        _event(req, "job_reply", {"status": "done", "run_dir": "/elsewhere"}),
    ):
        assert table.apply(late) is None
    assert table.get(req.msg_id) == cancelled


def test_events_of_unknown_jobs_and_other_message_types_are_ignored():
    table = JobTable()
    req = _request()
    record = table.add(req.msg_id, "debug.count")
    stranger = _request()
    assert table.apply(_event(stranger, "job_reply", {"status": "done"})) is None
    assert table.apply(new_message("status", {"state": "idle"}, session=WORKER)) is None  # no parent
    assert table.apply(_event(req, "metrics", {"series": [], "count": 0})) is None
    assert table.apply(_event(req, "status", {"state": "exploded"})).state == "submitted"
    assert table.get(req.msg_id).state == record.state == "submitted"
    assert table.get(stranger.msg_id) is None


def test_a_reply_with_an_unknown_status_counts_as_failed():
    table = JobTable()
    req = _request()
    table.add(req.msg_id, "debug.count")
    record = table.apply(_event(req, "job_reply", {"status": "exploded"}))
    assert record.state == "failed" and not record.active
    req2 = _request()
    table.add(req2.msg_id, "debug.count")
    record = table.apply(_event(req2, "job_reply", {}))
    assert record.state == "failed"


def test_a_failed_reply_keeps_its_error():
    table = JobTable()
    req = _request()
    table.add(req.msg_id, "debug.count")
    error = {"type": "UsageError", "message": "no task named 'x'; did you mean 'debug.count'?"}
    record = table.apply(_event(req, "job_reply", {"status": "failed", "run_dir": None, "error": error}))
    assert record.state == "failed" and record.error == error and record.fraction is None
    assert "did you mean" in record.error_message


def test_fail_active_marks_only_unfinished_jobs():
    table = JobTable()
    reqs = {name: _request() for name in ("submitted", "queued", "running", "done", "cancelled")}
    for req in reqs.values():
        table.add(req.msg_id, "debug.count")
    table.apply(_event(reqs["queued"], "status", {"state": "queued"}))
    table.apply(_event(reqs["running"], "status", {"state": "running"}))
    table.apply(_event(reqs["done"], "job_reply", {"status": "done"}))
    table.apply(_event(reqs["cancelled"], "job_reply", {"status": "cancelled"}))
    before = {name: table.get(req.msg_id) for name, req in reqs.items()}

    failed = table.fail_active("worker exited: SIGKILL")
    assert {r.job_id for r in failed} == {reqs[n].msg_id for n in ("submitted", "queued", "running")}
    for record in failed:
        assert record.state == "failed" and record.finished is not None
        assert record.error == {"type": "WorkerDied", "message": "worker exited: SIGKILL"}
        assert table.get(record.job_id) == record
    assert table.get(reqs["done"].msg_id) == before["done"]
    assert table.get(reqs["cancelled"].msg_id) == before["cancelled"]
    assert table.active() == []
    assert table.fail_active("again") == []  # nothing left to fail
    # the worker's own reply, if it ever arrives, does not revive a job failed by a crash
    assert table.apply(_event(reqs["running"], "job_reply", {"status": "done"})) is None


def test_fail_active_with_an_error_type():
    table = JobTable()
    req = _request()
    table.add(req.msg_id, "debug.count")
    (record,) = table.fail_active("worker restarted by the user", error_type="WorkerRestarted")
    assert (
        record.error["type"] == "WorkerRestarted" and record.error_message == "worker restarted by the user"
    )


def test_records_handed_out_are_snapshots():
    table = JobTable()
    req = _request()
    snapshot = table.add(req.msg_id, "debug.count", {"steps": 1})
    snapshot.state = "done"
    table.get(req.msg_id).text = "changed"
    assert table.get(req.msg_id).state == "submitted" and table.get(req.msg_id).text == ""
    assert [r.job_id for r in table.all()] == [req.msg_id]


def test_concurrent_updates_from_many_threads():
    table = JobTable()
    reqs = [_request() for _ in range(50)]
    for req in reqs:
        table.add(req.msg_id, "debug.count")

    def drive(chunk):
        for req in chunk:
            for i in range(20):
                table.apply(_event(req, "progress", {"done": i, "total": 20, "fraction": i / 20, "text": ""}))
            table.apply(_event(req, "job_reply", {"status": "done"}))

    threads = [threading.Thread(target=drive, args=(reqs[i::5],)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.state == "done" and r.fraction == 1.0 for r in table.all())
