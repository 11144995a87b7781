"""`workbench train` as one rank of a torchrun group: reading torchrun's environment, the run id every rank
and every elastic restart agrees on, joining the group (env://, or a store of each attempt's own where
torchrun shares its rendezvous store), and the side of the ranks other than global rank 0, which owns the run
folder (they write only their own log, <run>/logs/rank-<N>.log).

Worker side (torch); never imports Qt. `environment()` and `run_id_for()` read only os.environ.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from workbench.errors import JobCancelled, JobError, UsageError

# Set only by tests: the rank WORKBENCH_TEST_KILL_RANK SIGKILLs itself at step WORKBENCH_TEST_KILL_AT_STEP
# unless WORKBENCH_TEST_KILL_MARKER exists (it creates it first), so an elastic restart can be tested once.
KILL_RANK, KILL_AT_STEP, KILL_MARKER = (
    "WORKBENCH_TEST_KILL_RANK",
    "WORKBENCH_TEST_KILL_AT_STEP",
    "WORKBENCH_TEST_KILL_MARKER",
)
STOP_EVERY_STEPS = 10  # how often the ranks agree on a cancel (one all-reduce of one number)
# how long ranks wait for each other to form the group (torchrun's join timeout)
GROUP_STORE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class TorchrunEnv:
    rank: int
    local_rank: int
    world_size: int
    master_addr: str
    master_port: int
    rdzv_id: str  # TORCHELASTIC_RUN_ID: the rendezvous id, the same on every node and after every restart
    restart_count: int

    def describe(self, backend: str) -> dict:
        return {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "world_size": self.world_size,
            "backend": backend,
            "master": f"{self.master_addr}:{self.master_port}",
        }


def environment(environ=None) -> TorchrunEnv | None:
    """The torchrun group this process is a rank of, from the variables torchrun sets; None outside one."""
    env = os.environ if environ is None else environ
    if not all(env.get(key) for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return None
    try:
        return TorchrunEnv(
            rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK") or 0),
            world_size=int(env["WORLD_SIZE"]),
            master_addr=env["MASTER_ADDR"],
            master_port=int(env["MASTER_PORT"]),
            rdzv_id=env.get("TORCHELASTIC_RUN_ID", ""),
            restart_count=int(env.get("TORCHELASTIC_RESTART_COUNT") or 0),
        )
    except ValueError as exc:
        raise UsageError(
            f"the torchrun environment is malformed (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT must "
            f"be integers): {exc}"
        ) from None


def run_id_for(env: TorchrunEnv) -> str:
    """The run id all ranks and restarts of one torchrun job agree on: torchrun-<rendezvous id>."""
    rdzv = env.rdzv_id.strip()
    if not rdzv or rdzv == "none":  # torchrun's default --rdzv-id: every job would share (and resume) one run
        raise UsageError(
            "under torchrun, a run needs an id that every rank and every restart agrees on: pass "
            "--rdzv-id=NAME to torchrun (or use --standalone), or --run-id NAME to workbench train"
        )
    return "torchrun-" + (re.sub(r"[^A-Za-z0-9._-]+", "_", rdzv).strip("._-")[:90] or "job")


# The group this process joined through the command line (`workbench train` under torchrun); None otherwise,
# so a job run anywhere else (the GUI's worker, a test) never tries to join a group because of stray
# variables.
_ACTIVE: TorchrunEnv | None = None


def activate(env: TorchrunEnv | None) -> None:
    global _ACTIVE
    _ACTIVE = env


def active() -> TorchrunEnv | None:
    return _ACTIVE


def plan_run(workspace: Path, run_id: str) -> tuple[str | None, str | None]:
    """(resume: the run folder to continue, or None; create: the id of a new run, or None) for `--run-id`.

    An existing run with a last.pt is resumed. One without (its first life died before the first checkpoint)
    is started again under the same id: there is nothing in it to keep.
    """
    from workbench.runs import RunStore
    from workbench.worker.training.state import LAST

    store = RunStore(workspace)
    run_dir = store.runs_dir / run_id
    if not run_dir.exists():
        return None, run_id
    if (run_dir / "checkpoints" / LAST).exists():
        return str(run_dir), None
    with store.open_run(str(run_dir)) as run:
        task = run._meta().get("task") or ""
    if not task.startswith("train"):
        raise UsageError(
            f"run {run_id} exists and is a {task or 'unknown'} run, not a training run; pick another --run-id"
        )
    print(f"workbench: run {run_id} has no checkpoint yet: starting it again", file=sys.stderr, flush=True)
    store.delete_run(str(run_dir))  # refused while its owner lives
    return None, run_id


def backend_for(device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def rank_device(env: TorchrunEnv, device):
    """LOCAL_RANK picks the CUDA device; the CPU's threads are shared among this node's ranks."""
    import torch

    if device.type == "cuda":
        if env.local_rank >= torch.cuda.device_count():
            raise JobError(
                f"torchrun LOCAL_RANK {env.local_rank} needs CUDA device {env.local_rank}; this machine "
                f"has {torch.cuda.device_count()}; use --nproc-per-node={torch.cuda.device_count()} or less"
            )
        device = torch.device("cuda", env.local_rank)
        torch.cuda.set_device(device)
    elif device.type == "cpu":
        # OMP_NUM_THREADS, when set (torchrun sets 1 for --nproc-per-node > 1), is the user's word and torch
        # has read it already; otherwise each of this node's ranks gets its share of the cores.
        if not os.environ.get("OMP_NUM_THREADS"):
            local = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(local, 1)))
    else:
        raise JobError(f"under torchrun, training runs on cpu (gloo) or cuda (nccl), not {device.type}")
    return device


def check_batch(spec, env: TorchrunEnv) -> None:
    if spec.batch_size % env.world_size:
        fitting = env.world_size * max(1, round(spec.batch_size / env.world_size))
        raise JobError(
            f"batch_size: {spec.batch_size} is not divisible by the torchrun world size "
            f"{env.world_size}; each rank takes batch_size // world_size samples of every batch, so use "
            f"e.g. batch_size={fitting}"
        )


def join(env: TorchrunEnv, device) -> None:
    """Join torchrun's group (env:// reads MASTER_ADDR/PORT, RANK, WORLD_SIZE) unless already in it."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun shares its rendezvous TCP store with the ranks by default, and that store outlives an
        # elastic restart: the previous attempt's gloo/nccl addresses are still in it, so a restarted rank
        # would read a dead peer's address. The group gets a store of its own for each attempt instead
        # (fresh_group_store).
        agent_store, _, _ = next(dist.rendezvous("env://", rank=env.rank, world_size=env.world_size))
        store = fresh_group_store(env, agent_store)
        dist.init_process_group(backend_for(device), store=store, rank=env.rank, world_size=env.world_size)
    else:
        dist.init_process_group(
            backend_for(device), init_method="env://", rank=env.rank, world_size=env.world_size
        )


