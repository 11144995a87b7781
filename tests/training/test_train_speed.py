"""The training engine's speed work (issues 12 and 14), checked for behaviour on any machine: no host reads in
the training step, data kept on the device giving the same run as data on the host, fused optimisers with the
same update, channels_last=auto (its rule, its cache, a trial that leaves the model alone), throughput
measured after a warm-up reported apart, and no import cycle in the engine. Nothing here asserts on a
clock."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from training_helpers import QUICK, done, merge, metrics, train

import workbench.worker.training as training_package
from workbench.specs import ModelSpec, TrainSpec
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.data import load_dataset
from workbench.worker.devices import HostReader
from workbench.worker.models import build_model
from workbench.worker.training import Trainer, TrainSetup, build_optimizer, param_groups
from workbench.worker.training.layout import cache_path, layout_key, resolve_channels_last, timed_trial
from workbench.worker.training.profiling import StepProfiler

AUGMENT = [
    {"name": "random_crop", "size": 8, "padding": 1},
    {"name": "hflip"},
    {"name": "rotation", "degrees": 10},
    {"name": "color_jitter", "brightness": 0.2},
    {"name": "random_erasing", "p": 0.5},
]
# What makes the host wait for the device: reading a value (.item(), bool(), float(), .tolist() all end in
# _local_scalar_dense) and the ops whose output size depends on values (boolean-mask indexing is a nonzero).
HOST_READS = {
    "_local_scalar_dense",
    "nonzero",
    "masked_select",
    "is_nonzero",
    "equal",
    "unique_dim",
    "_unique2",
    "masked_scatter",
}


class _Quiet:
    def progress(self, *args, **kwargs):
        pass

    metrics = log = artifact = progress

    def should_stop(self):
        return False


class _HostReads(TorchDispatchMode):
    """Records every op that reads device values back to the host; on the CPU the same ops are what would wait
    on a CUDA device, so the step is checked on any machine."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in HOST_READS:
            self.seen.append(str(func))
        elif name in ("index", "index_put", "index_put_") and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else ())
        ):
            # its kernel counts the mask's True values on the host
            self.seen.append(f"{func} with a boolean mask")
        return func(*args, **(kwargs or {}))


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
            device=torch.device("cpu"),
            checkpoints_dir=tmp_path,
            artifacts_dir=tmp_path,
            report=_Quiet(),
            workspace=tmp_path,
        )
    )
    trainer.profiler = StepProfiler(0, trainer.device, tmp_path, trainer.report, 0)
    return trainer


@pytest.mark.parametrize(
    "options",
    [
        {"optimizer": "sgd", "clip_grad_norm": 1.0, "scheduler": "onecycle"},
        {"optimizer": "adamw", "amp": "bf16", "grad_accum_steps": 2, "clip_grad_value": 0.5},
    ],
    ids=["sgd-clip-onecycle", "adamw-bf16-accum"],
)
def test_the_training_step_reads_nothing_back_from_the_device(tmp_path, options):
    # The data on the "device" (the CPU here: the same code as on CUDA), augmentation on, no read-back
    # interval inside the epoch: everything from gathering a batch to the optimiser step must stay on the
    # device. No layer statistics: a recorded step reads its statistics back once, by design
    # (test_layer_stats.py).
    spec = merge(
        QUICK,
        epochs=1,
        log_every_steps=10_000,
        layer_stats_every=0,
        dataset={"name": "digits", "on_device": True, "augment": AUGMENT},
        **options,
    )
    trainer = _trainer(tmp_path, spec)
    assert trainer.placement == "device"
    drained = []
    trainer._drain = lambda: drained.append(trainer.state.global_step)  # the read-back, checked elsewhere
    with _HostReads() as reads:
        trainer._train_epoch(0)
    assert trainer.state.global_step == trainer.plan.steps and drained == [trainer.plan.steps]
    assert reads.seen == []


def test_the_read_back_is_one_copy_per_interval_and_keeps_the_epoch_sums_on_the_host(tmp_path):
    trainer = _trainer(tmp_path, merge(QUICK, epochs=1, log_every_steps=5, layer_stats_every=0))
    reads = []
    read = trainer.reader.read
    trainer.reader.read = lambda tensor: reads.append(tuple(tensor.shape)) or read(tensor)
    trainer._train_epoch(0)
    # 23 steps: read-backs at 5, 10, 15, 20 and the epoch's end, each of one tensor: [loss, correct, samples]
    # and each step's [loss] and [correct] (5 steps, then the last 3).
    assert reads == [(3 + 2 * 5,)] * 4 + [(3 + 2 * 3,)]
    assert trainer.epoch_sums.device.type == "cpu" and int(trainer.epoch_sums[2]) == 1437


