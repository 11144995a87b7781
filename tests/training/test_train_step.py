"""The engine's step function on real digits batches: gradient accumulation, clipping, AMP, weight-decay
groups."""

from __future__ import annotations

import copy

import pytest
import torch

from workbench.errors import JobError
from workbench.specs import DataSpec, ModelSpec, TrainSpec
from workbench.worker.data import load_dataset
from workbench.worker.models import build_model
from workbench.worker.training import (
    TrainStep,
    build_loss,
    build_optimizer,
    param_groups,
    plan_epoch,
    shard_bounds,
)


@pytest.fixture(scope="module")
def digits_batch(tmp_path_factory):
    dataset = load_dataset(DataSpec(name="digits"), workspace=tmp_path_factory.mktemp("ws"))
    x, y = next(dataset.splits["train"].batches(64, shuffle=True, seed=1, augment=False))
    return x, y


def _mlp(seed: int = 0):
    torch.manual_seed(seed)
    return build_model(ModelSpec(name="mlp"), input_shape=(1, 8, 8))


def _grads(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_four_micro_batches_of_16_give_the_gradients_of_one_batch_of_64(digits_batch):
    x, y = digits_batch
    loss = build_loss("cross_entropy")
    whole, parts = _mlp(), _mlp()
    one = TrainStep(whole, torch.optim.SGD(whole.parameters(), lr=0.1), loss)
    one.accumulate(x, y, weight=1.0)
    four = TrainStep(parts, torch.optim.SGD(parts.parameters(), lr=0.1), loss)
    for i in range(4):
        four.accumulate(x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16], weight=16 / 64, sync=i == 3)
    for a, b in zip(_grads(whole), _grads(parts)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # And a step from there lands on the same weights.
    one.step()
    four.step()
    for a, b in zip(whole.parameters(), parts.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        assert a.grad is None  # step() clears the gradients for the next accumulation


def test_the_plan_weights_unequal_micro_batches_by_their_size():
    plan = plan_epoch(1437, 64, accum=4)
    assert plan.steps == 6 and plan.batch_sizes[-1] == 1437 % 64
    assert plan.group_total[:5] == (256,) * 5 and plan.group_total[-1] == 1437 - 5 * 256
    assert sum(plan.group_total) == plan.samples == 1437
    # DDP: near-equal shards, and a last batch smaller than the number of ranks is dropped.
    assert [shard_bounds(29, 2, r) for r in (0, 1)] == [(0, 15), (15, 29)]
    assert plan_epoch(65, 64, world=2).batch_sizes == (64,)


def test_clip_grad_norm_bounds_the_update_and_reports_the_norm_before(digits_batch):
    x, y = digits_batch
    model = _mlp()
    before = copy.deepcopy(model)
    step = TrainStep(
        model, torch.optim.SGD(model.parameters(), lr=1.0), build_loss("cross_entropy"), clip_grad_norm=0.05
    )
    step.accumulate(x, y * 0 + 3)  # every label 3: a large, consistent gradient
    norm = step.step()
    delta = torch.cat([(a - b).detach().flatten() for a, b in zip(model.parameters(), before.parameters())])
    assert float(norm) > 0.05  # clipping had work to do ...
    # ... and SGD with lr 1 moved exactly that far
    assert float(delta.norm()) == pytest.approx(0.05, rel=1e-3)


def test_clip_grad_value_bounds_every_element(digits_batch):
    x, y = digits_batch
    model = _mlp()
    before = copy.deepcopy(model)
    step = TrainStep(
        model, torch.optim.SGD(model.parameters(), lr=1.0), build_loss("cross_entropy"), clip_grad_value=1e-3
    )
    step.accumulate(x, y)
    step.step()
    largest = max(
        float((a - b).detach().abs().max()) for a, b in zip(model.parameters(), before.parameters())
    )
    assert largest == pytest.approx(1e-3, rel=1e-4)


def test_bf16_autocast_runs_the_forward_in_bf16_and_keeps_float32_weights(digits_batch):
    x, y = digits_batch
    torch.manual_seed(0)
    model = build_model(ModelSpec(name="cnn"), input_shape=(1, 8, 8))
    seen = []
    model.classifier.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    step = TrainStep(
        model, torch.optim.Adam(model.parameters(), lr=1e-2), build_loss("cross_entropy"), amp="bf16"
    )
    losses = []
    for _ in range(15):
        loss_sum, correct = step.accumulate(x, y)
        step.step()
        losses.append(float(loss_sum) / len(y))
    assert seen[0] == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]  # it learns this batch


def test_fp16_uses_a_grad_scaler(digits_batch):
    x, y = digits_batch
    model = _mlp()
    step = TrainStep(
        model, torch.optim.SGD(model.parameters(), lr=0.1), build_loss("cross_entropy"), amp="fp16"
    )
    assert step.scaler is not None
    loss_sum, _ = step.accumulate(x, y)
    step.step()
    assert torch.isfinite(loss_sum) and step.scaler.get_scale() > 1


def test_no_weight_decay_on_biases_and_norm_layers():
    torch.manual_seed(0)
    model = build_model(ModelSpec(name="cnn"), input_shape=(1, 8, 8))
    groups = param_groups(model, 0.01, True)
    decayed = {id(p) for p in groups[0]["params"]}
    exempt = {id(p) for p in groups[1]["params"]}
    assert groups[0]["weight_decay"] == 0.01 and groups[1]["weight_decay"] == 0.0
    assert id(model.classifier.bias) in exempt and id(model.features[1].weight) in exempt  # bias, BatchNorm
    assert id(model.classifier.weight) in decayed and id(model.features[0].weight) in decayed
    assert len(decayed | exempt) == len(list(model.parameters()))
    spec = TrainSpec.from_dict({"optimizer": "adamw", "weight_decay": 0.01, "no_decay_bias_norm": False})
    assert len(build_optimizer(model, spec).param_groups) == 1


@pytest.mark.parametrize("loss_name", ["cross_entropy", "nll", "mse"])
def test_each_loss_is_a_finite_scalar_that_prefers_the_right_class(loss_name):
    y = torch.tensor([0, 1, 2])
    right = torch.nn.functional.one_hot(y, 4).float() * 5
    wrong = torch.roll(right, 1, dims=1)
    loss = build_loss(loss_name)
    assert loss(right, y).dim() == 0 and float(loss(right, y)) < float(loss(wrong, y))


def test_a_torch_compile_failure_is_a_clear_error_that_suggests_compile_off(digits_batch):
    # A real torch.compile failure, in seconds: a backend that raises is wrapped by dynamo as
    # BackendCompilerFailed, as an inductor that cannot build its kernels is (that slower path: the heavy test
    # in test_train_engine.py).
    def broken_backend(graph_module, example_inputs):
        raise RuntimeError("no kernels today")

    x, y = digits_batch
    model = _mlp()
    torch._dynamo.reset()
    step = TrainStep(
        model,
        build_optimizer(model, TrainSpec()),
        build_loss("cross_entropy"),
        forward_model=torch.compile(model, backend=broken_backend),
        compiled=True,
    )
    with pytest.raises(JobError) as caught:
        step.accumulate(x, y)
    message = str(caught.value)
    assert message.startswith("compile: torch.compile failed (BackendCompilerFailed")
    assert "no kernels today" in message and "set compile=off" in message
