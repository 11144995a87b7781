"""Multilabel objective: BCE loss, exact AP against a hand-computed case and sklearn, binned (mergeable) mAP
close to the exact one, F1, the output check and the test evaluator."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import average_precision_score, f1_score

from workbench.errors import JobError
from workbench.worker.objectives import build_objective
from workbench.worker.objectives.multilabel import BINS, average_precision, binned_ap


def test_exact_ap_hand_computed():
    # Ranked: pos, neg, pos, neg -> precision at the positives 1 and 2/3: AP = (1 + 2/3) / 2.
    scores = torch.tensor([0.9, 0.8, 0.7, 0.1])
    truth = torch.tensor([1, 0, 1, 0])
    assert average_precision(scores, truth) == pytest.approx(5 / 6)
    # A tie between a positive and a negative at the top counts as one threshold: precision 1/2 there.
    assert average_precision(torch.tensor([0.5, 0.5, 0.1]), torch.tensor([1, 0, 1])) == pytest.approx(
        0.5 * 0.5 + 0.5 * (2 / 3)
    )
    assert math.isnan(average_precision(torch.tensor([0.3, 0.2]), torch.tensor([0, 0])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_ap_matches_sklearn(seed):
    gen = torch.Generator().manual_seed(seed)
    truth = (torch.rand(300, generator=gen) < 0.3).int()
    scores = torch.randn(300, generator=gen) + truth * 0.8
    scores = (scores * 4).round() / 4  # plenty of ties
    assert average_precision(scores, truth) == pytest.approx(
        average_precision_score(truth.numpy(), scores.numpy()), abs=1e-12
    )


def test_loss_is_bce_with_logits_in_float32():
    objective = build_objective("multilabel", num_outputs=4)
    scores = torch.randn(6, 4).to(torch.bfloat16)
    y = torch.randint(0, 2, (6, 4))
    got = objective.loss(scores, y)
    assert got.dtype == torch.float32
    assert torch.equal(got, F.binary_cross_entropy_with_logits(scores.float(), y.float()))
    assert objective.loss_name == "bce"
    assert objective.describe() == "multilabel: bce loss, monitor val mean AP ↑"


def _data(n=4000, labels=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    truth = (torch.rand(n, labels, generator=gen) < torch.linspace(0.05, 0.5, labels)).int()
    scores = torch.randn(n, labels, generator=gen) * 1.5 + (truth * 2 - 1) * torch.linspace(0.2, 2.0, labels)
    return scores, truth


def test_binned_map_close_to_exact_and_mergeable():
    scores, truth = _data()
    objective = build_objective("multilabel", num_outputs=5)
    whole = objective.batch_stats(scores, truth)
    assert whole.dtype == torch.float64 and whole.shape == (objective.stat_count(),) == (5 * (2 * BINS + 3),)
    halves = objective.batch_stats(scores[:1500], truth[:1500]) + objective.batch_stats(
        scores[1500:], truth[1500:]
    )
    assert torch.equal(whole, halves)
    metrics = objective.metrics(halves.tolist(), 4000)
    exact = sum(average_precision_score(truth[:, i].numpy(), scores[:, i].numpy()) for i in range(5)) / 5
    assert abs(metrics["map"] - exact) < 0.02
    pred = (torch.sigmoid(scores) >= 0.5).int().numpy()
    assert metrics["f1"] == pytest.approx(f1_score(truth.numpy(), pred, average="macro"), abs=1e-12)
    assert metrics["f1_micro"] == pytest.approx(f1_score(truth.numpy(), pred, average="micro"), abs=1e-12)


def test_binned_ap_by_hand_and_labels_without_positives():
    positives, negatives = [0] * BINS, [0] * BINS
    positives[-1], negatives[-1], positives[0] = 1, 1, 1  # top bin: one of each (tied); bottom: one positive
    assert binned_ap(positives, negatives) == pytest.approx(0.5 * 0.5 + 0.5 * (2 / 3))
    objective = build_objective("multilabel", num_outputs=2)
    truth = torch.tensor([[1, 0], [0, 0], [1, 0]])
    stats = objective.batch_stats(torch.tensor([[3.0, 1.0], [-3.0, -1.0], [2.0, 0.5]]), truth)
    metrics = objective.metrics(stats, 3)
    assert metrics["map"] == 1.0  # label 1 has no positives: left out of the mean
    # label 1: two false positives, F1 0; label 0: perfect.
    assert metrics["f1"] == pytest.approx(0.5) and metrics["f1_micro"] == pytest.approx(2 * 2 / (2 * 2 + 2))


def test_check_output_names_labels():
    objective = build_objective("multilabel", num_outputs=3)
    objective.check_output(torch.zeros(4, 3), torch.zeros(4, 3, dtype=torch.bool))
    with pytest.raises(JobError) as info:
        objective.check_output(torch.zeros(4, 10), torch.zeros(4, 3))
    message = str(info.value)
    assert message.startswith(
        "multilabel: the model gives 10 outputs per sample but the targets have 3 labels"
    )
    assert "(4, 10)" in message and "(4, 3)" in message and message.endswith("set model.num_classes=3")
    with pytest.raises(JobError, match="one 0/1 vector per sample"):
        objective.check_output(torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64))


def test_evaluator_exact_ap_per_label_and_worst():
    scores, truth = _data(n=600, labels=3, seed=3)
    names = ["cat", "dog", "bird"]
    evaluator = build_objective("multilabel", num_outputs=3).test_evaluator("test", names)
    for start in range(0, 600, 128):
        idx = torch.arange(start, min(start + 128, 600))
        evaluator.add(idx, scores[idx], truth[idx].float())
    result = evaluator.result()
    json.dumps(result, allow_nan=False)
    assert result["task"] == "multilabel" and result["monitor"]["name"] == "map"
    aps = [average_precision_score(truth[:, i].numpy(), scores[:, i].numpy()) for i in range(3)]
    assert [r["ap"] for r in result["per_label"]] == pytest.approx(aps, abs=1e-12)
    assert result["metrics"]["map"] == pytest.approx(sum(aps) / 3, abs=1e-12)
    assert result["monitor"]["value"] == result["metrics"]["map"]
    assert [r["label"] for r in result["per_label"]] == names
    assert [r["positives"] for r in result["per_label"]] == truth.sum(dim=0).tolist()
    pred = torch.sigmoid(scores) >= 0.5
    errors = (pred != truth.bool()).sum(dim=1)
    worst = result["worst"]
    assert len(worst) == 32
    assert [errors[w["index"]].item() for w in worst] == sorted(errors.tolist(), reverse=True)[:32]
    first = worst[0]
    i = first["index"]
    assert first["target"] == [names[j] for j in range(3) if truth[i, j]]
    assert first["predicted"] == [names[j] for j in range(3) if pred[i, j]]
    bce = F.binary_cross_entropy_with_logits(scores[i].double(), truth[i].double(), reduction="sum")
    assert first["loss"] == pytest.approx(float(bce))
    same = [w["loss"] for w in worst if errors[w["index"]] == errors[i]]
    assert same == sorted(same, reverse=True)


def test_evaluator_perfect_predictions_no_worst_and_nan_ap_is_none():
    evaluator = build_objective("multilabel", num_outputs=2).test_evaluator("val", ["a", "b"])
    evaluator.add(
        torch.tensor([0, 1]), torch.tensor([[5.0, -5.0], [-5.0, -5.0]]), torch.tensor([[1, 0], [0, 0]])
    )
    result = evaluator.result()
    assert result["worst"] == []
    assert result["per_label"][1]["ap"] is None and result["per_label"][0]["ap"] == 1.0
    json.dumps(result, allow_nan=False)
