"""Commands that run a training spec on a cluster: a torchrun line for each node, and a SLURM batch script.

Plain text only (no Qt, no torch): the window shows what these return, and the user runs it on the nodes.
Every node runs `workbench train SPEC --run-id ID`, joined into one torchrun group by a c10d rendezvous;
with the workspace on a shared filesystem the window follows the run from its metrics database like any other.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from datetime import datetime

# the batch script sets HEAD_NODE; by hand, replace it with the address
HEAD_NODE_ENDPOINT = "$HEAD_NODE:29500"
RDZV_PORT = 29500
SPEC_NAME = "spec.toml"  # the names save_to gives the files, side by side
SCRIPT_NAME = "train.sbatch"

# Words the shell reads as they are: safe characters and $VAR / ${VAR} references (expanded on the node).
_PLAIN_WORD = re.compile(r"(?:\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*|[A-Za-z0-9_.:/@%+=,-])+")
# What an #SBATCH line can carry: sbatch reads those lines itself, without a shell to undo quoting.
_SBATCH_WORD = re.compile(r"[A-Za-z0-9_.,:+-]+")
_TIME = re.compile(r"(?:\d+-)?\d{1,3}:\d{2}:\d{2}")


def quote(value: str) -> str:
    """Quote a value for the shell, leaving $VAR references unquoted so that the node expands them."""
    value = str(value)
    if value and _PLAIN_WORD.fullmatch(value):
        return value
    return shlex.quote(value)


def _positive(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name}: {value!r} must be a whole number >= {minimum}")
    return value


def _run_id(run_id: str) -> str:
    if not run_id or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", run_id):
        raise ValueError(
            f"run id: {run_id!r} must be letters, digits, '.', '_' or '-' (it names the run's folder)"
        )
    return run_id


def _endpoint(endpoint: str) -> str:
    endpoint = endpoint.strip()
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"head node: {endpoint!r} must be HOST:PORT, e.g. node001:{RDZV_PORT}")
    return endpoint


def _torchrun_words(
    spec_path: str,
    *,
    nnodes: int,
    nproc_per_node: int,
    rdzv_endpoint: str,
    run_id: str,
    workspace: str,
    max_restarts: int,
) -> list[str]:
    """The torchrun command as shell words, each already quoted."""
    _positive("nodes", nnodes)
    _positive("processes per node", nproc_per_node)
    _positive("max restarts", max_restarts, 0)
    run_id = _run_id(run_id)
    rdzv_endpoint = _endpoint(rdzv_endpoint)
    if not str(spec_path).strip():
        raise ValueError("spec: a path to the spec file is needed")
    if not str(workspace).strip():
        raise ValueError("workspace: a folder every node can see is needed")
    return [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc_per_node}",
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=" + quote(rdzv_endpoint),
        "--rdzv-id=" + quote(run_id),
        f"--max-restarts={max_restarts}",
        "-m",
        "workbench",
        "train",
        quote(spec_path),
        "--run-id",
        quote(run_id),
        "--workspace",
        quote(workspace),
        "--set",
        "distributed=ddp",
    ]


def torchrun_command(
    spec_path: str,
    *,
    nnodes: int,
    nproc_per_node: int,
    rdzv_endpoint: str = HEAD_NODE_ENDPOINT,
    run_id: str,
    workspace: str,
    max_restarts: int = 3,
) -> str:
    """The one-line command to run on EACH node (the same line on all of them); ValueError names a bad value.

    `torchrun -m workbench` runs `python -m workbench` with torchrun's own Python, so the environment that has
    torch and workbench must be active on every node.
    """
    return " ".join(
        _torchrun_words(
            spec_path,
            nnodes=nnodes,
            nproc_per_node=nproc_per_node,
            rdzv_endpoint=rdzv_endpoint,
            run_id=run_id,
            workspace=workspace,
            max_restarts=max_restarts,
        )
    )


def sbatch_script(
    spec_path: str,
    *,
    nodes: int,
    gpus_per_node: int,
    time: str,
    run_id: str,
    workspace: str,
    partition: str = "",
    max_restarts: int = 3,
) -> str:
    """A SLURM batch script: one torchrun per node (srun), rendezvous at the first node of the allocation."""
    time = time.strip()
    if not _TIME.fullmatch(time):
        raise ValueError(f"time limit: {time!r} must be HH:MM:SS (or D-HH:MM:SS)")
    partition = partition.strip()
    if partition and not _SBATCH_WORD.fullmatch(partition):
        raise ValueError(f"partition: {partition!r} must be a SLURM partition name")
    words = _torchrun_words(
        spec_path,
        nnodes=nodes,
        nproc_per_node=gpus_per_node,
        rdzv_endpoint=f"$HEAD_NODE:{RDZV_PORT}",
        run_id=run_id,
        workspace=workspace,
        max_restarts=max_restarts,
    )
    # A few options a line, so that the command reads (and edits) easily.
    command = [
        " ".join(["srun", *words[:3]]),
        " ".join(words[3:6]),
        words[6],
        " ".join(words[7:11]),
        " ".join(words[11:]),
    ]
    partition_line = (
        f"#SBATCH --partition={partition}"
        if partition
        else "##SBATCH --partition=gpu".ljust(42) + "# EDIT: remove one # to pick a partition"
    )
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Workbench training run {run_id} on {nodes} node(s) x {gpus_per_node} GPU(s).",
            f"# Submit with: sbatch {SCRIPT_NAME}   (from the folder that holds it and {SPEC_NAME})",
            "# Lines marked EDIT are the ones clusters usually differ in.",
            f"#SBATCH --job-name={run_id}",
            f"#SBATCH --nodes={nodes}",
            "#SBATCH --ntasks-per-node=1               # one torchrun per node; it starts the GPU processes",
            f"#SBATCH --gpus-per-node={gpus_per_node}",
            f"#SBATCH --time={time}",
            partition_line,
            "#SBATCH --output=%x-%j.out                # EDIT: where SLURM writes the job's log",
            "",
            "set -euo pipefail",
            "",
            "# EDIT: make torch and workbench importable on every node, e.g.",
            "# source /shared/envs/workbench/bin/activate",
            "",
            "# The first node of the allocation hosts the rendezvous; the others find it there.",
            'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)',
            "export HEAD_NODE",
            "",
            " \\\n    ".join(command),
            "",
        ]
    )


def default_run_id(spec, now: datetime | None = None) -> str:
    """`cluster-<yyyymmdd-hhmmss>-<6 hex>`: the time, and a hash of the spec and time (same inputs, same
    id)."""
    now = now or datetime.now()
    stamp = f"{now:%Y%m%d-%H%M%S}"
    text = spec.to_json() if hasattr(spec, "to_json") else repr(spec)
    digest = hashlib.sha256(f"{stamp}\n{text}".encode()).hexdigest()[:6]
    return f"cluster-{stamp}-{digest}"