# in torchrun's shared store: "<port> <nonce>" of this attempt's store
GROUP_STORE_KEY = "workbench/group_store"
NONCE_KEY = "workbench/nonce"


def fresh_group_store(
    env: TorchrunEnv, agent_store, *, timeout_s: float = GROUP_STORE_TIMEOUT_S, connect_s: float = 3.0
):
    """A TCP store for this attempt alone, hosted by global rank 0 on MASTER_ADDR (its node) and announced in
    torchrun's shared store with a random nonce.

    Every rank agrees on it whatever its node's TORCHELASTIC_RESTART_COUNT says (nodes count restarts apart:
    one restarted for a peer's new membership does not count one), which a key prefix by restart count could
    not promise across nodes. A rank that reads a stale announcement, one left by the previous attempt, finds
    its store gone or holding another nonce, and reads again until rank 0's new one is there.
    """
    import secrets
    from datetime import timedelta

    import torch.distributed as dist

    if env.rank == 0:
        nonce = secrets.token_hex(8)
        store = dist.TCPStore(
            env.master_addr,
            0,
            env.world_size,
            True,
            timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False,
        )
        store.set(NONCE_KEY, nonce)
        agent_store.set(GROUP_STORE_KEY, f"{store.port} {nonce}")
        return store
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            agent_store.wait([GROUP_STORE_KEY], timedelta(seconds=connect_s))
            port, nonce = agent_store.get(GROUP_STORE_KEY).decode().split()
            store = dist.TCPStore(
                env.master_addr, int(port), env.world_size, False, timeout=timedelta(seconds=connect_s)
            )
            if store.get(NONCE_KEY).decode() == nonce:
                store.set_timeout(timedelta(seconds=timeout_s))
                return store
        # not announced yet, a dead store, or another attempt's: read again
        except (RuntimeError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise JobError(
                f"rank {env.rank} found no store of this attempt's rank 0 at {env.master_addr} within "
                f"{timeout_s:.0f} s (rank 0 hosts it on a free port of MASTER_ADDR's node: is that port "
                "reachable from this node?)"
            )
        time.sleep(0.2)


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # a peer already gone: nothing left to tear down cleanly
            pass


def share_run(payload: dict | None) -> dict:
    """Rank 0 sends what the others need (spec as resolved, run id, resuming); the others receive it."""
    import torch.distributed as dist

    box = [payload]
    dist.broadcast_object_list(box, src=0)
    if not isinstance(box[0], dict):
        raise JobError("rank 0 sent no run to join")
    if "error" in box[0]:
        raise JobError(f"rank 0 failed before training, so this rank stops too: {box[0]['error']}")
    return box[0]


class Lead:
    """Rank 0's side of telling the others the run: `share` once; an error before it is shared instead."""

    def __init__(self):
        self.shared = False

    def share(self, payload: dict) -> None:
        share_run(payload)
        self.shared = True


@contextlib.contextmanager
def leading(env: TorchrunEnv, device) -> Iterator[Lead]:
    """Rank 0 in the group for the length of the job: joined on entry, left on exit; a failure before the run
    was shared is sent to the other ranks, which then stop with it instead of waiting for a timeout."""
    join(env, device)
    lead = Lead()
    try:
        yield lead
    except BaseException as exc:
        if not lead.shared:
            with contextlib.suppress(Exception):
                share_run({"error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        leave()


class GroupStop:
    """Agreement on when to stop across nodes: every STOP_EVERY_STEPS steps the ranks all-reduce (max) their
    own stop flag, so a cancel seen by rank 0 stops every rank after the same step. The Trainer calls it at
    the same step starts on every rank."""

    def __init__(self, local_stop, device, rank: int):
        self.local_stop = local_stop
        self.device = device
        self.rank = rank
        self.stopped = False
        kill_rank = os.environ.get(KILL_RANK)
        self.kill_at = int(os.environ.get(KILL_AT_STEP, "-1")) if kill_rank and int(kill_rank) == rank else -1
        self.kill_marker = os.environ.get(KILL_MARKER, "")

    def __call__(self, completed_steps: int) -> bool:
        if 0 <= self.kill_at <= completed_steps and self.kill_marker and not os.path.exists(self.kill_marker):
            Path(self.kill_marker).write_text(str(completed_steps))
            os.kill(os.getpid(), signal.SIGKILL)
        if self.stopped:
            return True
        if completed_steps % STOP_EVERY_STEPS:
            return False
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1.0 if self.local_stop() else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        self.stopped = bool(flag.item())
        return self.stopped


class RankLog:
    """A non-zero rank's reporter: its log lines go to <run>/logs/rank-<N>.log (appended across restarts)."""

    def __init__(self, path: Path | None, rank: int):
        self.path = path
        self.rank = rank
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the rank's life

    def log(self, text: str, level: str = "info") -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} rank {self.rank} [{level}] {text}\n"
        if self._file is not None:
            self._file.write(line)
            self._file.flush()
        else:
            sys.stderr.write(line)

    def progress(self, *args, **kwargs) -> None:
        pass

    metrics = artifact = progress

    def should_stop(self) -> bool:
        return False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def follow(spec, *, env: TorchrunEnv, workspace: Path) -> dict:
    """A rank other than 0: join the group, learn the run from rank 0, train its shard, write nothing but its
    own log. Returns a small result (status, rank, run_dir); errors come back as a failed result, logged."""
    from workbench.runs import RunStore
    from workbench.specs import TrainSpec
    from workbench.worker.devices import resolve_device
    from workbench.worker.training.rank import build_for_rank
    from workbench.worker.training.reproducibility import deterministic_mode

    result: dict = {"status": "failed", "run_dir": None, "rank": env.rank, "world_size": env.world_size}
    report = RankLog(None, env.rank)
    try:
        device = rank_device(env, resolve_device(spec.device))
        join(env, device)
        payload = share_run(None)
        spec = TrainSpec.from_dict(payload["spec"])
        run_dir = RunStore(workspace).runs_dir / payload["run_id"]
        result["run_dir"] = str(run_dir)
        report = RankLog(run_dir / "logs" / f"rank-{env.rank}.log", env.rank)
        report.log(
            f"joined run {payload['run_id']} as rank {env.rank} of {env.world_size} "
            f"(local rank {env.local_rank}, {backend_for(device)}, restart {env.restart_count})"
            + (", resuming from its last checkpoint" if payload["resuming"] else "")
        )
        with deterministic_mode(spec.deterministic):
            trainer = build_for_rank(
                spec,
                device=device,
                workspace=str(workspace),
                checkpoints_dir=str(run_dir / "checkpoints"),
                artifacts_dir=str(run_dir / "artifacts"),
                resuming=payload["resuming"],
                report=report,
                rank=env.rank,
                world=env.world_size,
                stop_check=GroupStop(lambda: False, device, env.rank),
            )
            summary = trainer.fit()
        report.log(f"done: {summary['epochs_completed']} epochs, {summary['global_steps']} steps")
        result.update(
            status="done", epochs_completed=summary["epochs_completed"], global_steps=summary["global_steps"]
        )
    except JobCancelled as exc:
        report.log(str(exc))
        result.update(status="cancelled", error=exc.to_dict())
    except Exception as exc:
        message = str(exc) or repr(exc)
        report.log(f"{type(exc).__name__}: {message}\n{traceback.format_exc()}", "error")
        result["error"] = {"type": type(exc).__name__, "message": message}
    finally:
        leave()
        report.close()
    return result
