"""Segmentation objective: per-pixel cross-entropy with ignore_index 255, the confusion matrix statistics
(sums, mergeable), mIoU and pixel accuracy on hand-made masks, the output check and the test evaluator."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from workbench.errors import JobError
from workbench.worker.objectives import IGNORE_INDEX, build_objective


def one_hot_scores(pred: torch.Tensor, classes: int) -> torch.Tensor:
    """Scores (N, C, H, W) whose argmax is `pred` (N, H, W)."""
    return F.one_hot(pred, classes).permute(0, 3, 1, 2).float() * 5


def test_loss_ignores_255():
    objective = build_objective("segmentation", num_outputs=3)
    scores = torch.randn(2, 3, 4, 4).to(torch.float16)
    target = torch.randint(0, 3, (2, 4, 4))
    target[0, :2] = IGNORE_INDEX
    got = objective.loss(scores, target)
    assert got.dtype == torch.float32
    keep = target != IGNORE_INDEX
    expected = F.cross_entropy(scores.float().permute(0, 2, 3, 1)[keep], target[keep])
    assert got == pytest.approx(float(expected), rel=1e-6)
    # uint8 masks with a channel dimension of 1 are accepted as they are
    assert torch.equal(objective.loss(scores, target.to(torch.uint8)[:, None]), got)


def test_miou_on_hand_made_masks_with_ignore():
    target = torch.tensor([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 255, 255]]])
    pred = torch.tensor(
        [[[0, 1, 1, 1], [0, 0, 1, 1], [2, 0, 0, 2]]]
    )  # the last two pixels are ignored whatever they predict
    objective = build_objective("segmentation", num_outputs=4)
    stats = objective.batch_stats(one_hot_scores(pred, 4), target)
    assert stats.dtype == torch.float64 and stats.shape == (16,)
    confusion = stats.view(4, 4)
    assert confusion.tolist() == [[3, 1, 0, 0], [0, 4, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0]]
    metrics = objective.metrics(stats.tolist(), 1)
    # IoU: class 0 = 3/(4+4-3), class 1 = 4/(4+5-4), class 2 = 1/(2+1-1); class 3 absent: left out.
    assert metrics["miou"] == pytest.approx((3 / 5 + 4 / 5 + 1 / 2) / 3)
    assert metrics["pixel_acc"] == pytest.approx(8 / 10)
    assert objective.monitor == "miou" and objective.higher_is_better
    assert objective.describe() == "segmentation: cross_entropy loss, monitor val mIoU ↑"


def test_all_ignored_is_nan_and_stats_are_mergeable():
    objective = build_objective("segmentation", num_outputs=3)
    metrics = objective.metrics(objective.batch_stats(torch.randn(1, 3, 2, 2), torch.full((1, 2, 2), 255)), 1)
    assert math.isnan(metrics["miou"]) and math.isnan(metrics["pixel_acc"])
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 3, 8, 8, generator=gen)
    target = torch.randint(0, 3, (6, 8, 8), generator=gen)
    target[target == 2] = torch.where(torch.rand(int((target == 2).sum()), generator=gen) < 0.5, 2, 255)
    whole = objective.batch_stats(scores, target)
    assert torch.equal(
        whole, objective.batch_stats(scores[:2], target[:2]) + objective.batch_stats(scores[2:], target[2:])
    )
    assert whole.sum() == (target != 255).sum()


def test_check_output_messages():
    objective = build_objective("segmentation", num_outputs=3)
    objective.check_output(torch.zeros(2, 3, 8, 8), torch.zeros(2, 8, 8, dtype=torch.int64))
    with pytest.raises(JobError) as info:
        objective.check_output(torch.zeros(2, 5, 8, 8), torch.zeros(2, 8, 8, dtype=torch.int64))
    message = str(info.value)
    assert message.startswith("segmentation: the model gives 5 scores per pixel but there are 3 classes")
    assert (
        "(2, 5, 8, 8)" in message and "(2, 8, 8)" in message and message.endswith("set model.num_classes=3")
    )
    with pytest.raises(JobError, match=r"\(batch, classes, 8, 8\).*F.interpolate"):
        objective.check_output(torch.zeros(2, 3, 4, 4), torch.zeros(2, 8, 8, dtype=torch.int64))
    with pytest.raises(JobError, match="not integer class maps"):
        objective.check_output(torch.zeros(2, 3, 8, 8), torch.zeros(2, 8, 8))


def test_evaluator_per_class_and_worst_images():
    objective = build_objective("segmentation", num_outputs=3)
    evaluator = objective.test_evaluator("test", ["bg", "road", "car"])
    target = torch.zeros(20, 4, 4, dtype=torch.int64)
    target[:, 2:] = 1
    target[:, 3, 3] = 2
    pred = target.clone()
    pred[7, 0] = 1  # image 7: 4 background pixels called road
    pred[13] = 0  # image 13: everything background
    target[19] = IGNORE_INDEX  # image 19: nothing to score
    for start in range(0, 20, 6):
        idx = torch.arange(start, min(start + 6, 20))
        evaluator.add(idx + 100, one_hot_scores(pred[idx], 3), target[idx])
    result = evaluator.result()
    json.dumps(result, allow_nan=False)
    keep = target != IGNORE_INDEX
    stats = objective.batch_stats(one_hot_scores(pred, 3), target)
    assert result["metrics"] == objective.metrics(stats, 20)
    assert result["monitor"]["value"] == result["metrics"]["miou"]
    assert [c["class"] for c in result["per_class"]] == ["bg", "road", "car"]
    assert [c["pixels"] for c in result["per_class"]] == [int(((target == k) & keep).sum()) for k in range(3)]
    assert result["per_class"][2]["iou"] == pytest.approx(18 / 19)
    worst = result["worst"]
    assert len(worst) == 16
    assert worst[0]["index"] == 113 and worst[0]["miou"] == pytest.approx(8 / 16 / 3)
    assert worst[0]["pixel_acc"] == pytest.approx(8 / 16)
    assert worst[0]["predicted_mask"] == pred[13].tolist()
    assert worst[1]["index"] == 107 and worst[1]["miou"] == pytest.approx((4 / 8 + 7 / 11 + 1) / 3)
    assert worst[2]["miou"] == 1.0 and worst[2]["index"] == 100  # ties keep split order
    assert 119 not in [w["index"] for w in worst[:15]]


def test_evaluator_leaves_out_big_masks():
    evaluator = build_objective("segmentation", num_outputs=2).test_evaluator("test", ["a", "b"])
    target = torch.zeros(1, 200, 200, dtype=torch.int64)
    evaluator.add(torch.tensor([0]), torch.randn(1, 2, 200, 200), target)
    result = evaluator.result()
    assert "predicted_mask" not in result["worst"][0]
