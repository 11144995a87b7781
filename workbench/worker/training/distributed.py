"""Multi-process training with torch.distributed (DDP): launching `nproc` ranks the torchrun way
(torch.multiprocessing.start_processes with a module-level entrypoint and a TCP rendezvous on 127.0.0.1),
gloo on the CPU and nccl on CUDA. Each rank trains its shard of every global batch with the same Trainer as a
single process; rank 0 writes checkpoints and relays logs, metrics and progress to the parent task over a
queue. Under torchrun (several machines) the workbench launches nothing: torchrun.py joins torchrun's group
instead.

Worker side; never imports Qt.
"""

from __future__ import annotations

import os
import queue as queue_module
import socket
import traceback
from dataclasses import dataclass

import torch

from workbench.errors import JobCancelled, JobError, WorkbenchError

POLL_S = 0.1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class QueueReporter:
    """Rank 0's reporter: everything goes to the parent task as plain picklable tuples."""

    def __init__(self, queue, stop_event):
        self.queue = queue
        self.stop_event = stop_event

    def progress(self, done, total=None, text: str = "") -> None:
        self.queue.put(("progress", done, total, text))

    def metrics(self, step: int, values: dict) -> None:
        # Called at read-back points only, where the values are already on the host.
        self.queue.put(("metrics", int(step), {k: float(v) for k, v in values.items()}))

    def log(self, text: str, level: str = "info") -> None:
        self.queue.put(("log", text, level))

    def artifact(self, name: str, path, kind: str = "file") -> None:
        self.queue.put(("artifact", name, str(path), kind))

    def should_stop(self) -> bool:
        return self.stop_event.is_set()


class SilentReporter:
    """The other ranks say nothing; the parent hears rank 0."""

    def progress(self, *args, **kwargs) -> None:
        pass

    metrics = log = artifact = progress

    def should_stop(self) -> bool:
        return False


class DistributedStop:
    """Agreement on when to stop: rank 0 sees the parent's stop event and names a step all ranks stop after.

    DDP's gradient all-reduce keeps ranks within one optimiser step of each other, so a rank that checks
    before rank 0 has named the step can only have finished the step before it; naming "one step on" is
    reached by all.
    """

    def __init__(self, stop_event, stop_at, rank: int):
        self.stop_event = stop_event
        self.stop_at = stop_at  # a shared RawValue: -1 until rank 0 names the step
        self.rank = rank

    def __call__(self, completed_steps: int) -> bool:
        if self.rank == 0 and self.stop_at.value < 0 and self.stop_event.is_set():
            self.stop_at.value = completed_steps + 1
        at = self.stop_at.value
        return 0 <= at <= completed_steps


@dataclass
class RankPayload:
    spec: dict
    device: str
    nproc: int
    port: int
    workspace: str
    checkpoints_dir: str
    artifacts_dir: str
    resuming: bool


def _rank_main(rank: int, payload: RankPayload, queue, stop_event, stop_at) -> None:
    """The entrypoint of one rank (module level, so the spawn start method can import it)."""
    import torch.distributed as dist

    from workbench.specs import TrainSpec
    from workbench.worker.training.rank import build_for_rank
    from workbench.worker.training.reproducibility import deterministic_mode

    device = torch.device(payload.device)
    if device.type == "cuda":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        # Each rank gets its share of the cores; otherwise they fight over the same ones.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // payload.nproc))
        backend = "gloo"
    report = QueueReporter(queue, stop_event) if rank == 0 else SilentReporter()
    try:
        dist.init_process_group(
            backend, init_method=f"tcp://127.0.0.1:{payload.port}", rank=rank, world_size=payload.nproc
        )
        try:
            spec = TrainSpec.from_dict(payload.spec)
            with deterministic_mode(spec.deterministic):
                trainer = build_for_rank(
                    spec,
                    device=device,
                    workspace=payload.workspace,
                    checkpoints_dir=payload.checkpoints_dir,
                    artifacts_dir=payload.artifacts_dir,
                    resuming=payload.resuming,
                    report=report,
                    rank=rank,
                    world=payload.nproc,
                    stop_check=DistributedStop(stop_event, stop_at, rank),
                )
                summary = trainer.fit()
            # Ranks tear down together: one that destroys its group and exits while a peer is still writing
            # its checkpoint and report leaves gloo's connections half-closed (a CI run saw a rank abort in
            # teardown).
            dist.barrier()
            if rank == 0:
                queue.put(("done", summary))
        finally:
            dist.destroy_process_group()
    except JobCancelled as exc:
        if rank == 0:
            queue.put(("cancelled", str(exc)))
    except WorkbenchError as exc:
        queue.put(("error", rank, exc.to_dict(), ""))
        raise SystemExit(1) from None  # a non-zero exit makes the launcher stop the other ranks
    except Exception as exc:
        queue.put(
            (
                "error",
                rank,
                {"type": type(exc).__name__, "message": str(exc) or repr(exc)},
                traceback.format_exc(),
            )
        )
        raise SystemExit(1) from None


