"""The custom objective on its own (in process, real torch): the user's loss and metrics functions from a file
the test writes, metrics weighted by batch size and mergeable as sums, the monitor and its direction, the test
evaluator, and every refusal naming what is wrong (the field, the file, the function, the metric's key)."""

from __future__ import annotations

import json
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F

from workbench.errors import JobError, SpecError
from workbench.specs import TrainSpec
from workbench.worker.objectives import build_objective
from workbench.worker.objectives.custom import CustomObjective

USER = """
import torch
import torch.nn.functional as F


def mse(outputs, target):
    return F.mse_loss(outputs.squeeze(1), target)


def scores(outputs, target):
    error = (outputs.squeeze(1) - target).abs()
    return {"mae": error.mean(), "within_half": float((error < 0.5).float().mean()), "batch": 1}


def as_string(outputs, target):
    return {"mae": 0.5, "note": "fine"}


def changing(outputs, target):
    return {"a": 1.0} if len(target) > 3 else {"b": 1.0}


def per_sample(outputs, target):
    return (outputs.squeeze(1) - target) ** 2


def detached(outputs, target):
    return F.mse_loss(outputs.squeeze(1), target).detach()


def a_number(outputs, target):
    return 0.5


def nan_loss(outputs, target):
    return outputs.sum() * float("nan")


def broken(outputs, target):
    return outputs[:, 7].sum()


def named_loss(outputs, target):
    return {"loss": 1.0}


NOT_A_FUNCTION = 3
"""


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("custom") / "objective.py"
    path.write_text(textwrap.dedent(USER))
    return path


def objective(user_file, loss="mse", metrics="", **kw) -> CustomObjective:
    return build_objective(
        "custom",
        loss=f"file:{user_file}:{loss}",
        metrics=f"file:{user_file}:{metrics}" if metrics else "",
        **kw,
    )


