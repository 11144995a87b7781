"""TaskContext batching and throttling, and run_task's outcomes, with a recording emit (no worker process)."""

from __future__ import annotations

import math
import threading
import time

from workbench.errors import JobError
from workbench.protocol import Signer, decode, encode, new_message
from workbench.protocol.metrics import decode_metrics, metric_rows
from workbench.runs import Run, RunStore
from workbench.worker.context import TaskContext
from workbench.worker.registry import TaskInfo
from workbench.worker.runner import run_task


class Recorder:
    """A thread-safe emit: the flusher thread and the task thread both call it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.messages: list[tuple[str, dict, list]] = []

    def __call__(self, msg_type: str, content: dict, buffers: list) -> None:
        with self.lock:
            self.messages.append((msg_type, content, list(buffers)))

    def of(self, msg_type: str) -> list[dict]:
        with self.lock:
            return [c for t, c, _ in self.messages if t == msg_type]

    def metric_messages(self) -> list[tuple[dict, list]]:
        with self.lock:
            return [(c, b) for t, c, b in self.messages if t == "metrics"]

    def full_rows(self) -> list[tuple]:
        """(step, name, value, time) in delivery order; within a message, by step (names in first-seen
        order)."""
        rows = []
        for content, buffers in self.metric_messages():
            rows.extend(sorted(metric_rows(content, buffers), key=lambda r: r[0]))
        return rows

    def rows(self) -> list[tuple]:
        return [r[:3] for r in self.full_rows()]


def _task(fn, name: str = "test.task") -> TaskInfo:
    return TaskInfo(name, fn, "job", None, False, "")


# -- metrics -----------------------------------------------------------------------------------------


def test_ten_thousand_metrics_calls_are_batched_and_delivered_once_in_order():
    rec = Recorder()
    started = time.monotonic()
    ctx = TaskContext(rec)
    for step in range(10_000):
        ctx.metrics(step, {"loss": 1.0 / (step + 1), "acc": step % 7})
    during = len(rec.of("metrics"))
    ctx.close()
    elapsed = time.monotonic() - started
    sent = len(rec.of("metrics"))
    assert sent <= elapsed * 20 + 2, f"{sent} metrics messages in {elapsed:.2f} s"
    assert sent < 10_000 / 50 and during <= sent
    expected = [(s, n, v) for s in range(10_000) for n, v in (("loss", 1.0 / (s + 1)), ("acc", float(s % 7)))]
    assert rec.rows() == expected
    # each row has a wall-clock time
    assert all(isinstance(r[3], float) and r[3] > 1e9 for r in rec.full_rows())


def test_a_slow_loop_gets_each_batch_within_a_fraction_of_a_second():
    rec = Recorder()
    ctx = TaskContext(rec)
    try:
        ctx.metrics(0, {"loss": 1.0})
        deadline = time.monotonic() + 2.0  # no further metrics() call: the flusher thread must send it
        while not rec.of("metrics") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rec.rows() == [(0, "loss", 1.0)]
    finally:
        ctx.close()
    assert rec.rows() == [(0, "loss", 1.0)]  # close() does not send it twice


def test_non_finite_metric_values_travel_as_they_are():
    rec = Recorder()
    ctx = TaskContext(rec)
    ctx.metrics(3, {"loss": float("nan"), "up": float("inf"), "down": -math.inf, "ok": 0.25})
    ctx.close()
    ((content, buffers),) = rec.metric_messages()
    # Column buffers, not JSON numbers: the wire (which refuses bare NaN in JSON) carries them unchanged.
    signer = Signer("k")
    _, msg = decode(encode(new_message("metrics", content, session="s", buffers=buffers), signer), signer)
    values = {name: float(v[0]) for name, (_, v, _) in decode_metrics(msg.content, msg.buffers).items()}
    assert math.isnan(values["loss"]) and values["up"] == math.inf and values["down"] == -math.inf
    assert values["ok"] == 0.25


def test_close_with_nothing_pending_sends_nothing():
    rec = Recorder()
    ctx = TaskContext(rec)
    ctx.close()
    assert rec.of("metrics") == []


class _SlowFlusherRun(Run):
    """A real run whose metrics write is slow when the background flusher does it (a busy disk)."""

    entered: threading.Event
    release: threading.Event

    def log_metrics(self, rows):
        if threading.current_thread().name == "metrics-flusher":
            self.entered.set()
            self.release.wait(2.0)
        super().log_metrics(rows)


def test_batches_stay_in_order_when_the_flusher_thread_is_slow(tmp_path):
    # The flusher thread takes a batch, then stalls writing it; a later flush must not overtake it.
    RunStore(tmp_path).create_run("debug", {}, task="debug.count").close()
    (run_dir,) = (tmp_path / "runs").iterdir()
    run = _SlowFlusherRun(run_dir)
    run.entered, run.release = threading.Event(), threading.Event()
    rec = Recorder()
    ctx = TaskContext(rec, run=run)
    try:
        ctx.metrics(0, {"loss": 1.0})
        assert run.entered.wait(2.0), "the flusher thread never flushed"
        time.sleep(0.06)  # the next metrics() call is due a flush of its own
        ctx.metrics(1, {"loss": 0.5})
        run.release.set()
    finally:
        run.release.set()
        ctx.close()
    try:
        assert run.read_metrics() == {"loss": ([0, 1], [1.0, 0.5])}  # stored once each
    finally:
        run.close()
    assert [r[0] for r in rec.rows()] == [0, 1]


# -- progress ----------------------------------------------------------------------------------------


def test_progress_is_throttled_but_the_final_one_is_always_sent():
    rec = Recorder()
    ctx = TaskContext(rec)
    started = time.monotonic()
    for done in range(1, 5001):
        ctx.progress(done, 5000, f"step {done}")
    elapsed = time.monotonic() - started
    ctx.close()
    sent = rec.of("progress")
    assert len(sent) <= elapsed * 10 + 2, f"{len(sent)} progress messages in {elapsed:.2f} s"
    assert sent[0]["done"] == 1  # the first one is not held back
    assert sent[-1] == {"done": 5000, "total": 5000, "fraction": 1.0, "text": "step 5000"}
    assert [c["done"] for c in sent] == sorted(c["done"] for c in sent)


def test_final_progress_is_sent_even_right_after_another():
    rec = Recorder()
    ctx = TaskContext(rec)
    ctx.progress(1, 3)
    ctx.progress(2, 3)  # throttled
    ctx.progress(3, 3)  # finished: never throttled
    ctx.progress(4, 3, force=False)  # past the end still counts as finished
    ctx.close()
    assert [c["done"] for c in rec.of("progress")] == [1, 3, 4]
    ctx2 = TaskContext(rec)
    ctx2.progress(1, None)
    ctx2.progress(2, None, force=True)
    ctx2.close()
    assert [(c["done"], c["fraction"]) for c in rec.of("progress")[3:]] == [(1, None), (2, None)]


# -- run_task ----------------------------------------------------------------------------------------


def test_run_task_honours_a_stop_between_yields():
    stop = threading.Event()
    steps: list[int] = []
    closed = threading.Event()

    def forever(spec, ctx):
        try:
            for step in range(1_000_000):
                steps.append(step)
                if step == 3:
                    stop.set()  # as if the user pressed Cancel during step 3
                yield
        finally:
            closed.set()

    rec = Recorder()
    result = run_task(_task(forever), {}, emit=rec, stop_event=stop)
    assert result["status"] == "cancelled"
    assert result["error"]["type"] == "JobCancelled"
    assert steps == [0, 1, 2, 3]  # stopped at the first boundary after the request
    assert closed.is_set()  # the generator was closed, so its finally blocks ran
    assert rec.of("status")[-1]["state"] == "cancelled"


def test_run_task_cancel_from_another_thread_is_prompt():
    stop = threading.Event()

    steps_after_stop = []

    def slow(spec, ctx):
        while True:
            time.sleep(0.01)
            if stop.is_set():
                steps_after_stop.append(1)
            yield

    timer = threading.Timer(0.1, stop.set)
    timer.start()
    result = run_task(_task(slow), {}, emit=Recorder(), stop_event=stop)
    timer.join()
    assert result["status"] == "cancelled"
    # Prompt in steps, not seconds (shared machines): the step that saw the request is the last one.
    assert len(steps_after_stop) <= 1


def test_run_task_job_error_fails_without_traceback():
    def fails(spec, ctx):
        yield
        raise JobError("the dataset folder is empty")

    rec = Recorder()
    result = run_task(_task(fails), {}, emit=rec)
    assert result["status"] == "failed"
    assert result["error"] == {"type": "JobError", "message": "the dataset folder is empty"}
    assert "traceback" not in result
    assert rec.of("status")[-1] == {"state": "failed", "error": result["error"]}


def test_run_task_unexpected_exception_fails_with_traceback():
    def buggy(spec, ctx):
        ctx.metrics(0, {"loss": 1.0})
        yield
        raise RuntimeError("index out of range in layer 3")

    rec = Recorder()
    result = run_task(_task(buggy), {}, emit=rec)
    assert result["status"] == "failed"
    assert result["error"] == {"type": "RuntimeError", "message": "index out of range in layer 3"}
    assert "Traceback" in result["traceback"] and "buggy" in result["traceback"]
    assert rec.rows() == [(0, "loss", 1.0)]  # metrics recorded before the failure are not lost


def test_run_task_plain_function_and_generator_results():
    def plain(spec, ctx):
        return {"answer": spec["x"] * 2}

    def gen(spec, ctx):
        yield
        return 7

    assert run_task(_task(plain), {"x": 21}, emit=Recorder())["answer"] == 42
    result = run_task(_task(gen), {}, emit=Recorder())
    assert result["status"] == "done" and result["value"] == 7 and result["run_dir"] is None


def test_run_task_with_a_workspace_writes_the_run(tmp_path):
    def counted(spec, ctx):
        for step in range(3):
            ctx.metrics(step, {"v": step})
            yield
        return {"steps": 3}

    info = TaskInfo("test.counted", counted, "job", None, True, "")
    rec = Recorder()
    result = run_task(info, {"steps": 3}, emit=rec, workspace=tmp_path)
    assert result["status"] == "done" and result["steps"] == 3
    with Run(result["run_dir"]) as run:
        assert run.status == "done"
        assert run.read_report()["steps"] == 3
    assert rec.of("status")[0] == {"state": "running", "run_dir": result["run_dir"]}
