"""build_objective's choices and refusals, and what every objective promises the engine: float64 statistics of
stat_count() that merge by addition, batch_stats and TestEvaluator.add free of host syncs (run on the meta
device, where .item(), boolean masks, nonzero() and bincount all raise), JSON-safe results."""

from __future__ import annotations

import json
import math

import pytest
import torch

from workbench.errors import JobError
from workbench.worker.objectives import Objective, build_objective


def sample(task: str, device: str = "cpu", n: int = 6):
    gen = torch.Generator().manual_seed(n)
    if task == "classification":
        scores, target = torch.randn(n, 3, generator=gen), torch.randint(0, 3, (n,), generator=gen)
    elif task == "regression":
        scores, target = torch.randn(n, 2, generator=gen), torch.randn(n, 2, generator=gen)
    elif task == "multilabel":
        scores, target = torch.randn(n, 3, generator=gen), torch.randint(0, 2, (n, 3), generator=gen)
    else:
        scores, target = torch.randn(n, 3, 5, 5, generator=gen), torch.randint(0, 3, (n, 5, 5), generator=gen)
    return scores.to(device), target.to(device)


TASKS = ["classification", "regression", "multilabel", "segmentation"]


@pytest.mark.parametrize("task", TASKS)
def test_stats_shape_dtype_and_mergeable(task):
    objective = build_objective(task, num_outputs=3 if task != "regression" else 2)
    assert isinstance(objective, Objective) and objective.task == task
    scores, target = sample(task)
    objective.check_output(scores, target)
    whole = objective.batch_stats(scores, target)
    assert whole.dtype == torch.float64 and whole.shape == (objective.stat_count(),)
    merged = objective.batch_stats(scores[:2], target[:2]) + objective.batch_stats(scores[2:], target[2:])
    assert torch.allclose(whole, merged, rtol=1e-12, atol=0)
    metrics = objective.metrics(merged.tolist(), 6)
    assert objective.monitor in metrics
    assert objective.loss(scores, target).dtype == torch.float32
    assert objective.loss(scores, target).dim() == 0


@pytest.mark.parametrize("task", TASKS)
def test_no_host_sync_on_the_meta_device(task):
    objective = build_objective(task, num_outputs=3 if task != "regression" else 2)
    scores, target = sample(task, device="meta")
    stats = objective.batch_stats(scores, target)
    assert stats.device.type == "meta" and stats.shape == (objective.stat_count(),)
    objective.loss(scores, target)
    objective.check_output(scores, target)
    evaluator = objective.test_evaluator("test", ["a", "b", "c"])
    evaluator.add(torch.arange(6), scores, target)
    evaluator.add(torch.arange(6, 12), scores, target)


@pytest.mark.parametrize("task", TASKS)
def test_results_are_json_safe_even_when_empty_or_nan(task):
    objective = build_objective(task, num_outputs=3 if task != "regression" else 2)
    empty = objective.test_evaluator("test", ["a", "b", "c"]).result()
    json.dumps(empty, allow_nan=False)
    evaluator = objective.test_evaluator("test", ["a", "b", "c"])
    scores, target = sample(task)
    scores[0] = math.nan
    evaluator.add(torch.arange(6), scores, target)
    result = evaluator.result()
    json.dumps(result, allow_nan=False)
    assert result["task"] == task and result["split"] == "test"
    assert set(result["monitor"]) == {"name", "label", "higher_is_better", "value"}
    assert result["monitor"]["name"] == objective.monitor and objective.monitor in result["metrics"]


def test_build_objective_refusals():
    with pytest.raises(JobError, match=r"task=custom needs loss=file:"):
        build_objective("custom")
    with pytest.raises(JobError, match="task=auto"):
        build_objective("auto")
    with pytest.raises(JobError, match="unknown task"):
        build_objective("keypoints")
    with pytest.raises(JobError) as info:
        build_objective("regression", loss="cross_entropy")
    assert (
        str(info.value)
        == "loss=cross_entropy does not fit task=regression: its losses are auto, mse, l1, smooth_l1"
    )
    for task, bad, allowed in [
        ("classification", "bce", "auto, cross_entropy, nll, mse"),
        ("multilabel", "mse", "auto, bce"),
        ("segmentation", "nll", "auto, cross_entropy"),
    ]:
        with pytest.raises(JobError, match=f"loss={bad} does not fit task={task}: its losses are {allowed}$"):
            build_objective(task, loss=bad, num_outputs=3)
    with pytest.raises(ValueError, match="num_outputs"):
        build_objective("segmentation")


@pytest.mark.parametrize(
    "task,loss,text",
    [
        ("classification", "nll", "classification: nll loss, monitor val accuracy ↑"),
        ("regression", "l1", "regression: l1 loss, monitor val MAE ↓"),
        ("regression", "smooth_l1", "regression: smooth_l1 loss, monitor val MAE ↓"),
        ("multilabel", "auto", "multilabel: bce loss, monitor val mean AP ↑"),
        ("segmentation", "auto", "segmentation: cross_entropy loss, monitor val mIoU ↑"),
    ],
)
def test_describe(task, loss, text):
    assert build_objective(task, loss=loss, num_outputs=3).describe() == text
