"""Regression objective: losses, metrics from mergeable sums against numpy formulas, R² on constant targets,
the output check and the test evaluator's scatter and worst samples."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workbench.errors import JobError
from workbench.worker.objectives import build_objective


@pytest.mark.parametrize(
    "loss,fn", [("auto", F.mse_loss), ("mse", F.mse_loss), ("l1", F.l1_loss), ("smooth_l1", F.smooth_l1_loss)]
)
def test_losses_in_float32(loss, fn):
    objective = build_objective("regression", loss=loss, num_outputs=2)
    scores = torch.randn(9, 2).to(torch.float16)
    y = torch.randn(9, 2, dtype=torch.float64)
    got = objective.loss(scores, y)
    assert got.dtype == torch.float32 and got.dim() == 0
    assert torch.equal(got, fn(scores.float(), y.float()))


def test_scores_n1_against_targets_n_are_flattened():
    objective = build_objective("regression")
    scores = torch.tensor([[1.0], [2.0], [4.0]])
    y = torch.tensor([1.0, 3.0, 3.0])
    objective.check_output(scores, y)
    assert float(objective.loss(scores, y)) == pytest.approx(2 / 3)
    stats = objective.batch_stats(scores, y)
    assert stats.tolist() == [2.0, 2.0, 7.0, 19.0, 3.0]


def test_metrics_against_numpy_and_mergeable():
    rng = np.random.default_rng(1)
    y = rng.normal(3.0, 2.0, size=(200, 3))
    p = y + rng.normal(0.0, 0.5, size=(200, 3))
    objective = build_objective("regression", num_outputs=3)
    scores, target = torch.from_numpy(p).float(), torch.from_numpy(y).float()
    whole = objective.batch_stats(scores, target)
    halves = objective.batch_stats(scores[:77], target[:77]) + objective.batch_stats(scores[77:], target[77:])
    assert whole.dtype == torch.float64 and whole.shape == (objective.stat_count(),)
    assert torch.allclose(whole, halves, rtol=1e-12)
    metrics = objective.metrics(halves.tolist(), 200)
    yf, pf = target.double().numpy(), scores.double().numpy()
    err = pf - yf
    assert metrics["mae"] == pytest.approx(np.abs(err).mean(), rel=1e-9)
    assert metrics["mse"] == pytest.approx((err**2).mean(), rel=1e-9)
    assert metrics["rmse"] == pytest.approx(math.sqrt((err**2).mean()), rel=1e-9)
    sst = ((yf - yf.mean()) ** 2).sum()
    assert metrics["r2"] == pytest.approx(1 - (err**2).sum() / sst, rel=1e-9)
    assert objective.monitor == "mae" and not objective.higher_is_better
    assert objective.describe() == "regression: mse loss, monitor val MAE ↓"


def test_r2_nan_on_constant_targets():
    objective = build_objective("regression")
    y = torch.full((1000,), 3.7)
    stats = objective.batch_stats(torch.linspace(0, 1, 1000), y)
    metrics = objective.metrics(stats, 1000)
    assert math.isnan(metrics["r2"])
    assert metrics["mae"] > 0
    assert all(math.isnan(v) for v in objective.metrics([0.0] * 5, 0).values())


def test_check_output_names_shapes_and_fix():
    objective = build_objective("regression", num_outputs=3)
    objective.check_output(torch.zeros(4, 3), torch.zeros(4, 3))
    with pytest.raises(JobError) as info:
        objective.check_output(torch.zeros(4, 10), torch.zeros(4, 3))
    message = str(info.value)
    assert message.startswith(
        "regression: the model gives 10 outputs per sample but the targets have 3 values"
    )
    assert "(4, 10)" in message and "(4, 3)" in message and "float32" in message
    assert message.endswith("set model.num_classes=3")
    with pytest.raises(JobError, match="batch of 4 samples"):
        objective.check_output(torch.zeros(3), torch.zeros(4))


def test_evaluator_scatter_worst_and_json():
    objective = build_objective("regression")
    evaluator = objective.test_evaluator("test", [])
    y = torch.arange(3000, dtype=torch.float32)
    p = y.clone()
    p[1234] += 50.0
    p[7] -= 20.0
    for start in range(0, 3000, 512):
        idx = torch.arange(start, min(start + 512, 3000))
        evaluator.add(idx, p[idx][:, None], y[idx])
    result = evaluator.result()
    assert result["task"] == "regression" and result["split"] == "test"
    assert result["monitor"]["name"] == "mae" and result["monitor"]["higher_is_better"] is False
    assert result["metrics"]["mae"] == pytest.approx(70 / 3000)
    assert len(result["scatter"]) == 2000
    assert result["scatter"][0] == [0.0, 0.0] and result["scatter"][-1] == [2999.0, 2999.0]
    assert len(result["worst"]) == 32
    assert result["worst"][0] == {
        "split": "test",
        "index": 1234,
        "target": 1234.0,
        "predicted": 1284.0,
        "residual": 50.0,
    }
    assert result["worst"][1]["index"] == 7 and result["worst"][1]["residual"] == -20.0
    json.dumps(result, allow_nan=False)


def test_evaluator_multi_output_and_nan():
    evaluator = build_objective("regression", num_outputs=2).test_evaluator("val", [])
    y = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    p = torch.tensor([[1.0, float("nan")], [3.5, 4.0]])
    evaluator.add(torch.tensor([5, 6]), p, y)
    result = evaluator.result()
    assert result["scatter"] == [[1.0, 1.0], [3.0, 3.5]]
    assert result["worst"][0]["index"] == 5 and result["worst"][0]["predicted"] == [1.0, None]
    assert result["metrics"]["mae"] is None  # NaN: JSON-safe as None
    json.dumps(result, allow_nan=False)
