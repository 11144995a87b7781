"""DDP scaling on this machine, as ratios measured in the same run (medians of interleaved repeats; these
machines are shared and noisy, so read ratios, not figures).

Rows, each `workbench train` headless in its own processes, training samples/s after the warm-up as the engine
reports it (`throughput.train_samples_per_s`, summed over ranks by rank 0):
  1 process                     the reference (torch's default threads: all cores)
  1 process, N thread(s)        the same with half the cores (OMP_NUM_THREADS): on a busy machine torch's default
                                threads can fight other work for the cores and crawl; this row shows when that is so
  ddp nproc=2                   distributed=ddp, two local ranks spawned by the workbench (gloo on 127.0.0.1)
  torchrun 2 nodes              two torchrun agents on loopback (--nnodes=2 --nproc-per-node=1, c10d rendezvous),
                                each running `python -m workbench train`: the multi-node path
  bare torchrun script          the same two-agent launch running a plain DDP loop (same model, data, global batch,
                                SGD, threads per rank) with no workbench: the goal is workbench/bare >= 0.9

On one machine two "nodes" share its cores (a rank takes cpu_count // LOCAL_WORLD_SIZE threads unless
OMP_NUM_THREADS is set, so two agents would oversubscribe it: the benchmark gives each half the cores through
OMP_NUM_THREADS); the ratios say what the workbench adds, not what a real cluster scales to.

    .venv/bin/python benchmarks/ddp_scaling.py [--quick] [--repeats 3] [--samples 8192] [--size 16]
        [--batch-size 64] [--epochs 2] [--model cnn]
"""  # noqa: E501

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import tomli_w

ROOT = Path(__file__).resolve().parents[1]
WARMUP_STEPS = 20  # the workbench's warm-up ends at its first read-back (log_every_steps = 20)
TORCHRUN_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "GROUP_RANK",
    "ROLE_RANK",
)

