"""Metrics throughput over the real protocol, and what streaming metrics every step costs a training loop.

The kernel runs in this process (as in the worker); the receiving client runs in a child process (as the
GUI does), so the two never share a GIL. Goal (issue #2): < 2 % slowdown of a training-like loop that
emits metrics every step, against the same loop emitting none, measured interleaved in this run.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

STEPS = 2000
REPEATS = 9


def receive(conn_path: str) -> None:
    """Child process: count metric rows and messages until told to stop on stdin."""
    from workbench.client import WorkerClient
    from workbench.protocol import ConnectionInfo

    counts = {"messages": 0, "rows": 0}

    def on_message(channel, msg):
        if msg.msg_type == "metrics":
            counts["messages"] += 1
            counts["rows"] += len(msg.content["rows"])

    client = WorkerClient(ConnectionInfo.read(conn_path), on_message, heartbeat_interval=0)
    print("READY" if client.wait_ready(20) else "NOT READY", flush=True)
    for line in sys.stdin:
        if line.strip() == "count":
            print(json.dumps(counts), flush=True)
        else:
            break
    client.close()


def training_loop(ctx, steps: int) -> float:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    start = time.perf_counter()
    for step in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if ctx is not None:
            ctx.metrics(step, {"loss": loss.detach(), "lr": 0.01})
    return time.perf_counter() - start


def main() -> None:
    import torch

    from workbench.protocol import ConnectionInfo
    from workbench.worker.context import TaskContext
    from workbench.worker.kernel import Kernel

    torch.set_num_threads(1)
    kernel = Kernel(ConnectionInfo.new(), tasks={})
    conn_path = Path(tempfile.mkdtemp()) / "bench.json"
    kernel.conn.write(conn_path)
    threading.Thread(target=kernel.serve_forever, daemon=True).start()
    child = subprocess.Popen([sys.executable, __file__, "--receive", str(conn_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "READY"

    def counts() -> dict:
        child.stdin.write("count\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    def emit(msg_type, content, buffers):
        kernel.publish(msg_type, content, buffers=buffers)

    rows = 300_000
    ctx = TaskContext(emit)
    start = time.perf_counter()
    for step in range(rows):
        ctx.metrics(step, {"loss": 0.5})
    ctx.close()
    while counts()["rows"] < rows and time.perf_counter() - start < 60:
        time.sleep(0.01)
    elapsed = time.perf_counter() - start
    got = counts()
    print(f"metrics over the protocol: {got['rows'] / elapsed:,.0f} rows/s delivered to another process "
          f"in {got['messages']} messages ({got['messages'] / elapsed:.1f} messages/s; the cap is 20/s)")

    training_loop(None, 300)  # warm-up
    plain, streamed = [], []
    for _ in range(REPEATS):  # interleaved, so machine noise hits both alike
        plain.append(training_loop(None, STEPS))
        ctx = TaskContext(emit)
        streamed.append(training_loop(ctx, STEPS))
        ctx.close()
    p, s = statistics.median(plain), statistics.median(streamed)
    print(f"training-like loop (MLP, batch 64, 1 thread): no metrics {p * 1e6 / STEPS:.1f} us/step, "
          f"metrics every step {s * 1e6 / STEPS:.1f} us/step (medians of {REPEATS} x {STEPS} steps)")
    print(f"slowdown from streaming metrics every step: {100 * (s / p - 1):+.2f} %  (goal < 2 %)")
    child.stdin.write("stop\n")
    child.stdin.flush()
    child.wait(timeout=10)
    kernel.request_shutdown()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--receive":
        receive(sys.argv[2])
    else:
        main()
