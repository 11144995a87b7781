"""Training on a CUDA device (issue 12): fp16 with a GradScaler, pinned staging buffers, the dataset kept on
the device, and a training epoch that never makes the host wait (torch's sync debug mode set to "error").

Every test here needs CUDA and skips with that reason elsewhere; tests/training/test_train_speed.py checks the
same code paths with the CPU as their device; CUDA peak memory in `bench` is tested in
tests/bench/test_bench_engine.py.
"""

from __future__ import annotations

import pytest
import torch
from training_helpers import QUICK, done, merge, train

from workbench.specs import TrainSpec
from workbench.worker.data import load_dataset
from workbench.worker.data.placement import DEVICE, HOST, STAGED, Staging
from workbench.worker.models import build_model
from workbench.worker.training import Trainer, TrainSetup
from workbench.worker.training.profiling import StepProfiler

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device; torch sees none here"
)

CUDA = {"device": "cuda"}
AUGMENT = [
    {"name": "random_crop", "size": 8, "padding": 1},
    {"name": "hflip"},
    {"name": "rotation", "degrees": 10},
    {"name": "color_jitter", "brightness": 0.2},
    {"name": "random_erasing", "p": 0.5},
]


class _Quiet:
    def progress(self, *args, **kwargs):
        pass

    metrics = log = artifact = progress

    def should_stop(self):
        return False


def _trainer(tmp_path, spec: dict) -> Trainer:
    spec = TrainSpec.from_dict(spec)
    dataset = load_dataset(spec.dataset, workspace=tmp_path)
    dataset.normalization()  # computed (on the host) once before training, as run_training does
    torch.manual_seed(0)
    model = build_model(spec.model, input_shape=dataset.sample_shape)
    trainer = Trainer(
        TrainSetup(
            spec=spec,
            dataset=dataset,
            model=model,
            device=torch.device("cuda"),
            checkpoints_dir=tmp_path,
            artifacts_dir=tmp_path,
            report=_Quiet(),
            workspace=tmp_path,
        )
    )
    trainer.profiler = StepProfiler(0, trainer.device, tmp_path, trainer.report, 0)
    return trainer


def test_fp16_with_a_grad_scaler_trains_and_learns(tmp_path):
    result = done(train(tmp_path, merge(QUICK, epochs=3, amp="fp16", **CUDA)))
    assert result["device"] == "cuda" and result["amp"] == "fp16"
    assert result["final"]["val_accuracy"] > 0.8


def test_fp16_uses_a_fused_optimizer_that_takes_the_scaler_inf_check_on_the_device(tmp_path):
    trainer = _trainer(tmp_path, merge(QUICK, epochs=1, amp="fp16", optimizer="adamw", **CUDA))
    assert trainer.step_fn.scaler is not None
    assert trainer.optimizer.defaults["fused"] is True
    assert getattr(trainer.optimizer, "_step_supports_amp_scaling", False)  # no .item() on found_inf per step


@pytest.mark.parametrize(
    "options",
    [
        {"optimizer": "sgd", "dataset": {"name": "digits", "augment": AUGMENT}},
        {
            "optimizer": "adamw",
            "amp": "fp16",
            "clip_grad_norm": 1.0,
            "scheduler": "onecycle",
            "dataset": {"name": "digits", "augment": AUGMENT},
        },
        {"optimizer": "sgd", "amp": "bf16", "dataset": {"name": "digits", "on_device": False}},
    ],
    ids=["on-device-sgd", "on-device-fp16-adamw-clip", "staged-bf16"],
)
def test_a_training_epoch_never_makes_the_host_wait(tmp_path, options):
    # Read-backs every 5 steps included: they wait on one event, which the sync debug mode does not count.
    # Two epochs in the plan: the second is the one checked (OneCycle refuses steps past its plan).
    trainer = _trainer(tmp_path, merge(QUICK, epochs=2, log_every_steps=5, **CUDA, **options))
    expected = STAGED if options["dataset"].get("on_device") is False else DEVICE
    assert trainer.placement == expected
    # the first epoch: allocations, cuBLAS/cuDNN handles and kernel choices happen here
    trainer._train_epoch(0)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        trainer._train_epoch(1)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert trainer.state.global_step == 2 * trainer.plan.steps


def test_pinned_staging_buffers_feed_the_same_batches_as_the_host(tmp_path):
    staging = Staging(8, (1, 8, 8), torch.device("cuda"), pin=True)
    assert staging.pinned and all(image.is_pinned() for image in staging.images)
    train_split = load_dataset(QUICK["dataset"] | {"augment": AUGMENT}, workspace=tmp_path).splits["train"]
    host = list(train_split.batches(64, shuffle=True, seed=2, placement=HOST))
    staged = list(train_split.batches(64, shuffle=True, seed=2, device="cuda", placement=STAGED))
    assert len(host) == len(staged)
    for (xh, yh), (xs, ys) in zip(host, staged):
        assert xs.device.type == "cuda"
        torch.testing.assert_close(xs.cpu(), xh, rtol=1e-6, atol=1e-6)  # CUDA and CPU kernels may round apart
        assert torch.equal(ys.cpu(), yh)


def test_a_run_with_its_data_staged_through_pinned_memory_learns(tmp_path):
    result = done(
        train(
            tmp_path,
            merge(
                QUICK, epochs=3, dataset={"name": "digits", "on_device": False, "pin_memory": True}, **CUDA
            ),
        )
    )
    assert result["data_placement"] == STAGED and result["final"]["val_accuracy"] > 0.8


def test_the_dataset_is_kept_on_the_device_when_it_fits(tmp_path):
    dataset = load_dataset({"name": "digits"}, workspace=tmp_path)
    mode, why = dataset.prepare("cuda")
    assert mode == DEVICE and "kept on cuda" in why
    train_split = dataset.splits["train"]
    placed = dataset.on_device_store(train_split.store, "cuda")
    assert placed.data.device.type == "cuda" and placed.data.dtype == torch.uint8
    host = list(train_split.batches(64, shuffle=True, seed=1, placement=HOST))
    on_device = list(train_split.batches(64, shuffle=True, seed=1, device="cuda"))
    for (xh, yh), (xd, yd) in zip(host, on_device):
        torch.testing.assert_close(xd.cpu(), xh, rtol=1e-6, atol=1e-6)
        assert torch.equal(yd.cpu(), yh)
    dataset.release()
    assert dataset._on_device == {}
    result = done(train(tmp_path, merge(QUICK, epochs=3, **CUDA)))
    assert result["data_placement"] == DEVICE and result["final"]["val_accuracy"] > 0.8
