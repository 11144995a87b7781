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

STEPS = 1000
REPEATS = 21


def receive(conn_path: str) -> None:
    """Child process: count metric rows and messages until told to stop on stdin."""
    from workbench.client import WorkerClient
    from workbench.protocol import ConnectionInfo

    counts = {"messages": 0, "rows": 0}

    def on_message(channel, msg):
        if msg.msg_type == "metrics":
            counts["messages"] += 1
            counts["rows"] += msg.content["count"]

    client = WorkerClient(ConnectionInfo.read(conn_path), on_message, heartbeat_interval=0)
    print("READY" if client.wait_ready(20) else "NOT READY", flush=True)
    for line in sys.stdin:
        if line.strip() == "count":
            print(json.dumps(counts), flush=True)
        else:
            break
    client.close()


def _model(kind: str):
    import torch
    from torch import nn

    if kind == "mlp":  # a very light step (~0.25 ms here): the fixed cost per metrics() call shows most
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), torch.randn(64, 64)
    # a small CNN on 28x28 images, the size of step a real CPU training loop takes
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    return model, torch.randn(64, 1, 28, 28)


def training_loop(ctx, steps: int, kind: str = "mlp") -> float:
    import torch

    torch.manual_seed(0)
    model, x = _model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    y = torch.randint(0, 10, (64,))
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

    for kind, steps in (("mlp", STEPS), ("cnn", STEPS // 10)):
        training_loop(None, 50, kind)  # warm-up
        plain, streamed, ratios = [], [], []
        for i in range(REPEATS):
            # Pairs run back to back, alternating which goes first: this machine's speed drifts over seconds,
            # so the median of per-pair ratios is steadier than a ratio of medians.
            pair = {}
            for which in (("plain", "streamed") if i % 2 else ("streamed", "plain")):
                ctx = TaskContext(emit) if which == "streamed" else None
                pair[which] = training_loop(ctx, steps, kind)
                if ctx is not None:
                    ctx.close()
            plain.append(pair["plain"])
            streamed.append(pair["streamed"])
            ratios.append(pair["streamed"] / pair["plain"])
        p, s = statistics.median(plain), statistics.median(streamed)
        print(f"{kind} loop (batch 64, 1 thread): no metrics {p * 1e6 / steps:.1f} us/step, metrics every step "
              f"{s * 1e6 / steps:.1f} us/step; slowdown {100 * (statistics.median(ratios) - 1):+.2f} % "
              f"(median of {REPEATS} back-to-back pairs; goal < 2 %)")
    child.stdin.write("stop\n")
    child.stdin.flush()
    child.wait(timeout=10)
    kernel.request_shutdown()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--receive":
        receive(sys.argv[2])
    else:
        main()
