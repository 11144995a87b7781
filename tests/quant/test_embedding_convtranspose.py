"""Transposed convs are quantized per output channel (axis 1 of their weight), embedding tables per row,
token-id inputs are never fake-quantized, BatchNorms after a transposed conv fold along its output channels,
and every layer's output reports how unevenly its channels spread (the channel-range ratio)."""

from __future__ import annotations

import math

import pytest
import torch
from embedding_models import (
    Tokens,
    Transposed1d,
    Transposed3d,
    batches,
    images,
    quantize,
    token_ids,
    unet,
)
from torch import nn

from workbench.specs import WeightQuantSpec
from workbench.worker.quant import analysis
from workbench.worker.quant.channels import range_ratio
from workbench.worker.quant.coverage import coverage
from workbench.worker.quant.graph import (
    cle_pairs,
    find_structure,
    fold_batchnorms,
    in_channels,
    out_channels,
    trace,
)
from workbench.worker.quant.quantizer import Grid, qparams_from_range
from workbench.worker.quant.sim import WeightQuant


def test_channel_helpers_give_a_transposed_convs_and_an_embeddings_numbers():
    up = nn.ConvTranspose2d(16, 8, 2, stride=2)
    assert up.weight.shape[:2] == (16, 8)  # (in, out / groups, ...): the output channels lie along axis 1
    assert (in_channels(up), out_channels(up)) == (16, 8)
    grouped = nn.ConvTranspose1d(6, 4, 3, groups=2)
    assert (in_channels(grouped), out_channels(grouped)) == (6, 4)
    embed = nn.Embedding(50, 16)
    assert (in_channels(embed), out_channels(embed)) == (50, 16)


def test_a_batchnorm_after_a_transposed_conv_folds_along_its_output_channels():
    model = unet()
    gm = trace(model)
    folded = fold_batchnorms(gm)
    assert folded["up"]["bn"] == "up_bn"
    x = images(8)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), atol=1e-5, rtol=1e-5)
    # A grouped transposed conv: output channel g * (out / groups) + j is [group g's inputs, j].
    torch.manual_seed(1)
    grouped = nn.Sequential(nn.ConvTranspose2d(4, 6, 3, groups=2), nn.BatchNorm2d(6)).eval()
    with torch.no_grad():
        grouped[1].running_mean.uniform_(-1, 1)
        grouped[1].running_var.uniform_(0.5, 3)
        grouped[1].weight.uniform_(0.2, 4)
    gm = trace(grouped)
    assert fold_batchnorms(gm)["0"]["bn"] == "1"
    x = torch.randn(2, 4, 5, 5)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), grouped(x), atol=1e-5, rtol=1e-5)


def test_every_transposed_conv_of_a_unet_is_quantized_per_output_channel():
    model = unet()
    calibration = batches(images(64))
    sim = quantize(model, calibration, adaround=40, correction="analytical")
    transposed = {name: wq for name, wq in sim.weights.items() if isinstance(wq.module, nn.ConvTranspose2d)}
    assert set(transposed) == {"up", "refine"}
    for name, wq in transposed.items():
        assert wq.qp.axis == 1 and wq.rounding == "adaround"
        assert wq.qp.scale.shape == (wq.w_fp.shape[1],)  # one scale per output channel (per group's output)
        # Each output channel's weights sit on their own grid: the codes reach the grid's edge in every
        # channel.
        per_channel = wq.codes.movedim(1, 0).reshape(wq.codes.shape[1], -1).abs().amax(dim=1)
        assert bool((per_channel >= 100).all()), per_channel
        assert torch.equal(sim.gm.get_submodule(name).weight, wq.w_q)
        entry = analysis.weight_entry(wq)
        assert entry["sqnr_db"] > 35 and len(entry["scale"]) == wq.w_fp.shape[1]
        arrays = analysis.tensor_arrays(sim, entry)
        assert arrays[f"{name}:weight:channel_ranges"][0].shape[1] == wq.w_fp.shape[1]
    # The grouped transposed conv's int32 bias: each output channel takes its group's weight scale.
    found = sim.int32_bias_codes("refine")
    if found is not None:
        assert found[1].shape == (8,)
    report = coverage(model, {layer.path for layer in sim.structure.layers.values()}, sim.folded)
    assert report["parameters"] >= 0.99, report["float"]
    assert not any(e["type"].startswith("ConvTranspose") for e in report["float"])
    x = images(16, seed=7)
    with torch.no_grad():
        reference = model(x)
        error = (sim(x) - reference).abs().max()
    assert error < 0.05 * reference.abs().max()


