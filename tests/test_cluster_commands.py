"""Run on a cluster: the torchrun command for each node and the SLURM batch script, as plain text.

The command must parse with torchrun's own argument parser (imported from torch here; this is no GUI test)
and give `workbench train` the spec, the run id, the workspace and distributed=ddp, with paths quoted.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime

import pytest

from workbench.cluster import default_run_id, quote, sbatch_script, torchrun_command
from workbench.specs import TrainSpec

SPEC = "/shared/my runs/spec.toml"
WORKSPACE = "/shared/work space"
RUN_ID = "cluster-20261123-101500-abc123"


def command(**kwargs) -> str:
    args = dict(nnodes=4, nproc_per_node=8, run_id=RUN_ID, workspace=WORKSPACE)
    return torchrun_command(SPEC, **{**args, **kwargs})


def script(**kwargs) -> str:
    args = dict(nodes=4, gpus_per_node=8, time="12:30:00", run_id=RUN_ID, workspace=WORKSPACE)
    return sbatch_script(SPEC, **{**args, **kwargs})


def train_args(argv: list[str]) -> list[str]:
    """What follows `-m workbench` in a torchrun argv."""
    at = argv.index("-m")
    assert argv[at + 1] == "workbench"
    return argv[at + 2 :]


def test_the_command_has_torchrun_flags_and_the_train_arguments():
    argv = shlex.split(command(max_restarts=5))
    assert argv[0] == "torchrun"
    assert "--nnodes=4" in argv and "--nproc-per-node=8" in argv
    assert "--rdzv-backend=c10d" in argv and "--rdzv-endpoint=$HEAD_NODE:29500" in argv
    assert f"--rdzv-id={RUN_ID}" in argv and "--max-restarts=5" in argv
    assert train_args(argv) == [
        "train",
        SPEC,
        "--run-id",
        RUN_ID,
        "--workspace",
        WORKSPACE,
        "--set",
        "distributed=ddp",
    ]


def test_paths_with_spaces_and_quotes_are_quoted_once():
    text = torchrun_command(
        "/a b/it's.toml", nnodes=1, nproc_per_node=2, run_id=RUN_ID, workspace="/w s/$HOME;x"
    )
    assert "'/w s/$HOME;x'" in text  # a user's $ is literal: only the head node variable is expanded
    args = train_args(shlex.split(text))
    assert args[1] == "/a b/it's.toml"
    assert args[args.index("--workspace") + 1] == "/w s/$HOME;x"


def test_quote_leaves_plain_words_and_variables_alone():
    assert quote("node001:29500") == "node001:29500"
    assert quote("$HEAD_NODE:29500") == "$HEAD_NODE:29500"
    assert quote("${HEAD}:1") == "${HEAD}:1"
    assert quote("a b") == "'a b'"
    assert quote("x;rm -rf /") == "'x;rm -rf /'"
    assert quote("") == "''"


def test_the_command_parses_with_torchruns_own_parser():
    pytest.importorskip("torch")
    from torch.distributed.run import get_args_parser

    argv = shlex.split(
        command(nnodes=3, nproc_per_node=2, rdzv_endpoint="head.cluster:29400", max_restarts=1)
    )
    args = get_args_parser().parse_args(argv[1:])
    assert (args.nnodes, args.nproc_per_node) == ("3", "2")
    assert (args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id) == ("c10d", "head.cluster:29400", RUN_ID)
    assert args.max_restarts == 1
    assert args.module and not args.no_python and not args.standalone
    assert args.training_script == "workbench"
    assert args.training_script_args == [
        "train",
        SPEC,
        "--run-id",
        RUN_ID,
        "--workspace",
        WORKSPACE,
        "--set",
        "distributed=ddp",
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(nnodes=0), "nodes"),
        (dict(nproc_per_node=0), "processes per node"),
        (dict(max_restarts=-1), "max restarts"),
        (dict(rdzv_endpoint="head"), "head node"),
        (dict(rdzv_endpoint="head:99999"), "head node"),
        (dict(run_id="a b"), "run id"),
        (dict(run_id=""), "run id"),
        (dict(workspace=" "), "workspace"),
    ],
)
def test_bad_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        command(**kwargs)


def test_the_batch_script_asks_slurm_for_the_nodes_and_gpus():
    text = script(partition="gpu-long")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/bash"
    sbatch = [line.split("#", 2)[1].split()[1] for line in lines if line.startswith("#SBATCH")]
    assert sbatch == [
        f"--job-name={RUN_ID}",
        "--nodes=4",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--time=12:30:00",
        "--partition=gpu-long",
        "--output=%x-%j.out",
    ]
    assert 'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in lines
    # The #SBATCH lines come before the first command, or sbatch ignores them.
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    assert all(i < first_command for i, line in enumerate(lines) if line.startswith("#SBATCH"))


def test_the_batch_script_runs_the_same_torchrun_at_the_head_node():
    text = script()
    srun = text[text.index("srun ") :].replace("\\\n", " ")
    argv = shlex.split(srun)
    assert argv[:2] == ["srun", "torchrun"]
    assert argv[1:] == shlex.split(command(rdzv_endpoint="$HEAD_NODE:29500"))
    # no partition: commented
    assert not any(line.startswith("#SBATCH --partition") for line in text.splitlines())
    assert "##SBATCH --partition=" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(time="4h"), "time limit"),
        (dict(time="12:30"), "time limit"),
        (dict(partition="gpu long"), "partition"),
        (dict(nodes=0), "nodes"),
    ],
)
def test_bad_batch_values_are_named(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        script(**kwargs)


def test_days_in_the_time_limit():
    assert "#SBATCH --time=2-00:00:00" in script(time="2-00:00:00")


def test_the_default_run_id_is_stable_and_safe():
    now = datetime(2026, 11, 23, 10, 15, 0)
    spec = TrainSpec()
    run_id = default_run_id(spec, now)
    assert re.fullmatch(r"cluster-20261123-101500-[0-9a-f]{6}", run_id)
    assert default_run_id(TrainSpec(), now) == run_id
    assert default_run_id(TrainSpec(lr=0.5), now) != run_id
    assert re.fullmatch(r"cluster-\d{8}-\d{6}-[0-9a-f]{6}", default_run_id(spec))
    command(run_id=run_id)  # accepted as a run id