def test_with_accumulation_each_step_is_reported_once_and_the_steps_make_the_epoch(tmp_path):
    trainer = _trainer(tmp_path, merge(QUICK, epochs=1, log_every_steps=4, grad_accum_steps=3, batch_size=32))
    points = []
    trainer.report.metrics = lambda step, values: points.append((step, values))
    trainer._train_epoch(0)
    steps = [(step, values) for step, values in points if "train/loss" in values]
    assert [step for step, _ in steps] == list(range(1, trainer.plan.steps + 1))
    # Each step trains on up to 3 x 32 samples; its loss is their mean, so weighting by them gives the epoch's
    # mean.
    sizes = [trainer.plan.group_total[group] for group in range(trainer.plan.steps)]
    assert sum(sizes) == 1437
    epoch_loss = float(trainer.epoch_sums[0]) / 1437
    assert sum(v["train/loss"] * n for (_, v), n in zip(steps, sizes)) / 1437 == pytest.approx(
        epoch_loss, rel=1e-9
    )
    assert all(0.0 <= v["train/acc"] <= 1.0 and v["lr"] == pytest.approx(0.01) for _, v in steps)


def test_data_kept_on_the_device_trains_exactly_as_data_on_the_host(tmp_path):
    spec = merge(QUICK, epochs=1, deterministic=True, log_every_steps=1, device="cpu")  # cpu: placement host
    data = {
        "name": "digits",
        "augment": [{"name": "hflip"}, {"name": "random_crop", "size": 8, "padding": 1}],
    }
    host = done(train(tmp_path, merge(spec, dataset={**data, "on_device": False})))
    on_device = done(train(tmp_path, merge(spec, dataset={**data, "on_device": True})))
    assert host["data_placement"] == "host" and on_device["data_placement"] == "device"
    assert metrics(host["run_dir"])["train/loss"] == metrics(on_device["run_dir"])["train/loss"]
    first, second = load_state_dict(host["checkpoint"]), load_state_dict(on_device["checkpoint"])
    assert all(torch.equal(first[key], second[key]) for key in first)
    assert host["final"] == on_device["final"]


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_fused_optimizers_make_the_same_update(name):
    spec = TrainSpec(optimizer=name, lr=0.05, weight_decay=0.01)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    fused_model, loop_model = _cnn(), _cnn()
    fused = build_optimizer(fused_model, spec)
    assert fused.defaults["fused"] is True
    # The reference: torch's per-parameter loop, the same rule and groups.
    kind = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    extra = {"momentum": spec.momentum} if name == "sgd" else {}
    loop = kind(
        param_groups(loop_model, spec.weight_decay, spec.no_decay_bias_norm),
        lr=spec.lr,
        foreach=False,
        **extra,
    )
    for _ in range(5):
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(fused_model.parameters(), loop_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_rmsprop_has_no_fused_kernel_and_keeps_torch_default():
    model = torch.nn.Linear(4, 2)
    optimizer = build_optimizer(model, TrainSpec(optimizer="rmsprop"))
    assert not optimizer.defaults.get("fused")


def _cnn():
    torch.manual_seed(0)
    return build_model(ModelSpec(name="cnn"), input_shape=(1, 8, 8))


def _resolve(model, tmp_path, measure, **kw):
    options = {
        "sample_shape": (1, 8, 8),
        "batch_size": 64,
        "device": torch.device("cpu"),
        "workspace": tmp_path,
        **kw,
    }
    return resolve_channels_last(
        kw.pop("setting", "auto"),
        model=model,
        measure=measure,
        **{k: v for k, v in options.items() if k != "setting"},
    )


def test_auto_layout_keeps_the_faster_one_and_remembers_it(tmp_path):
    calls = []

    def measure(model, shape, device, amp):
        calls.append(shape)
        return {"contiguous": 1.0, "channels_last": 0.5}

    def never(*args):
        raise AssertionError("remembered: no second trial")

    model = _cnn()
    choice, why = _resolve(model, tmp_path, measure)
    assert choice is True and calls == [(64, 1, 8, 8)] and "500.0 ms channels-last" in why
    assert cache_path(tmp_path, layout_key(model, (64, 1, 8, 8), torch.device("cpu"), "none")).exists()
    choice, why = _resolve(model, tmp_path, never)
    assert choice is True and "remembered" in why
    # Another batch size or precision is another trial.
    assert _resolve(model, tmp_path, measure, batch_size=32)[0] is True and len(calls) == 2
    assert _resolve(model, tmp_path, measure, amp="bf16")[0] is True and len(calls) == 3


def test_auto_layout_keeps_contiguous_on_a_near_tie_and_when_timing_must_not_decide(tmp_path):
    def tie(*args):
        return {"contiguous": 1.0, "channels_last": 0.99}

    def never(*args):
        raise AssertionError("no trial expected")

    model = _cnn()
    assert _resolve(model, tmp_path, tie)[0] is False
    assert _resolve(model, tmp_path / "b", never, deterministic=True)[0] is False
    assert _resolve(model, tmp_path / "c", never, compiled=True)[0] is False
    mlp = build_model(ModelSpec(name="mlp"), input_shape=(1, 8, 8))
    assert _resolve(mlp, tmp_path / "d", never)[0] is False
    assert _resolve(model, tmp_path / "e", never, setting=True) == (True, "channels_last=true")
    assert _resolve(model, tmp_path / "f", never, setting=False) == (False, "channels_last=false")


def test_a_failing_trial_falls_back_to_contiguous_and_remembers_nothing(tmp_path):
    def broken(*args):
        raise RuntimeError("cannot copy this model")

    choice, why = _resolve(_cnn(), tmp_path, broken)
    assert choice is False and "trial failed" in why and "cannot copy" in why
    assert not (tmp_path / "cache").exists()


def test_the_timed_trial_leaves_the_model_and_every_random_stream_alone():
    model = _cnn()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    times = timed_trial(model, (16, 1, 8, 8), torch.device("cpu"), "none")
    assert set(times) == {"contiguous", "channels_last"} and all(t > 0 for t in times.values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # weights and BN statistics
    assert torch.equal(rng, torch.get_rng_state())
    assert all(p.grad is None for p in model.parameters())
    assert model.features[0].weight.is_contiguous()  # the model's own layout is untouched


def test_profiling_is_part_of_the_warm_up_not_of_the_throughput(tmp_path):
    result = done(train(tmp_path, merge(QUICK, epochs=2, profile_steps=8)))
    # The profiler's 2 warm-up steps and 8 recorded ones come before the measured steps (a read-back every 5).
    assert result["throughput"]["warmup_steps"] == 10
    assert result["throughput"]["train_samples_per_s"] > 0 and result["throughput"]["compile_s"] is None


def test_a_run_shorter_than_its_warm_up_still_reports_a_throughput(tmp_path):
    # 3 steps in all
    result = done(train(tmp_path, merge(QUICK, epochs=1, batch_size=512, log_every_steps=1)))
    assert result["throughput"]["train_samples_per_s"] > 0
    assert result["throughput"]["warmup_steps"] is None and result["throughput"]["warmup_s"] is None


@pytest.mark.slow
def test_compilation_is_reported_apart_from_the_throughput(tmp_path):
    result = done(
        train(tmp_path, merge(QUICK, epochs=2, compile="default", model={"name": "mlp"}, device="cpu"))
    )
    throughput = result["throughput"]
    # With torch.compile the whole first epoch (23 steps, its smaller last batch compiles again) is warm-up.
    assert throughput["warmup_steps"] == 23 and throughput["compile_s"] > 0
    assert throughput["warmup_s"] >= throughput["compile_s"] and throughput["train_samples_per_s"] > 0


def test_the_host_reader_gives_a_copy_the_caller_may_keep():
    reader = HostReader()
    tensor = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    host = reader.read(tensor)
    tensor.zero_()
    assert host.tolist() == [1.0, 2.0, 3.0]


def _imports(path: Path) -> set[str]:
    """Every workbench.worker.training module a file imports, at its top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("workbench.worker.training.")
        ):
            found.add(node.module.rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            found.update(
                a.name.rsplit(".", 1)[1]
                for a in node.names
                if a.name.startswith("workbench.worker.training.")
            )
    return found


def test_the_training_engine_has_no_import_cycle():
    folder = Path(training_package.__file__).parent
    graph = {p.stem: _imports(p) for p in folder.glob("*.py") if p.stem != "__init__"}
    assert "session" not in graph["distributed"] and "distributed" not in graph["rank"]

    def visit(module: str, path: list[str]) -> None:
        for child in sorted(graph.get(module, ())):
            assert child not in path, f"import cycle: {' -> '.join([*path, child])}"
            visit(child, [*path, child])

    for module in graph:
        visit(module, [module])
