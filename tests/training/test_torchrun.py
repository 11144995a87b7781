"""`workbench train` as ranks of a real torchrun group on loopback: two torchrun agents as two "nodes" train
the same weights as one process into exactly one run folder; an elastic restart after a SIGKILLed rank resumes
from the run's last checkpoint. Also the torchrun environment parsing, the run id and `workbench devices`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
import torch
from cli_runner import run_cli
from training_helpers import done, train

from workbench.errors import UsageError
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.training.distributed import free_port
from workbench.worker.training.torchrun import environment, run_id_for

ROOT = Path(__file__).resolve().parents[2]
# The spec of test_train_ddp.py: deterministic SGD on the mlp, so DDP over two ranks matches one process.
SPEC = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp"},
    "epochs": 2,
    "batch_size": 64,
    "lr": 0.05,
    "optimizer": "sgd",
    "momentum": 0.0,
    "deterministic": True,
    "seed": 5,
    "log_every_steps": 5,
    "device": "cpu",
}
TORCHRUN_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), **extra)
    return env


def _torchrun(
    tmp_path: Path,
    *,
    nnodes: int,
    nproc: int,
    port: int,
    rdzv_id: str,
    max_restarts: int = 0,
    spec: dict = SPEC,
    env: dict | None = None,
) -> subprocess.Popen:
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(tomli_w.dumps(spec))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=127.0.0.1:{port}",
        f"--rdzv-id={rdzv_id}",
        f"--max-restarts={max_restarts}",
        "--monitor-interval=0.5",
        "-m",
        "workbench",
        "train",
        str(spec_file),
        "--workspace",
        str(tmp_path / "ws"),
        "--json",
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env or _env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _results(process: subprocess.Popen, timeout: float = 240) -> list[dict]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"torchrun did not finish:\n{err[-4000:]}") from None
    assert process.returncode == 0, err[-6000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_environment_is_read_from_torchrun_variables():
    assert environment({}) is None
    env = environment(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "10.0.0.2",
            "MASTER_PORT": "29500",
            "TORCHELASTIC_RUN_ID": "job 7",
            "TORCHELASTIC_RESTART_COUNT": "2",
        }
    )
    assert (env.rank, env.local_rank, env.world_size, env.restart_count) == (3, 1, 4, 2)
    assert env.describe("gloo") == {
        "rank": 3,
        "local_rank": 1,
        "world_size": 4,
        "backend": "gloo",
        "master": "10.0.0.2:29500",
    }
    assert run_id_for(env) == "torchrun-job_7"
    with pytest.raises(UsageError, match="--rdzv-id"):  # torchrun's default id would make every job one run
        run_id_for(
            environment(
                {
                    "RANK": "0",
                    "WORLD_SIZE": "2",
                    "MASTER_ADDR": "a",
                    "MASTER_PORT": "1",
                    "TORCHELASTIC_RUN_ID": "none",
                }
            )
        )


@pytest.mark.slow
def test_devices_reports_the_torchrun_group(tmp_path):
    out = run_cli(
        ["devices", "--json"],
        cwd=ROOT,
        timeout=120,
        env=_env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29511"),
    )
    assert out.returncode == 0, out.stderr
    backend = "nccl" if torch.cuda.is_available() else "gloo"  # the one the group would use on this machine
    assert json.loads(out.stdout)["torchrun"] == {
        "rank": 1,
        "local_rank": 1,
        "world_size": 2,
        "backend": backend,
        "master": "127.0.0.1:29511",
    }
    alone = run_cli(["devices", "--json"], cwd=ROOT, timeout=120, env=_env())
    assert json.loads(alone.stdout)["torchrun"] is None


@pytest.mark.slow
def test_run_id_creates_then_resumes_one_run(tmp_path):
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(tomli_w.dumps({**SPEC, "epochs": 1}))
    base = ["train", "--workspace", str(tmp_path / "ws"), "--json", "--run-id", "my-run"]
    first = run_cli(base + [str(spec_file)], cwd=ROOT, timeout=120, env=_env())
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["run_dir"] == str(tmp_path / "ws" / "runs" / "my-run")
    second = run_cli(base + ["--set", "epochs=2"], cwd=ROOT, timeout=120, env=_env())
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["resumed_from_epoch"] == 1 and result["epochs_completed"] == 2
    assert [p.name for p in (tmp_path / "ws" / "runs").iterdir()] == ["my-run"]


@pytest.mark.heavy
def test_two_torchrun_nodes_match_one_process_in_one_run_folder(tmp_path):
    port = free_port()
    nodes = [_torchrun(tmp_path, nnodes=2, nproc=1, port=port, rdzv_id="two-nodes") for _ in range(2)]
    results = [r for node in nodes for r in _results(node)]
    assert sorted(r["status"] for r in results) == ["done", "done"]
    lead = next(r for r in results if "checkpoint" in r)
    follower = next(r for r in results if "checkpoint" not in r)
    run_dir = tmp_path / "ws" / "runs" / "torchrun-two-nodes"
    assert lead["run_dir"] == follower["run_dir"] == str(run_dir)
    assert [p.name for p in (tmp_path / "ws" / "runs").iterdir()] == [run_dir.name]  # exactly one run folder
    torchrun_info = lead["distributed"]["torchrun"]
    assert (
        lead["distributed"]["nproc"] == 2 and torchrun_info["world_size"] == 2 and torchrun_info["rank"] == 0
    )
    assert (run_dir / "logs" / "rank-1.log").read_text().count("joined run torchrun-two-nodes") == 1
    assert not list((run_dir / "logs").glob("rank-0*"))  # rank 0 writes the run itself

    one = done(train(tmp_path / "single", SPEC))
    assert lead["global_steps"] == one["global_steps"] == 46
    first, second = load_state_dict(one["checkpoint"]), load_state_dict(run_dir / "checkpoints" / "model.pt")
    assert set(first) == set(second)
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-4, atol=1e-5)


@pytest.mark.heavy
@pytest.mark.parametrize("killed", [1, 0], ids=["a-follower-dies", "rank-0-dies"])
def test_an_elastic_restart_resumes_from_the_last_checkpoint(tmp_path, killed):
    marker = tmp_path / "killed"
    # 23 steps an epoch: a rank dies in epoch 2, after rank 0 wrote last.pt at the end of epoch 1. When rank 0
    # dies (SIGKILL: no word to the run), the kernel frees its owner lock and the restarted rank 0 takes it
    # again.
    env = _env(
        WORKBENCH_TEST_KILL_RANK=str(killed),
        WORKBENCH_TEST_KILL_AT_STEP="35",
        WORKBENCH_TEST_KILL_MARKER=str(marker),
    )
    node = _torchrun(
        tmp_path,
        nnodes=1,
        nproc=2,
        port=free_port(),
        rdzv_id="elastic",
        max_restarts=1,
        spec={**SPEC, "epochs": 3},
        env=env,
    )
    results = _results(node)
    assert marker.exists()  # the first life really was killed
    lead = next(r for r in results if "checkpoint" in r)
    assert lead["status"] == "done", lead
    assert lead["resumed_from_epoch"] > 0
    assert lead["epochs_completed"] == 3 and lead["global_steps"] == 69
    assert lead["distributed"]["torchrun"]["restart_count"] == 1
    run_dir = Path(lead["run_dir"])
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name]
    with sqlite3.connect(f"file:{run_dir / 'metrics.db'}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    log = (run_dir / "logs" / "rank-1.log").read_text()
    assert log.count("joined run torchrun-elastic") == 2 and "resuming from its last checkpoint" in log


@pytest.mark.heavy
def test_an_elastic_restart_across_two_nodes_resumes_in_the_same_run(tmp_path):
    # Two torchrun agents on loopback, one rank each: the follower's node dies and restarts; the other node
    # restarts for the new membership, and may count no restart of its own.
    marker = tmp_path / "killed"
    env = _env(
        WORKBENCH_TEST_KILL_RANK="1", WORKBENCH_TEST_KILL_AT_STEP="35", WORKBENCH_TEST_KILL_MARKER=str(marker)
    )
    port = free_port()
    nodes = [
        _torchrun(
            tmp_path,
            nnodes=2,
            nproc=1,
            port=port,
            rdzv_id="elastic-nodes",
            max_restarts=1,
            spec={**SPEC, "epochs": 3},
            env=env,
        )
        for _ in range(2)
    ]
    results = [r for node in nodes for r in _results(node)]
    assert marker.exists()
    lead = next(r for r in results if "checkpoint" in r)
    assert lead["status"] == "done" and lead["resumed_from_epoch"] > 0, lead
    assert lead["epochs_completed"] == 3 and lead["global_steps"] == 69
    run_dir = Path(lead["run_dir"])
    assert [p.name for p in run_dir.parent.iterdir()] == [run_dir.name]


@pytest.mark.heavy
def test_a_rank_0_failure_before_training_stops_the_other_ranks_with_its_message(tmp_path):
    node = _torchrun(
        tmp_path, nnodes=1, nproc=2, port=free_port(), rdzv_id="bad-batch", spec={**SPEC, "batch_size": 63}
    )
    out, err = node.communicate(timeout=240)
    assert node.returncode != 0
    results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    messages = sorted(r["error"]["message"] for r in results)
    assert len(messages) == 2 and all(
        "batch_size: 63 is not divisible by the torchrun world size 2" in m for m in messages
    ), messages
    assert messages[0].startswith("rank 0 failed before training") or messages[1].startswith("rank 0 failed")


_RANK_SCRIPT = """
import torch, torch.distributed as dist
from workbench.worker.training.torchrun import environment, join, leave
join(environment(), torch.device("cpu"))
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print("SUM", int(total.item()))
leave()
"""


@pytest.mark.heavy
def test_ranks_whose_nodes_count_restarts_apart_still_form_one_group(tmp_path):
    # torchrun's shared store keeps the previous attempt's keys, and nodes count restarts apart (a node
    # restarted for a peer's new membership counts none): an attempt whose ranks report different restart
    # counts must form its group anyway, not read the dead attempt's addresses.
    from datetime import timedelta

    import torch.distributed as dist

    agent_store = dist.TCPStore(
        "127.0.0.1", 0, 1, True, timeout=timedelta(seconds=60), wait_for_workers=False
    )

    def attempt(restart_counts: tuple[int, int]) -> None:
        ranks = [
            subprocess.Popen(
                [sys.executable, "-c", _RANK_SCRIPT],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(
                    RANK=str(rank),
                    WORLD_SIZE="2",
                    LOCAL_RANK="0",
                    MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(agent_store.port),
                    TORCHELASTIC_USE_AGENT_STORE="True",
                    TORCHELASTIC_RESTART_COUNT=str(count),
                ),
            )
            for rank, count in enumerate(restart_counts)
        ]
        for rank in ranks:
            try:
                out, err = rank.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                for other in ranks:
                    other.kill()
                raise AssertionError(f"the ranks of attempt {restart_counts} formed no group") from None
            assert rank.returncode == 0 and "SUM 3" in out, err[-3000:]

    attempt((0, 0))
    first = agent_store.get("workbench/group_store")
    attempt((1, 0))  # rank 0's node counted the restart, rank 1's did not
    assert agent_store.get("workbench/group_store") != first  # a store of its own for the second attempt
