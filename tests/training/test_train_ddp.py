"""DDP on two CPU processes (gloo): the same final weights as one process with the same global batch; and on
two GPUs (nccl) where a machine has them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from training_helpers import Recorder, done, failed, merge, metrics, train

from workbench.worker.checkpoints import load_state_dict
from workbench.worker.training import load_last

# Shuffled with one seed, no augmentation, SGD without momentum, a small mlp, deterministic kernels. Batches
# of 64 make the last batch of an epoch 29 samples: shards of 15 and 14, which the engine weights to the
# global mean. device=cpu: these tests are about gloo, whatever accelerator the machine has (auto would pick
# CUDA and nccl).
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


def _nccl_skip_reason() -> str:
    if not torch.cuda.is_available():
        return "nccl needs CUDA; this machine has no CUDA device"
    if torch.cuda.device_count() < 2:
        return f"nccl DDP needs 2 CUDA devices; this machine has {torch.cuda.device_count()}"
    if not torch.distributed.is_nccl_available():
        return "this torch build has no nccl"
    return ""


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    one = done(train(tmp_path, SPEC))
    recorder = Recorder()
    two = done(train(tmp_path, merge(SPEC, distributed="ddp", nproc=2), recorder=recorder))
    assert two["distributed"] == {"backend": "gloo", "nproc": 2, "cpu_count": two["distributed"]["cpu_count"]}
    first, second = load_state_dict(one["checkpoint"]), load_state_dict(two["checkpoint"])
    assert set(first) == set(second)
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-4, atol=1e-5)
    assert two["global_steps"] == one["global_steps"] == 46
    assert two["final"]["val_accuracy"] == pytest.approx(one["final"]["val_accuracy"], abs=0.01)
    # Rank 0 relayed metrics, progress and logs to the task: the run looks like any other.
    series = metrics(two["run_dir"])
    assert series["train/loss"][0] == metrics(one["run_dir"])["train/loss"][0]
    torch.testing.assert_close(
        torch.tensor(series["train/loss"][1]),
        torch.tensor(metrics(one["run_dir"])["train/loss"][1]),
        rtol=1e-4,
        atol=1e-5,
    )
    assert any(log["text"].startswith("epoch 2/2") for log in recorder.of("log"))


# CI time (about a minute); test_two_processes_match_one_process keeps DDP in the default run
@pytest.mark.heavy
def test_a_ddp_rank_error_comes_back_as_the_job_error(tmp_path):
    message = failed(train(tmp_path, merge(SPEC, epochs=1, lr=10, distributed="ddp", nproc=2)))
    assert "the training loss diverged" in message


# CI time (over two minutes of three processes); cancel and resume of one process stay default
@pytest.mark.heavy
def test_cancel_stops_every_rank_at_the_same_step_and_resume_finishes(tmp_path):
    stop = threading.Event()
    recorder = Recorder(
        on_progress=lambda p: stop.set() if p["text"].startswith("epoch") and p["done"] >= 10 else None
    )
    spec = merge(SPEC, epochs=3, batch_size=16, distributed="ddp", nproc=2)  # 90 steps an epoch
    result = train(tmp_path, spec, recorder=recorder, stop=stop)
    assert result["status"] == "cancelled", result
    saved = load_last(Path(result["run_dir"]) / "checkpoints" / "last.pt")["state"]
    assert 10 <= saved["global_step"] < 270
    resumed = done(train(tmp_path, spec, resume=result["run_dir"]))
    assert resumed["epochs_completed"] == 3 and resumed["global_steps"] == 270


@pytest.mark.slow
@pytest.mark.skipif(bool(_nccl_skip_reason()), reason=_nccl_skip_reason() or "runs")
def test_two_gpus_with_nccl_match_one_gpu(tmp_path):
    spec = merge(SPEC, device="cuda")
    one = done(train(tmp_path, spec))
    two = done(train(tmp_path, merge(spec, distributed="ddp", nproc=2)))
    assert two["distributed"]["backend"] == "nccl" and two["device"] == "cuda"
    assert two["global_steps"] == one["global_steps"] == 46
    first, second = load_state_dict(one["checkpoint"]), load_state_dict(two["checkpoint"])
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=1e-3, atol=1e-4)
    assert two["final"]["val_accuracy"] == pytest.approx(one["final"]["val_accuracy"], abs=0.02)