def test_a_transposed_conv_is_left_out_of_cross_layer_equalisation():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.ReLU(), nn.ConvTranspose2d(8, 8, 2, stride=2), nn.ReLU(), nn.Conv2d(8, 4, 1)
    )
    gm = trace(model)
    assert cle_pairs(gm, find_structure(gm)) == []
    plain = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1))
    gm = trace(plain)
    assert len(cle_pairs(gm, find_structure(gm))) == 1  # the rule itself still pairs plain convs


@pytest.mark.parametrize("make, shape", [(Transposed1d, (2, 20)), (Transposed3d, (2, 4, 6, 6))])
def test_transposed_1d_and_3d_convs_simulate_per_output_channel(make, shape):
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(48, *shape, generator=torch.Generator().manual_seed(3))
    sim = quantize(model, batches(x, 24), correction="empirical")
    wq = sim.weights["up"]
    assert wq.qp.axis == 1 and wq.qp.scale.shape == (out_channels(wq.module),)
    with torch.no_grad():
        reference = model(x[:8])
        # The output quantizer's MSE range clips the rarest values: the error is small on average, not
        # everywhere.
        assert (sim(x[:8]) - reference).pow(2).mean().sqrt() < 0.05 * reference.std()


def test_an_embedding_is_quantized_per_row_and_its_token_ids_never_are():
    torch.manual_seed(0)
    model = Tokens().eval()
    ids = token_ids(64)
    sim = quantize(model, batches(ids), adaround=30, correction="empirical")
    # No quantizer at the model's input: ids are looked up, never fake-quantized.
    assert not any(p.kind == "input" for p in sim.structure.points.values())
    assert not any(p.node.op == "placeholder" for p in sim.structure.points.values())
    wq = sim.weights["embed"]
    assert wq.qp.axis == 0 and wq.qp.scale.shape == (50,) and wq.b_fp is None
    assert bool((wq.qp.zero_point == 0).all()) and wq.grid.symmetric  # symmetric, like every weight
    # Each row its own scale; the padding row is all zeros and keeps the smallest scale, its codes 0.
    assert float(wq.qp.scale[1:].max()) < 0.1 and float(wq.qp.scale[0]) < 1e-9  # padding_idx: an all-zero row
    assert torch.equal(sim.gm.get_submodule("embed").weight, wq.w_q)
    entry = analysis.weight_entry(wq)
    assert entry["sqnr_db"] > 35 and len(entry["scale"]) == 50
    with torch.no_grad():
        reference = model(ids[:16])
        assert (sim(ids[:16]) - reference).abs().max() < 0.05 * reference.abs().max()
    report = coverage(model, {layer.path for layer in sim.structure.layers.values()}, sim.folded)
    assert report["parameters"] == 1.0 and report["float"] == []


def test_the_mse_weight_range_searches_each_embedding_row_on_its_own():
    table = torch.randn(6, 64, generator=torch.Generator().manual_seed(0))
    table[2] *= 100
    grid = Grid.for_weights(8, True)
    embed = nn.Embedding(6, 64)
    wq = WeightQuant("embed", embed, table, None, grid, True, "mse", 99.99)
    wq.set_range()
    assert wq.qp.scale.shape == (6,)
    for row in range(6):  # the same search on the row alone gives the same range
        alone = WeightQuant("row", nn.Linear(64, 1), table[row : row + 1], None, grid, True, "mse", 99.99)
        alone.set_range()
        assert float(wq.qp.scale[row]) == pytest.approx(float(alone.qp.scale[0]))
    assert float(wq.qp.scale[2]) > 50 * float(wq.qp.scale[0])


