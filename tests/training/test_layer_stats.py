"""Layer statistics while training (#21 part 2): what a recorded step holds, that it matches the model, and
that a dead ReLU layer, vanishing gradients and a far-off update ratio are named in the log."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from stored_models import DEAD_NET
from torch import nn
from training_helpers import QUICK, Recorder, done, merge, train

from workbench.layer_records import BINS, KINDS, SCALARS, findings, read_records, record_paths
from workbench.worker.training.layer_stats import LayerStats


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("ws")
    recorder = Recorder()
    result = done(train(workspace, merge(QUICK, epochs=1, layer_stats_every=10), recorder=recorder))
    return result, recorder


def test_a_digits_run_records_every_layer_at_step_one_and_every_interval(digits_run):
    result, recorder = digits_run
    records = read_records(result["run_dir"])
    # 23 steps: step 1, then every 10th.
    assert [record["step"] for record in records] == [1, 10, 20]
    names = records[0]["layers"]
    assert names == ["features.0", "features.4", "classifier"]  # the cnn's convs and its linear head
    for record in records:
        assert record["scalars"].shape == (len(names), len(SCALARS))
        assert record["counts"].shape == (len(names), len(KINDS), BINS)
        scalars = dict(zip(SCALARS, record["scalars"].T))
        assert (scalars["weight_norm"] > 0).all() and (scalars["grad_norm"] > 0).all()
        assert ((scalars["update_ratio"] > 0) & (scalars["update_ratio"] < 1)).all()
        assert (scalars["act_std"] > 0).all()
    # Each histogram counts every value of what it describes: the first layer's weights, a batch's
    # activations.
    first = records[0]
    weights = first["counts"][0, KINDS.index("weights")].sum()
    gradients = first["counts"][0, KINDS.index("gradients")].sum()
    assert weights == gradients > 0
    low, high = first["ranges"][0, KINDS.index("weights")]
    assert low < 0 < high
    # The artifact events stream each recorded step to the window as it is written.
    streamed = [event["path"] for event in recorder.of("artifact") if event.get("kind") == "layer_stats"]
    assert streamed == [str(path) for path in record_paths(result["run_dir"])]


def test_the_statistics_match_the_model_they_describe():
    # The hooks' numbers against a plain recomputation on a known model and batch.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 1, 8, 8), torch.randint(0, 10, (32,))
    stats = LayerStats(model, 5)
    assert stats.names == ["1", "3"]
    hidden = model[1](model[0](x)).detach()
    stats.begin(1)
    with stats.watch():
        nn.functional.cross_entropy(model(x), y).backward()
    grad, before = model[1].weight.grad.clone(), model[1].weight.detach().clone()
    stats.after_backward()
    optimizer.step()
    record = stats.finish(lambda tensor: tensor.detach().cpu())
    row = dict(zip(SCALARS, record["scalars"][0]))
    assert math.isclose(row["weight_norm"], before.norm().item(), rel_tol=1e-5)
    assert math.isclose(row["grad_norm"], grad.norm().item(), rel_tol=1e-5)
    update = (model[1].weight.detach() - before).norm() / before.norm()
    assert math.isclose(row["update_ratio"], update.item(), rel_tol=1e-4)
    assert math.isclose(row["act_mean"], hidden.mean().item(), rel_tol=1e-4, abs_tol=1e-6)
    assert math.isclose(row["act_std"], hidden.std().item(), rel_tol=1e-4)
    assert math.isclose(row["dead_fraction"], float((hidden.amax(dim=0) <= 0).float().mean()), abs_tol=1e-9)
    assert math.isnan(record["scalars"][1, SCALARS.index("dead_fraction")])  # the logits feed no ReLU
    activations = record["counts"][0, KINDS.index("activations")]
    assert activations.sum() == hidden.numel()
    low, high = record["ranges"][0, KINDS.index("activations")]
    assert np.isclose(low, hidden.min().item()) and np.isclose(high, hidden.max().item())
    expected = torch.histc(hidden, bins=BINS, min=low, max=high)
    # the top edge's value lands in the last bin alike
    assert np.abs(activations - expected.numpy()).sum() <= 2
    assert stats.pending is None and not model[1]._forward_hooks  # nothing left hooked


def test_a_dead_relu_layer_is_named_in_the_log_and_the_record(tmp_path):
    model_file = tmp_path / "dead.py"
    model_file.write_text(DEAD_NET)
    recorder = Recorder()
    spec = merge(QUICK, epochs=1, model={"name": f"file:{model_file}:DeadNet"}, layer_stats_every=10)
    result = done(train(tmp_path, spec, recorder=recorder))
    record = read_records(result["run_dir"])[0]
    assert record["layers"] == ["fc1", "fc2", "fc3"]
    dead = dict(zip(record["layers"], record["scalars"][:, SCALARS.index("dead_fraction")]))
    assert dead["fc2"] == 1.0 and dead["fc1"] < 0.9
    kinds = {(layer, kind) for layer, kind, _ in findings(record)}
    assert ("fc2", "dead") in kinds and ("fc1", "dead") not in kinds
    warnings = [log["text"] for log in recorder.of("log") if log["level"] == "warning"]
    dead_warnings = [text for text in warnings if "units are dead" in text]
    # said once
    assert len(dead_warnings) == 1 and "layer fc2: 100% of its units are dead" in dead_warnings[0]
    # Nothing flows back past fc2's dead ReLU: every layer's weights get no gradient, each named once.
    assert sum("gets no gradient at all" in text for text in warnings) == 3


def test_vanishing_gradients_and_far_off_updates_are_findings():
    record = {
        "step": 50,
        "layers": ["conv1", "mid", "fc"],
        "scalars": np.array(
            [[1.0, 1e-7, 1e-7, 0, 1, 0.0], [1.0, 1e-3, 1e-3, 0, 1, 0.0], [1.0, 1e-2, 0.5, 0, 1, np.nan]]
        ),
    }
    found = {(layer, kind): text for layer, kind, text in findings(record)}
    assert (
        "vanishing gradients" in found[("conv1", "gradient_spread")]
        and "conv1" in found[("conv1", "gradient_spread")]
    )
    assert "1e+05x apart" in found[("conv1", "gradient_spread")]
    assert (
        ("conv1", "update_small") in found
        and ("fc", "update_large") in found
        and ("mid", "update_small") not in found
    )


@pytest.mark.parametrize("functional", [False, True], ids=["modules", "functional"])
def test_dead_units_are_seen_through_a_norm_and_an_in_place_relu(functional):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.head = nn.Linear(4, 2)
            with torch.no_grad():  # the bn's shift kills two of its four channels
                self.bn.bias.copy_(torch.tensor([0.0, -100.0, 0.0, -100.0]))

        def forward(self, x):
            x = self.bn(self.conv(x))
            x = torch.relu_(x) if functional else self.relu(x)
            if x.sum() > 0:  # data-dependent control flow: nothing here needs the model to trace
                x = x * 1.0
            return self.head(x.mean(dim=(2, 3)))

    model = Block()
    stats = LayerStats(model, 1)
    assert stats.names == ["conv", "head"]
    stats.begin(1)
    with stats.watch():
        model(torch.randn(8, 3, 6, 6)).sum().backward()
    stats.after_backward()
    record = stats.finish(lambda tensor: tensor.detach())
    dead = dict(zip(record["layers"], record["scalars"][:, SCALARS.index("dead_fraction")]))
    assert dead["conv"] == 0.5 and math.isnan(dead["head"])
    assert not model.conv._forward_hooks and not model.bn._forward_hooks


def test_layer_stats_every_zero_records_nothing(tmp_path):
    result = done(train(tmp_path, merge(QUICK, epochs=1, model={"name": "mlp"}, layer_stats_every=0)))
    assert record_paths(result["run_dir"]) == []


def test_show_on_graph_paints_the_latest_recorded_step(digits_run, tmp_path):
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    result, _ = digits_run
    workspace = Path(result["run_dir"]).parent
    graph = run_task(
        get_task("graph.build"), {"source": {"run": result["run_dir"]}}, emit=Recorder(), workspace=workspace
    )
    assert graph["status"] == "done", graph.get("error")
    latest = read_records(result["run_dir"])[-1]
    overlay = graph["overlays"]["layers_grad_norm"]
    assert overlay["label"] == f"Gradient norm (step {latest['step']})"
    index = json.loads(Path(graph["overlays_json"]).read_text())["overlays"]
    expected = dict(zip(latest["layers"], latest["scalars"][:, SCALARS.index("grad_norm")]))
    assert index["layers_grad_norm"]["values"] == pytest.approx(expected)
    assert "layers_update_ratio" in index and "layers_dead_fraction" in index


def test_small_updates_at_a_schedules_tail_are_no_finding():
    scalars = np.array([[1.0, 1e-2, 1e-7, 0, 1, 0.0], [1.0, 1e-2, 1e-3, 0, 1, 0.0]])
    record = {"step": 500, "layers": ["a", "b"], "scalars": scalars, "lr": 1e-5, "lr_peak": 0.1}
    assert [kind for _, kind, _ in findings(record)] == []  # cosine near its end: small steps were asked for
    record["lr"] = 0.05
    assert [(layer, kind) for layer, kind, _ in findings(record)] == [("a", "update_small")]


def test_a_torchvision_resnet_is_recorded_with_its_relus_found_through_the_norms():
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    stats = LayerStats(model, 50)
    assert len(stats.names) == 21 and stats.names[0] == "conv1" and stats.names[-1] == "fc"
    stats.begin(1)
    with stats.watch():
        nn.functional.cross_entropy(model(torch.randn(4, 3, 32, 32)), torch.arange(4)).backward()
    stats.after_backward()
    record = stats.finish(lambda tensor: tensor.detach())
    dead = dict(zip(record["layers"], record["scalars"][:, SCALARS.index("dead_fraction")]))
    # conv1 -> bn1 -> relu, and each block's conv1 -> bn1 -> relu: measured; conv2 -> bn2 -> (+ shortcut) ->
    # relu and the downsample convs feed an addition, not a ReLU: not measured; fc feeds nothing.
    assert (
        np.isfinite(dead["conv1"])
        and np.isfinite(dead["layer1.0.conv1"])
        and np.isfinite(dead["layer4.1.conv1"])
    )
    assert (
        math.isnan(dead["layer1.0.conv2"])
        and math.isnan(dead["layer2.0.downsample.0"])
        and math.isnan(dead["fc"])
    )
    assert (record["scalars"][:, SCALARS.index("grad_norm")] > 0).all()


def test_a_large_tensor_is_counted_on_a_stride_with_its_whole_range():
    from workbench.worker.training.layer_stats import HISTOGRAM_SAMPLE, _histogram

    torch.manual_seed(0)
    values = torch.randn(HISTOGRAM_SAMPLE * 5 + 7)
    values[123] = 9.0  # an extreme the stride skips: the range still reaches it
    row = _histogram(values).numpy()
    assert row[0] == values.min().item() and row[1] == 9.0
    counts = row[2:]
    assert math.isclose(counts.sum(), values.numel(), rel_tol=1e-6)
    exact = torch.histc(values, bins=BINS, min=float(row[0]), max=float(row[1])).numpy()
    assert np.abs(counts - exact).sum() / values.numel() < 0.01  # the same shape within a percent