class _Relay:
    def __init__(self, ctx):
        self.ctx = ctx
        self.summary: dict | None = None
        self.cancelled: str | None = None
        self.error: tuple | None = None

    def handle(self, item: tuple) -> None:
        kind = item[0]
        if kind == "progress":
            self.ctx.progress(item[1], item[2], item[3])
        elif kind == "metrics":
            self.ctx.metrics(item[1], item[2])
        elif kind == "log":
            self.ctx.log(item[1], item[2])
        elif kind == "artifact":
            self.ctx.artifact(item[1], item[2], kind=item[3])
        elif kind == "done":
            self.summary = item[1]
        elif kind == "cancelled":
            self.cancelled = item[1]
        elif kind == "error" and self.error is None:
            self.error = item[1:]

    def drain(self, queue, wait: float = 0.0) -> None:
        while True:
            try:
                item = queue.get(timeout=wait) if wait else queue.get_nowait()
            except queue_module.Empty:
                return
            self.handle(item)


def launch(spec, ctx, *, device: torch.device, checkpoints_dir, artifacts_dir, resuming: bool) -> dict:
    """Run `spec.nproc` DDP ranks to the end and return rank 0's training summary; errors and cancel come back
    as the JobError / JobCancelled a rank raised."""
    import torch.multiprocessing as mp

    mp_ctx = mp.get_context("spawn")
    queue = mp_ctx.Queue()
    stop_event = mp_ctx.Event()
    stop_at = mp_ctx.RawValue("q", -1)
    payload = RankPayload(
        spec=spec.to_dict(),
        device=str(device),
        nproc=spec.nproc,
        port=free_port(),
        workspace=str(ctx.workspace or ""),
        checkpoints_dir=str(checkpoints_dir),
        artifacts_dir=str(artifacts_dir),
        resuming=resuming,
    )
    ctx.log(
        f"starting {spec.nproc} DDP processes ({'nccl' if device.type == 'cuda' else 'gloo'}), "
        f"{spec.batch_size // spec.nproc} samples each per batch"
    )
    relay = _Relay(ctx)
    processes = mp.start_processes(
        _rank_main,
        args=(payload, queue, stop_event, stop_at),
        nprocs=spec.nproc,
        join=False,
        start_method="spawn",
    )
    failure: Exception | None = None
    try:
        while True:
            relay.drain(queue)
            if ctx.should_stop():
                stop_event.set()
            try:
                if processes.join(timeout=POLL_S):
                    break
            # ProcessExitedException / ProcessRaisedException: the others are stopped
            except Exception as exc:
                failure = exc
                break
    finally:
        for process in processes.processes:
            if process.is_alive():
                process.terminate()
    relay.drain(queue, wait=0.5)  # what the ranks queued just before they exited
    if relay.error is not None:
        rank, error, trace = relay.error
        if trace:  # a bug, not a user error: keep the rank's traceback for --debug
            raise RuntimeError(f"DDP rank {rank}: {error['type']}: {error['message']}\n{trace}")
        raise JobError(error["message"])
    if relay.cancelled is not None:
        raise JobCancelled(relay.cancelled)
    if failure is not None or relay.summary is None:
        raise JobError(f"a DDP training process failed: {failure or 'it exited without a result'}")
    return relay.summary