def test_an_embedding_bag_is_quantized_per_row():
    torch.manual_seed(0)
    model = Tokens(bag=True).eval()
    ids = token_ids(64)
    sim = quantize(model, batches(ids), weights=WeightQuantSpec(range="minmax"))
    wq = sim.weights["embed"]
    assert wq.qp.axis == 0 and wq.qp.scale.shape == (50,)
    assert torch.equal(wq.qp.scale, (wq.w_fp.abs().amax(dim=1) / 127).float())
    with torch.no_grad():
        reference = model(ids[:16])
        assert (sim(ids[:16]) - reference).abs().max() < 0.05 * reference.abs().max()


def test_an_integer_input_is_never_fake_quantized():
    from workbench.worker.quant.sim import ActQuant

    quantizer = ActQuant("ids")
    quantizer.qp = qparams_from_range(
        torch.tensor(0.0), torch.tensor(1.0), Grid.for_activations(8, False, True)
    )
    quantizer.enabled = True
    ids = torch.tensor([[3, 17, 49]])
    assert torch.equal(quantizer(ids), ids) and quantizer(ids).dtype == torch.int64
    assert float(quantizer(torch.tensor([0.3]))) != pytest.approx(0.3, abs=1e-6)  # a float still is quantized


def _ratio(model: nn.Module, x: torch.Tensor, layer: str) -> dict:
    sim = quantize(model, batches(x), weights=WeightQuantSpec(range="minmax"))
    return analysis.activation_entry(sim, sim.points[layer])


def test_the_channel_range_ratio_finds_a_planted_outlier_channel():
    torch.manual_seed(0)
    x = torch.randn(64, 10, 16, generator=torch.Generator().manual_seed(0))  # (batch, tokens, features)
    normal = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4)).eval()
    entry = _ratio(normal, x, "0")
    assert 1.0 <= entry["channel_range_ratio"] <= 3.0 and len(entry["outlier_channels"]) == 3
    planted = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 4)).eval()
    planted.load_state_dict(normal.state_dict())
    with torch.no_grad():
        planted[0].weight[5] *= 100
        planted[0].bias[5] *= 100
    entry = _ratio(planted, x, "0")
    assert entry["channel_range_ratio"] > 10 and entry["outlier_channels"][0] == 5  # the last dim: features
    # Conv outputs keep their channels in dim 1.
    images_ = torch.randn(64, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    assert _ratio(conv, images_, "0")["channel_range_ratio"] <= 3.0
    with torch.no_grad():
        conv[0].weight[6] *= 100
        conv[0].bias[6] *= 100
    entry = _ratio(conv, images_, "0")
    assert entry["channel_range_ratio"] > 10 and entry["outlier_channels"][0] == 6


def test_the_channel_range_ratio_is_max_over_median():
    lo = torch.tensor([0.0, -1.0, 0.0, -2.0])
    hi = torch.tensor([1.0, 1.0, 30.0, 1.0])  # ranges 1, 2, 30, 3: median (torch's lower middle) 2
    ratio, widest = range_ratio(lo, hi)
    assert ratio == pytest.approx(15.0) and widest == [2, 3, 1]
    # mostly dead channels
    assert range_ratio(torch.zeros(5), torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0]))[0] is None
    assert not math.isnan(range_ratio(lo, hi)[0])


def test_only_layer_outputs_carry_a_channel_range_ratio():
    model = unet()
    sim = quantize(model, batches(images(32)), weights=WeightQuantSpec(range="minmax"))
    for name, state in sim.points.items():
        entry = analysis.activation_entry(sim, state)
        kind = sim.structure.points[name].kind
        assert ("channel_range_ratio" in entry) == (kind == "layer"), (name, kind)
    for wq in sim.weights.values():
        assert "channel_range_ratio" not in analysis.weight_entry(wq)