# A plain DDP loop as a user would write it for torchrun: the data normalised in memory, every global batch
# split across ranks, DDP, SGD; samples/s over all ranks after the same warm-up, measured on rank 0 between
# barriers.
BARE = textwrap.dedent("""
    import json, os, sys, time
    import torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from workbench.specs import DataSpec, ModelSpec
    from workbench.worker.data import load_dataset
    from workbench.worker.models import build_model

    cfg = json.loads(sys.argv[1])
    if not os.environ.get("OMP_NUM_THREADS"):  # the workbench's rule for a torchrun rank's threads
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    dataset = load_dataset(DataSpec.from_dict(cfg["dataset"]), workspace=cfg["workspace"])
    split = dataset.splits["train"]
    mean, std = dataset.normalization()
    x = split.images(torch.arange(len(split))).float().div(255)
    x = (x - torch.tensor(mean).view(1, -1, 1, 1)) / torch.tensor(std).view(1, -1, 1, 1)
    y = split.labels
    torch.manual_seed(cfg["seed"])
    model = build_model(ModelSpec.from_dict(cfg["model"]), input_shape=dataset.sample_shape)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    batch, per = cfg["batch_size"], cfg["batch_size"] // world
    steps = len(x) // batch
    done = 0
    start = None
    g = torch.Generator().manual_seed(cfg["seed"])
    for epoch in range(cfg["epochs"]):
        order = torch.randperm(len(x), generator=g)
        for step in range(steps):
            if done == cfg["warmup"]:
                dist.barrier()
                start, counted = time.perf_counter(), 0
            idx = order[step * batch + rank * per: step * batch + (rank + 1) * per]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x[idx]), y[idx])
            loss.backward()
            opt.step()
            done += 1
            if start is not None:
                counted += batch
    loss.item()
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(json.dumps({"train_samples_per_s": counted / elapsed}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(threads: int | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _rank0_result(outputs: list[str]) -> dict:
    for out in outputs:
        for line in out.splitlines():
            if line.startswith("{"):
                data = json.loads(line)
                if "train_samples_per_s" in data or "throughput" in data:
                    return data
    raise RuntimeError("no rank-0 result in the output")


def _samples_per_s(data: dict) -> float:
    if data.get("status", "done") != "done":
        raise RuntimeError(f"the run failed: {data.get('error')}")
    return float(
        data["throughput"]["train_samples_per_s"] if "throughput" in data else data["train_samples_per_s"]
    )


def _run(cmds: list[list[str]], timeout: float = 580, threads: int | None = None) -> dict:
    try:
        return _run_once(cmds, timeout, threads)
    except RuntimeError as exc:  # a shared machine: one retry, said out loud
        print(f"retrying once after: {str(exc)[:300]}", file=sys.stderr, flush=True)
        return _run_once(cmds, timeout, threads)


def _run_once(cmds: list[list[str]], timeout: float, threads: int | None) -> dict:
    procs = [
        subprocess.Popen(
            cmd, cwd=ROOT, env=_env(threads), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for cmd in cmds
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(proc.args[:6])}... exited {proc.returncode}:\n{err[-3000:]}")
        outputs.append(out)
    return _rank0_result(outputs)


def _torchrun(nodes: int, tail: list[str], rdzv_id: str) -> list[list[str]]:
    port = _free_port()
    return [
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nodes}",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            f"--rdzv-id={rdzv_id}",
            *tail,
        ]
        for _ in range(nodes)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat of a small run (a smoke test)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--model", default="cnn")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.samples, args.epochs = 1, 4096, 1

    tmp = Path(tempfile.mkdtemp(prefix="ddp-scaling-"))
    workspace = tmp / "ws"
    dataset = {"name": "fake", "size": args.samples, "image_size": [args.size, args.size], "num_classes": 10}
    base = {
        "dataset": dataset,
        "model": {"name": args.model, "num_classes": 10},
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "lr": 0.01,
        "optimizer": "sgd",
        "momentum": 0.9,
        "seed": 0,
        "device": "cpu",
        "log_every_steps": WARMUP_STEPS,
        "checkpoint_every": 0,
    }
    specs = {}
    for name, extra in (
        ("one", {}),
        ("ddp", {"distributed": "ddp", "nproc": 2}),
        ("torchrun", {"distributed": "ddp"}),
    ):
        specs[name] = tmp / f"{name}.toml"
        specs[name].write_text(tomli_w.dumps({**base, **extra}))
    bare_script = tmp / "bare_ddp.py"
    bare_script.write_text(BARE)
    bare_cfg = json.dumps(
        {
            "dataset": dataset,
            "model": {"name": args.model, "num_classes": 10},
            "workspace": str(workspace),
            "batch_size": args.batch_size,
            "epochs": args.epochs,
            "seed": 0,
            "warmup": WARMUP_STEPS,
        }
    )

    def workbench(spec: Path) -> list[str]:
        return ["-m", "workbench", "train", str(spec), "--workspace", str(workspace), "--json"]

    # Two "nodes" on one machine share its cores: each gets half, through OMP_NUM_THREADS as torchrun's users
    # do.
    per_node = max(1, (os.cpu_count() or 2) // 2)
    rows = {
        "1 process": [],
        f"1 process, {per_node} thread(s)": [],
        "ddp nproc=2": [],
        "torchrun 2 nodes": [],
        "bare torchrun script 2 nodes": [],
    }
    for repeat in range(args.repeats):  # interleaved, so drift on a shared machine hits every row alike
        rows["1 process"].append(_samples_per_s(_run([[sys.executable, *workbench(specs["one"])]])))
        rows[f"1 process, {per_node} thread(s)"].append(
            _samples_per_s(_run([[sys.executable, *workbench(specs["one"])]], threads=per_node))
        )
        rows["ddp nproc=2"].append(_samples_per_s(_run([[sys.executable, *workbench(specs["ddp"])]])))
        rows["torchrun 2 nodes"].append(
            _samples_per_s(
                _run(
                    _torchrun(2, workbench(specs["torchrun"]), f"bench-{os.getpid()}-{repeat}"),
                    threads=per_node,
                )
            )
        )
        rows["bare torchrun script 2 nodes"].append(
            _samples_per_s(
                _run(
                    _torchrun(2, [str(bare_script), bare_cfg], f"bare-{os.getpid()}-{repeat}"),
                    threads=per_node,
                )
            )
        )
        print(
            f"repeat {repeat + 1}/{args.repeats}: "
            + ", ".join(f"{k} {v[-1]:.0f}/s" for k, v in rows.items()),
            file=sys.stderr,
            flush=True,
        )

    medians = {name: statistics.median(values) for name, values in rows.items()}
    reference = medians["1 process"]
    print(
        f"DDP scaling, {args.model} on fake {args.size}x{args.size} ({args.samples} samples), batch "
        f"{args.batch_size}, {args.epochs} epoch(s), {os.cpu_count()} CPU cores, median of {args.repeats}"
    )
    print(f"{'row':<32} {'samples/s':>10} {'vs 1 process':>13}")
    for name, value in medians.items():
        print(f"{name:<32} {value:>10.0f} {value / reference:>12.2f}x")
    ratio = medians["torchrun 2 nodes"] / medians["bare torchrun script 2 nodes"]
    print(f"workbench under torchrun vs the bare torchrun script: {ratio:.2f}x (goal >= 0.90)")


if __name__ == "__main__":
    main()
