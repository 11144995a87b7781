"""Metrics throughput over the real protocol, what streaming metrics every step costs a training loop (goal,
issue #2: < 2 % slowdown, pairs interleaved in this run), and what unsigned 1 GiB frames cost a real worker's
memory (issue #7: no more than the frame cap; `--frames` runs only that part, in seconds).
"""

from __future__ import annotations

import json
import socket
import statistics
import struct
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
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )
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
    # The kernel runs in this process (as in the worker); the receiving client runs in a child process (as
    # the GUI does), so the two never share a GIL.
    import torch

    from workbench.protocol import ConnectionInfo
    from workbench.worker.context import TaskContext
    from workbench.worker.kernel import Kernel

    torch.set_num_threads(1)
    kernel = Kernel(ConnectionInfo.new(), tasks={})
    conn_path = Path(tempfile.mkdtemp()) / "bench.json"
    kernel.conn.write(conn_path)
    threading.Thread(target=kernel.serve_forever, daemon=True).start()
    child = subprocess.Popen(
        [sys.executable, __file__, "--receive", str(conn_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
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
    print(
        f"metrics over the protocol: {got['rows'] / elapsed:,.0f} rows/s delivered to another process "
        f"in {got['messages']} messages ({got['messages'] / elapsed:.1f} messages/s; the cap is 20/s)"
    )

    for kind, steps in (("mlp", STEPS), ("cnn", STEPS // 10)):
        training_loop(None, 50, kind)  # warm-up
        plain, streamed, ratios = [], [], []
        for i in range(REPEATS):
            # Pairs run back to back, alternating which goes first: this machine's speed drifts over seconds,
            # so the median of per-pair ratios is steadier than a ratio of medians.
            pair = {}
            for which in ("plain", "streamed") if i % 2 else ("streamed", "plain"):
                ctx = TaskContext(emit) if which == "streamed" else None
                pair[which] = training_loop(ctx, steps, kind)
                if ctx is not None:
                    ctx.close()
            plain.append(pair["plain"])
            streamed.append(pair["streamed"])
            ratios.append(pair["streamed"] / pair["plain"])
        p, s = statistics.median(plain), statistics.median(streamed)
        print(
            f"{kind} loop (batch 64, 1 thread): no metrics {p * 1e6 / steps:.1f} us/step, metrics every step "
            f"{s * 1e6 / steps:.1f} us/step; slowdown {100 * (statistics.median(ratios) - 1):+.2f} % "
            f"(median of {REPEATS} back-to-back pairs; goal < 2 %)"
        )
    child.stdin.write("stop\n")
    child.stdin.flush()
    child.wait(timeout=10)
    kernel.request_shutdown()


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def _zmtp_peer(port: int) -> socket.socket:
    """A TCP connection that has done a ZMTP 3.0 NULL handshake as a DEALER: no key, no signature, nothing
    else."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"\xff" + b"\x00" * 8 + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
    ready = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
    sock.sendall(b"\x04" + bytes([len(ready)]) + ready)
    return sock


def _stream(sock: socket.socket, size: int, more: bool = False) -> tuple[int, bool]:
    """Announce one frame of `size` bytes and stream zeros lazily (never a 1 GB buffer here); (sent,
    dropped)."""
    chunk = bytes(1 << 20)
    sent = 0
    try:
        sock.sendall(bytes([2 | int(more)]) + struct.pack(">Q", size))
        while sent < size:
            n = min(len(chunk), size - sent)
            sock.sendall(chunk[:n])
            sent += n
    except (ConnectionResetError, BrokenPipeError):
        return sent, True
    return sent, False


def oversized_frames() -> None:
    """A real worker subprocess; three connections each send one unsigned 1 GiB frame; its memory before and
    after."""
    from workbench.client import WorkerClient
    from workbench.protocol import ConnectionInfo
    from workbench.protocol.wire import MAX_REQUEST_FRAME

    conn_path = Path(tempfile.mkdtemp()) / "worker.json"
    ConnectionInfo.new().write(conn_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "workbench.worker", "--connection-file", str(conn_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not ConnectionInfo.read(conn_path).bound:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the worker did not start")
            time.sleep(0.05)
        conn = ConnectionInfo.read(conn_path)
        client = WorkerClient(conn, heartbeat_interval=0)
        # fully started: what it holds now is its own
        assert client.wait_ready(30), "the worker did not answer"
        client.close()
        time.sleep(0.5)
        before = _status_kib(worker.pid, "VmRSS")
        peers, results = [], []
        for _ in range(3):  # three connections held open together, as in the reported attack
            peers.append(_zmtp_peer(conn.shell_port))
            results.append(_stream(peers[-1], 1 << 30))
        time.sleep(1.0)  # let the worker read (or refuse) whatever is in flight
        after, peak = _status_kib(worker.pid, "VmRSS"), _status_kib(worker.pid, "VmHWM")
        for peer in peers:
            peer.close()
        accepted = max(sent for sent, _ in results)
        dropped = sum(d for _, d in results)
        print(
            "oversized frames: 3 unsigned 1 GiB frames on the shell socket; the largest frame an "
            f"unauthenticated peer can make the worker hold is {MAX_REQUEST_FRAME / 2**20:.0f} MiB (the "
            f"cap); {dropped}/3 peers were dropped, each after at most {accepted / 2**20:.1f} MiB had left "
            "the sender (socket buffers)"
        )
        print(
            f"worker memory: RSS {before / 1024:.0f} MB before, {after / 1024:.0f} MB after "
            f"(after/before {after / before:.2f}x; peak {peak / 1024:.0f} MB, {peak / before:.2f}x)"
        )

        # Not bounded by a per-frame cap: zmq keeps the frames of an unfinished multipart message until its
        # last one arrives (docs/protocol.md). Measured so the gap stays visible, on loopback only.
        peer = _zmtp_peer(conn.shell_port)
        frames = 16
        for _ in range(frames):
            _stream(peer, MAX_REQUEST_FRAME - 1, more=True)
        time.sleep(1.0)
        held = _status_kib(worker.pid, "VmRSS")
        peer.close()
        print(
            f"known gap: one multipart message of {frames} frames under the cap that never ends: RSS "
            f"{after / 1024:.0f} -> {held / 1024:.0f} MB (loopback only; off loopback Curve keeps such a "
            "peer out)"
        )
    finally:
        worker.terminate()
        worker.wait(timeout=30)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--receive":
        receive(sys.argv[2])
    elif sys.argv[1:] == ["--frames"]:
        oversized_frames()
    else:
        main()
        oversized_frames()