def batch(n: int, seed: int = 0, grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    outputs = torch.randn(n, 1, generator=g).requires_grad_(grad)
    return outputs, torch.randn(n, generator=g)


def test_loss_is_the_users_scalar_with_grad(user_file):
    o = objective(user_file)
    assert o.task == "custom" and o.monitor == "loss" and o.higher_is_better is False
    outputs, target = batch(5, grad=True)
    loss = o.loss(outputs, target)
    assert loss.dim() == 0 and loss.dtype == torch.float32 and loss.requires_grad
    assert torch.allclose(loss, F.mse_loss(outputs.squeeze(1), target))
    loss.backward()
    assert outputs.grad is not None
    assert "mse from" in o.describe() and "your permissions" in o.describe() and "val loss ↓" in o.describe()


def test_metrics_are_weighted_by_batch_size_and_merge_as_sums(user_file):
    o = objective(user_file, metrics="scores", monitor="within_half", monitor_mode="max")
    assert o.monitor_text() == "val within_half ↑"
    (o1, t1), (o2, t2) = batch(6, 1), batch(2, 2)
    s1, s2 = o.batch_stats(o1, t1), o.batch_stats(o2, t2)
    assert s1.dtype == torch.float64 and s1.shape == (o.stat_count(),)
    merged = o.metrics((s1 + s2).tolist(), 8)
    assert list(merged) == ["mae", "within_half", "batch"]  # the function's order; no loss (not the monitor)
    mae1, mae2 = (o1.squeeze(1) - t1).abs().mean(), (o2.squeeze(1) - t2).abs().mean()
    assert math.isclose(merged["mae"], float(6 * mae1 + 2 * mae2) / 8, rel_tol=1e-6)
    assert merged["batch"] == 1.0
    # Against the mean over every sample, an error of 1 on each of the last batch's 2 samples moves MAE by
    # 2/8.
    all_error = torch.cat([(o1.squeeze(1) - t1).abs(), (o2.squeeze(1) - t2).abs()]).mean()
    assert math.isclose(merged["mae"], float(all_error), rel_tol=1e-6)


def test_monitor_loss_puts_the_validation_loss_among_the_metrics(user_file):
    o = objective(user_file, metrics="scores")
    (o1, t1), (o2, t2) = batch(6, 5), batch(2, 6)
    with torch.no_grad():  # validation: the loop finds its monitor among the metrics
        stats = o.batch_stats(o1, t1) + o.batch_stats(o2, t2)
    values = o.metrics(stats, 8)
    expected = (6 * F.mse_loss(o1.squeeze(1), t1) + 2 * F.mse_loss(o2.squeeze(1), t2)) / 8
    assert math.isclose(values["loss"], float(expected), rel_tol=1e-6) and "mae" in values
    # A training step has its loss already: its statistics do not compute it again.
    training = o.metrics(o.batch_stats(o1, t1), 6)
    assert "loss" not in training and "mae" in training


def test_test_evaluator_writes_loss_metrics_and_the_monitor(user_file):
    o = objective(user_file, metrics="scores", monitor="mae", monitor_mode="min")
    evaluator = o.test_evaluator("test", [])
    for seed, n in ((3, 5), (4, 3)):
        outputs, target = batch(n, seed)
        evaluator.add(torch.arange(n), outputs, target)
    result = json.loads(json.dumps(evaluator.result()))
    assert result["task"] == "custom" and result["split"] == "test" and result["samples"] == 8
    assert result["monitor"] == {
        "name": "mae",
        "label": "mae",
        "higher_is_better": False,
        "value": result["metrics"]["mae"],
    }
    assert {"loss", "mae", "within_half", "batch"} == set(result["metrics"])
    empty = o.test_evaluator("test", []).result()
    assert empty["samples"] == 0 and empty["monitor"]["value"] is None


def test_a_non_number_metric_names_its_key(user_file):
    o = objective(user_file, metrics="as_string")
    with pytest.raises(
        JobError, match=r"as_string from .*objective\.py returned str 'fine' for the key 'note'"
    ):
        o.batch_stats(*batch(4))


def test_metric_names_must_stay_the_same(user_file):
    o = objective(user_file, metrics="changing")
    o.batch_stats(*batch(4))
    with pytest.raises(JobError, match=r"without a and with b as well for a later batch"):
        o.batch_stats(*batch(2))


def test_the_metric_name_loss_is_taken(user_file):
    with pytest.raises(JobError, match=r"returned the key 'loss'"):
        objective(user_file, metrics="named_loss").batch_stats(*batch(3))


def test_an_unknown_monitor_lists_the_metrics_returned(user_file):
    o = objective(user_file, metrics="scores", monitor="accuracy", monitor_mode="max")
    with pytest.raises(
        JobError,
        match=r"monitor: 'accuracy' is not one of the metrics .* returns: mae, within_half, "
        r"batch \(or loss\)",
    ):
        o.batch_stats(*batch(4))


@pytest.mark.parametrize(
    "fn, message",
    [
        ("per_sample", r"returned a tensor of shape \(4,\); it must return one number"),
        ("detached", r"returned a tensor with no gradient"),
        ("a_number", r"returned a float; it must return a scalar tensor"),
        ("nan_loss", r"returned nan on the first batch"),
        (
            "broken",
            r"objective\.py, line \d+: IndexError: .* \(in loss function broken from .*objective\.py\)",
        ),
    ],
)
def test_a_bad_loss_is_refused_naming_the_function(user_file, fn, message):
    with pytest.raises(JobError, match=message) as caught:
        objective(user_file, loss=fn).loss(*batch(4, grad=True))
    assert str(user_file) in str(caught.value)


@pytest.mark.parametrize(
    "ref, message",
    [
        ("missing", r"loss: 'missing' in .*objective\.py is not defined there; it defines: .*mse"),
        ("NOT_A_FUNCTION", r"loss: 'NOT_A_FUNCTION' in .* is not a function"),
    ],
)
def test_a_missing_function_names_the_file(user_file, ref, message):
    with pytest.raises(JobError, match=message):
        objective(user_file, loss=ref)


def test_a_missing_file_and_a_broken_file(tmp_path, user_file):
    with pytest.raises(JobError, match=r"^metrics: the file .*nowhere\.py does not exist"):
        build_objective("custom", loss=f"file:{user_file}:mse", metrics=f"file:{tmp_path}/nowhere.py:f")
    broken = tmp_path / "broken.py"
    broken.write_text("def f(outputs, target:\n    return 1\n")
    with pytest.raises(JobError, match=r"^loss: .*broken\.py, line 1: syntax error"):
        build_objective("custom", loss=f"file:{broken}:f")


def test_custom_needs_a_file_loss_and_a_direction_for_a_metric(user_file):
    with pytest.raises(JobError, match=r"loss: task=custom needs loss=file:"):
        build_objective("custom", loss="mse")
    with pytest.raises(JobError, match=r"monitor_mode: auto cannot tell .* mae"):
        objective(user_file, metrics="scores", monitor="mae")


def test_the_spec_takes_the_custom_fields_and_refuses_what_does_not_fit():
    spec = TrainSpec.from_dict(
        {
            "loss": "file:objective.py:mse",
            "metrics": "file:objective.py:scores",
            "monitor": "mae",
            "monitor_mode": "min",
        }
    )
    assert spec.task == "custom"  # task=auto with a file: loss means custom
    assert TrainSpec.from_toml(spec.to_toml()) == spec
    refusals = [
        ({"task": "custom"}, r"^loss: task=custom needs loss=file:<path.py>:<fn>"),
        (
            {"task": "regression", "loss": "file:o.py:f"},
            r"^loss: 'file:o.py:f' is a custom loss; set task=custom",
        ),
        ({"metrics": "file:o.py:m"}, r"^metrics: .* is for task=custom"),
        ({"loss": "file:o.py:f", "metrics": "o.py"}, r"^metrics: 'o.py' is not allowed"),
        (
            {"loss": "file:o.py:f", "monitor": "acc"},
            r"^monitor: 'acc' names a metric, but there is no metrics",
        ),
        (
            {"loss": "file:o.py:f", "metrics": "file:o.py:m", "monitor": "acc"},
            r"^monitor_mode: auto cannot tell",
        ),
        (
            {"loss": "file:o.py:f", "monitor_mode": "max"},
            r"^monitor_mode: max would keep the epoch with the highest",
        ),
        ({"loss": "file:o.py:f", "monitor_mode": "up"}, r"^monitor_mode: 'up' is not allowed"),
    ]
    for data, message in refusals:
        with pytest.raises(SpecError, match=message):
            TrainSpec.from_dict(data)


def test_relative_files_are_anchored_beside_the_spec(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "objective.py").write_text(textwrap.dedent(USER))
    (project / "train.toml").write_text(
        'loss = "file:objective.py:mse"\nmetrics = "file:objective.py:scores"\n'
    )
    monkeypatch.chdir(tmp_path)
    spec = TrainSpec.load(project / "train.toml")
    assert spec.loss == f"file:{project / 'objective.py'}:mse"
    assert spec.metrics == f"file:{project / 'objective.py'}:scores"
