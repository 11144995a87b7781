"""Classification objective: loss and accuracy bit-identical to the engine's build_loss/argmax, and the test
evaluator's output equal to the engine's evaluation before issue #20 (kept here, verbatim, as the
reference)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.objectives import build_objective
from workbench.worker.objectives.losses import build_loss


@torch.no_grad()
def reference_evaluate_test(model, split, classes, *, batch_size, worst_count=32) -> dict:
    """training/evaluate.evaluate_test as it was before the objectives (issue #20), on the CPU, in fp32."""
    k = len(classes)
    confusion = torch.zeros(k * k, dtype=torch.int64)
    index_parts, row_parts = [], []
    for indices, x, y in split.indexed_batches(batch_size, device=torch.device("cpu")):
        scores = model(x).float()
        probs = torch.softmax(scores, dim=1)
        confidence, predicted = probs.max(dim=1)
        confusion += torch.bincount(y * k + predicted.clamp(max=k - 1), minlength=k * k)
        index_parts.append(indices)
        row_parts.append(torch.stack([y.double(), predicted.double(), confidence.double()], dim=1))
    matrix = confusion.view(k, k)
    total = int(matrix.sum())
    correct = int(matrix.diagonal().sum())
    per_class = [
        float(matrix[i, i]) / float(matrix[i].sum()) if int(matrix[i].sum()) else None for i in range(k)
    ]
    worst = []
    if row_parts:
        rows = torch.cat([torch.cat(index_parts).double()[:, None], torch.cat(row_parts)], dim=1)
        rows = rows[rows[:, 1] != rows[:, 2]]
        rows = rows[rows[:, 3].argsort(descending=True)][:worst_count]
        worst = [
            {
                "split": split.name,
                "index": int(r[0]),
                "label": int(r[1]),
                "predicted": int(r[2]),
                "confidence": round(float(r[3]), 6),
            }
            for r in rows
        ]
    return {
        "classes": list(classes),
        "confusion_matrix": matrix.tolist(),
        "per_class_accuracy": per_class,
        "test_accuracy": correct / total if total else math.nan,
        "worst": worst,
    }


class TinySplit:
    """What evaluate_test needs of a split: a name and indexed_batches in split order."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, name: str = "test"):
        self.x, self.y, self.name = x, y, name

    def indexed_batches(self, batch_size, *, device, rank=0, world=1):
        for start in range(0, len(self.y), batch_size):
            idx = torch.arange(start, min(start + batch_size, len(self.y)))
            yield idx, self.x[idx].to(device), self.y[idx].to(device)


@pytest.mark.parametrize("loss", ["auto", "cross_entropy", "nll", "mse"])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_and_accuracy_bit_identical_to_build_loss_and_argmax(loss, smoothing):
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(37, 5, generator=gen).to(torch.bfloat16)
    y = torch.randint(0, 5, (37,), generator=gen)
    objective = build_objective("classification", loss=loss, label_smoothing=smoothing, num_outputs=5)
    expected = build_loss(loss, label_smoothing=smoothing, num_classes=5)(scores, y)
    got = objective.loss(scores, y)
    assert got.dtype == torch.float32
    assert torch.equal(got, expected)
    stats = objective.batch_stats(scores, y)
    assert stats.dtype == torch.float64 and stats.shape == (objective.stat_count(),)
    correct = int((scores.argmax(dim=1) == y).sum())
    assert float(stats[0]) == correct
    assert objective.metrics(stats.tolist(), 37) == {"acc": correct / 37}
    assert objective.loss_name == ("cross_entropy" if loss == "auto" else loss)


def test_metrics_nan_without_samples_and_monitor_text():
    objective = build_objective("classification", num_outputs=3)
    assert math.isnan(objective.metrics([0.0], 0)["acc"])
    assert objective.monitor == "acc" and objective.higher_is_better
    assert objective.monitor_text() == "val accuracy ↑"
    assert objective.monitor_text("train") == "train accuracy ↑"
    assert objective.describe() == "classification: cross_entropy loss, monitor val accuracy ↑"
    smoothed = build_objective("classification", label_smoothing=0.1, num_outputs=3)
    assert "label smoothing 0.1" in smoothed.describe()


@pytest.mark.parametrize("classes,samples,batch", [(3, 50, 8), (6, 101, 16), (4, 1, 4)])
def test_evaluator_equals_evaluate_test(classes, samples, batch):
    torch.manual_seed(classes)
    names = [f"c{i}" for i in range(classes)]
    x = torch.randn(samples, 7)
    y = torch.randint(0, classes, (samples,))
    model = nn.Linear(7, classes)
    split = TinySplit(x, y)
    today = reference_evaluate_test(model, split, names, batch_size=batch)
    evaluator = build_objective("classification", num_outputs=classes).test_evaluator("test", names)
    with torch.no_grad():
        for indices, xb, yb in split.indexed_batches(batch, device=torch.device("cpu")):
            evaluator.add(indices, model(xb).float(), yb)
    mine = evaluator.result()
    for key, value in today.items():
        if isinstance(value, float) and math.isnan(value):
            value = None  # result() is JSON-safe
        assert mine[key] == value, key
    assert mine["task"] == "classification" and mine["split"] == "test"
    assert mine["metrics"]["acc"] == mine["test_accuracy"]
    assert mine["monitor"] == {
        "name": "acc",
        "label": "accuracy",
        "higher_is_better": True,
        "value": mine["test_accuracy"],
    }
    assert ("top5" in mine["metrics"]) == (classes >= 5)
    json.dumps(mine, allow_nan=False)


def test_evaluator_worst_and_top5_by_hand():
    evaluator = build_objective("classification", num_outputs=6).test_evaluator("val", list("abcdef"))
    scores = torch.tensor(
        [
            [5.0, 0, 0, 0, 0, 0],  # right
            [0, 9.0, 0, 0, 0, 0],  # wrong (label 0), confident
            [0, 0, 1.0, 0.5, 0, 0],  # wrong (label 5), less confident
            [0, 0, 0, 0, 0, 3.0],
        ]
    )  # right
    y = torch.tensor([0, 0, 5, 5])
    evaluator.add(torch.tensor([10, 11, 12, 13]), scores, y)
    result = evaluator.result()
    assert [w["index"] for w in result["worst"]] == [11, 12]
    assert result["worst"][0]["label"] == 0 and result["worst"][0]["predicted"] == 1
    assert result["confusion_matrix"][0] == [1, 1, 0, 0, 0, 0]
    assert result["per_class_accuracy"] == [0.5, None, None, None, None, 0.5]
    assert result["metrics"]["acc"] == 0.5
    top5 = (scores.topk(5, dim=1).indices == y[:, None]).any(dim=1).float().mean().item()
    assert result["metrics"]["top5"] == top5


def test_empty_evaluator_is_json_safe():
    result = build_objective("classification", num_outputs=2).test_evaluator("test", ["a", "b"]).result()
    assert result["test_accuracy"] is None and result["monitor"]["value"] is None
    assert result["confusion_matrix"] == [[0, 0], [0, 0]]
    json.dumps(result, allow_nan=False)


def test_check_output_messages():
    objective = build_objective("classification", num_outputs=3)
    objective.check_output(torch.zeros(4, 3), torch.zeros(4, dtype=torch.int64))
    with pytest.raises(
        JobError,
        match=r"gives 10 scores per sample but the dataset has 3 classes .*: "
        r"set model.num_classes=3$",
    ) as info:
        objective.check_output(torch.zeros(4, 10), torch.zeros(4, dtype=torch.int64))
    assert (
        "classification" in str(info.value)
        and "(4, 10)" in str(info.value)
        and "(4,)" in str(info.value)
        and "int64" in str(info.value)
    )
    with pytest.raises(JobError, match="not one integer class index"):
        objective.check_output(torch.zeros(4, 3), torch.zeros(4))
    with pytest.raises(JobError, match=r"validation batch has shape \(4, 3, 2\)"):
        objective.check_output(torch.zeros(4, 3, 2), torch.zeros(4, dtype=torch.int64), where="validation")
