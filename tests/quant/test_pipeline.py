"""The whole quant.analyze job on the digits cnn (trained once, about 99 % FP32): the paper's accuracy claims,
the report contract, the arrays a GUI draws from, the saved artifacts, cancel and clear failures."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from quant_helpers import DIGITS_TRAIN, Events, done

from workbench.errors import SpecError
from workbench.specs import ModelSpec
from workbench.worker.models import build_model
from workbench.worker.quant.artifacts import load_quantized
from workbench.worker.quant.data import evaluate, held_out_batches

W8A8_MINMAX = {"weights": {"bits": 8, "range": "minmax"}, "activations": {"bits": 8, "range": "minmax"}}
REPORT_KEYS = {"run_dir", "status", "fp32", "quantized", "steps", "layers"}
LAYER_KEYS = {
    "name",
    "tensor",
    "bits",
    "granularity",
    "symmetric",
    "range_method",
    "qmin",
    "qmax",
    "scale",
    "zero_point",
    "min",
    "max",
    "sqnr_db",
    "mse",
    "clipping_mse",
    "rounding_mse",
}
# In graph order; "pool" quantizes the classifier's input, which average pooling took off the grid.
GROUPS = ["input", "features.0", "features.4", "pool", "classifier"]
WEIGHTED = ["features.0", "features.4", "classifier"]


def drop(result: dict) -> float:
    return result["fp32"]["accuracy"] - result["quantized"]["accuracy"]


def weight_sqnr(result: dict) -> dict[str, float]:
    return {e["name"]: e["sqnr_db"] for e in result["layers"] if e["tensor"] == "weight"}


def test_w8a8_minmax_drops_at_most_half_a_point_and_reports_the_contract(quantize):
    result, events = quantize(**W8A8_MINMAX)
    done(result)
    assert result["fp32"]["accuracy"] >= 0.975
    assert drop(result) <= 0.005
    assert REPORT_KEYS <= set(result) and "sensitivity" not in result and "mixed_precision" not in result
    assert (
        set(result["quantized"]) == {"accuracy", "loss", "logit_sqnr_db"}
        and result["quantized"]["logit_sqnr_db"] > 30
    )
    assert [s["step"] for s in result["steps"]] == ["fp32", "fold_bn", "weight_ranges", "activation_ranges"]
    assert all(set(s) == {"step", "accuracy", "loss"} for s in result["steps"])
    # A conv net: every parameter sits in a quantized layer or a BatchNorm folded into one.
    assert result["coverage"]["parameters"] == 1.0 and result["coverage"]["float"] == []
    assert result["coverage"]["quantized_parameters"] == result["coverage"]["total_parameters"] > 0
    assert result["steps"][0]["accuracy"] == result["fp32"]["accuracy"]
    assert result["steps"][-1]["accuracy"] == result["quantized"]["accuracy"]
    # One entry per quantizer, named as in named_modules(): three weight quantizers, five activation ones.
    entries = {(e["name"], e["tensor"]): e for e in result["layers"]}
    assert sorted(entries) == sorted([(n, "weight") for n in WEIGHTED] + [(n, "activation") for n in GROUPS])
    for entry in result["layers"]:
        assert LAYER_KEYS <= set(entry), entry["name"]
    conv = entries[("features.0", "weight")]
    assert conv["granularity"] == "per_tensor" or (len(conv["scale"]) == 32 and len(conv["zero_point"]) == 32)
    assert (conv["qmin"], conv["qmax"], conv["symmetric"], conv["range_method"]) == (
        -127,
        127,
        True,
        "minmax",
    )
    # minmax, symmetric: the grid reaches the largest |w|, nothing is clipped.
    assert max(conv["max"]) == pytest.approx(max(-conv["data_min"], conv["data_max"]), rel=1e-6)
    # Zero up to float rounding: the largest |w| maps onto the grid end, x/s*s may differ in the last bit.
    assert conv["clipping_mse"] == pytest.approx(0, abs=1e-12) and conv["rounding_mse"] == pytest.approx(
        conv["mse"]
    )
    relu_out = entries[("features.0", "activation")]
    assert (relu_out["qmin"], relu_out["qmax"], relu_out["zero_point"], relu_out["granularity"]) == (
        0,
        255,
        0,
        "per_tensor",
    )
    for where in ("calibration", "held_out"):
        for how in ("accumulated", "only_this"):
            assert set(relu_out["error"][where][how]) == {"sqnr_db", "mse", "cosine"}
    logits = entries[("classifier", "activation")]["error"]["held_out"]
    # error inherited from the layers before
    assert logits["accumulated"]["mse"] >= logits["only_this"]["mse"]
    # The weight SQNR is over the whole tensor as quantized: 10 log10(sum w^2 / sum (w - q(w))^2).
    with torch.no_grad():
        saved = torch.load(Path(result["artifacts"]["weights"]), weights_only=True)
        w_fp = _fp32_weights(result)["features.0"]
        scale = saved["weight_scale"]["features.0"].view(-1, 1, 1, 1)
        w_q = (
            saved["weight_int"]["features.0"].float()
            - saved["weight_zero_point"]["features.0"].view(-1, 1, 1, 1)
        ) * scale
        expected = 10 * torch.log10(w_fp.pow(2).sum() / (w_fp - w_q).pow(2).sum())
    assert conv["sqnr_db"] == pytest.approx(float(expected), abs=1e-3)


def _fp32_weights(result: dict) -> dict[str, torch.Tensor]:
    """The folded FP32 weights, rebuilt from the source run the way the pipeline folds them."""
    from workbench.worker.quant.graph import fold_batchnorms, trace

    spec = ModelSpec.from_dict(json.loads(Path(result["artifacts"]["params"]).read_text())["model"])
    model = build_model(spec, input_shape=(1, 8, 8)).eval()
    gm = trace(model)
    fold_batchnorms(gm)
    return {name: gm.get_submodule(name).weight.detach() for name in WEIGHTED}


def test_the_ladder_fills_in_live_and_the_arrays_travel_as_arrays(quantize):
    result, events = quantize(**W8A8_MINMAX)
    done(result)
    ladders = events.arrays("quant/ladder")
    assert [len(a["steps"]) for a in ladders] == [1, 2, 3, 4]
    assert ladders[-1]["steps"] == [s["step"] for s in result["steps"]]
    assert ladders[-1]["array"]["shape"] == [4, 2] and ladders[-1]["columns"] == ["accuracy", "loss"]
    names = [c["name"] for c in events.of("array")]
    # Every rung is sent before the analysis starts, and the metrics carry the same numbers.
    assert names.index("quant/ladder") < names.index("quant/features.0:weight:counts")
    metric_batches = events.of("metrics")
    assert metric_batches and any("quant/accuracy" in json.dumps(m) for m in metric_batches)
    histograms = {c["name"]: c for c in events.of("histogram")}
    assert set(histograms) == {
        f"quant/{n}:{t}" for n, t in [(g, "weight") for g in WEIGHTED] + [(g, "activation") for g in GROUPS]
    }
    for entry in result["layers"]:
        key = f"{entry['name']}:{entry['tensor']}"
        ranges = events.arrays(f"quant/{key}:ranges")[0]
        assert ranges["estimators"][0] == "chosen" and "minmax" in ranges["estimators"]
        assert ranges["columns"] == ["lo", "hi", "sqnr_db", "clipping_mse", "rounding_mse"]
        assert ranges["array"]["shape"] == [len(ranges["estimators"]), 5]
        error = events.arrays(f"quant/{key}:error")[0]
        assert error["array"]["shape"] == [2, 256] and error["rows"] == ["clipping", "rounding"]
    estimators = events.arrays("quant/classifier:activation:ranges")[0]["estimators"]
    assert "cross_entropy" in estimators  # the logits get every alternative, cross-entropy included
    assert "bn" in events.arrays("quant/features.0:activation:ranges")[0]["estimators"]
    assert events.arrays("quant/features.4:weight:channel_ranges")[0]["array"]["shape"][1:] == [64, 2]
    # The same arrays are saved in the run, and the report names every artifact.
    with np.load(result["artifacts"]["histograms"]) as saved:
        assert "features.0:weight:counts" in saved.files and saved["features.0:weight:error"].shape == (
            2,
            256,
        )
        counts = saved["features.0:activation:counts"]
        assert (
            counts.dtype == np.int64
            and counts.sum() == events.arrays("quant/features.0:activation:counts")[0]["values"]
        )
    kinds = {c["kind"] for c in events.of("artifact")}
    assert kinds == {"state_dict", "quant_params", "arrays"}


@pytest.mark.parametrize(
    "parts",
    [W8A8_MINMAX, {"weights": {"bits": 4}, "fold_bn": False, "bias_correction": "empirical"}],
    ids=["w8a8-folded", "w4a8-unfolded-bias-corrected"],
)
def test_saved_weights_and_scales_rebuild_the_quantized_model(quantize, digits_run, parts):
    result, _ = quantize(**parts)
    done(result)
    folder = Path(result["artifacts"]["weights"]).parent
    saved = torch.load(folder / "quantized.pt", weights_only=True)  # plain tensors: no code to unpickle
    assert saved["weight_int"]["features.0"].dtype == torch.int8
    params = json.loads((folder / "quant_params.json").read_text())
    folded = {"features.1": "features.0", "features.5": "features.4"} if parts.get("fold_bn", True) else {}
    assert params["folded_bn"] == folded
    assert [a["name"] for a in params["activations"]] == GROUPS
    model = build_model(ModelSpec.from_dict(params["model"]), input_shape=(1, 8, 8)).eval()
    sim = load_quantized(model, folder)
    from workbench.specs import DataSpec
    from workbench.worker.data import load_dataset

    dataset = load_dataset(DataSpec.from_dict(DIGITS_TRAIN["dataset"]), workspace=digits_run[0])
    again = evaluate(sim, held_out_batches(dataset, 0, batch_size=128, device=torch.device("cpu")))
    assert again["accuracy"] == result["quantized"]["accuracy"]
    assert again["loss"] == pytest.approx(result["quantized"]["loss"], rel=1e-5)


def test_w4a8_with_mse_and_adaround_drops_at_most_one_point(quantize):
    nearest, _ = quantize(weights={"bits": 4, "range": "mse"})
    result, _ = quantize(weights={"bits": 4, "range": "mse"}, adaround={"enabled": True, "iterations": 300})
    done(nearest), done(result)
    assert drop(result) <= 0.01
    assert [s["step"] for s in result["steps"]][-2:] == ["adaround", "activation_ranges"]
    assert all(e["rounding"] == "adaround" for e in result["layers"] if e["tensor"] == "weight")
    # AdaRound trades weight SQNR for output fidelity: the logits get closer to FP32.
    assert result["quantized"]["logit_sqnr_db"] > nearest["quantized"]["logit_sqnr_db"]


def test_sqnr_rises_about_six_db_per_bit(quantize):
    results = {
        bits: done(
            quantize(weights={"bits": bits, "range": "minmax"}, activations={"bits": bits, "range": "mse"})[0]
        )
        for bits in (4, 6, 8)
    }
    for low, high in ((4, 6), (6, 8)):
        for name, sqnr in weight_sqnr(results[high]).items():
            per_bit = (sqnr - weight_sqnr(results[low])[name]) / (high - low)
            assert 5.0 <= per_bit <= 7.0, (name, low, high, per_bit)
        logit_per_bit = (
            results[high]["quantized"]["logit_sqnr_db"] - results[low]["quantized"]["logit_sqnr_db"]
        ) / (high - low)
        # The logits add up every layer's error, and at 4 bits the activations' clipping error comes on top of
        # the rounding noise that falls 6 dB a bit: from 4 to 6 bits the logits gain more (8.6 dB a bit on the
        # stratified digits split of this model).
        assert 4.0 <= logit_per_bit <= (9.0 if low == 4 else 8.0), (low, high, logit_per_bit)


def test_per_channel_beats_per_tensor(quantize):
    channel, _ = quantize(weights={"bits": 4, "granularity": "per_channel"})
    tensor, _ = quantize(weights={"bits": 4, "granularity": "per_tensor"})
    done(channel), done(tensor)
    for name, sqnr in weight_sqnr(channel).items():
        assert sqnr > weight_sqnr(tensor)[name], name
    assert channel["quantized"]["logit_sqnr_db"] > tensor["quantized"]["logit_sqnr_db"]


def test_mse_is_never_below_minmax_in_sqnr(quantize):
    result, events = quantize(weights={"bits": 4, "range": "mse"}, activations={"bits": 4, "range": "mse"})
    done(result)
    minmax, _ = quantize(weights={"bits": 4, "range": "minmax"}, activations={"bits": 4, "range": "minmax"})
    for entry in result["layers"]:
        ranges = events.arrays(f"quant/{entry['name']}:{entry['tensor']}:ranges")[0]
        with np.load(result["artifacts"]["histograms"]) as saved:
            rows = saved[f"{entry['name']}:{entry['tensor']}:ranges"]
        sqnr = dict(zip(ranges["estimators"], rows[:, 2]))
        assert sqnr["mse"] >= sqnr["minmax"] - 1e-9, entry["name"]
    by_key = {(e["name"], e["tensor"]): e["sqnr_db"] for e in minmax["layers"]}
    for entry in result["layers"]:
        assert entry["sqnr_db"] >= by_key[(entry["name"], entry["tensor"])] - 1e-9, entry["name"]


def test_cle_bias_correction_sensitivity_and_a_mixed_precision_proposal(quantize):
    plain, _ = quantize(weights={"bits": 3, "granularity": "per_tensor"})
    result, events = quantize(
        weights={"bits": 3, "granularity": "per_tensor"},
        cle=True,
        bias_correction="empirical",
        sensitivity=True,
        mixed_precision={"target_drop": 0.001},
    )
    done(plain), done(result)
    assert [s["step"] for s in result["steps"]] == [
        "fp32",
        "fold_bn",
        "cle",
        "weight_ranges",
        "bias_correction",
        "activation_ranges",
    ]
    cle_step = result["steps"][2]
    assert cle_step["accuracy"] == result["fp32"]["accuracy"]  # equalisation keeps the FP32 function
    assert result["quantized"]["logit_sqnr_db"] > plain["quantized"]["logit_sqnr_db"]
    assert result["cle"]["pairs"] == [["features.0", "features.4"], ["features.4", "classifier"]]
    figure6 = events.arrays("quant/features.0:weight:cle_ranges")[0]
    assert figure6["array"]["shape"] == [2, 32, 2] and figure6["rows"] == ["before", "after"]
    rows = result["sensitivity"]
    assert [r["layer"] for r in rows] == GROUPS and all(
        set(r) == {"layer", "only_this", "all_but_this"} for r in rows
    )
    proposal = result["mixed_precision"]
    assert {"target_drop", "layers", "accuracy", "size_bytes"} <= set(proposal)
    points = proposal["points"]
    assert points[0]["layers"] == [] and points[0]["accuracy"] == result["quantized"]["accuracy"]
    assert [p["size_bytes"] for p in points] == sorted(p["size_bytes"] for p in points)
    assert proposal["size_bytes"] < proposal["fp32_size_bytes"]
    if proposal["met"]:
        assert proposal["accuracy"] >= result["fp32"]["accuracy"] - 0.001
    assert all(item["bits"] in (8, 16) for item in proposal["layers"])


def test_a_proposal_applies_through_the_spec(quantize):
    result, _ = quantize(
        weights={"bits": 4}, mixed_precision={"layers": [{"name": "features.4", "bits": 16}]}
    )
    done(result)
    bits = {(e["name"], e["tensor"]): e["bits"] for e in result["layers"]}
    assert bits[("features.4", "weight")] == 16 and bits[("features.4", "activation")] == 16
    assert bits[("features.0", "weight")] == 4 and bits[("classifier", "activation")] == 8
    failed, _ = quantize(mixed_precision={"layers": [{"name": "features.9", "bits": 8}]})
    assert failed["status"] == "failed" and failed["error"]["type"] == "JobError"
    assert (
        "'features.9' is not a layer" in failed["error"]["message"]
        and "features.4" in failed["error"]["message"]
    )


def test_cancel_is_honoured_between_steps_and_inside_adaround(quantize):
    stop = threading.Event()

    def between(kind, content):
        if kind == "array" and content["name"] == "quant/ladder" and len(content["steps"]) == 2:
            stop.set()

    result, events = quantize(Events(between), stop)
    assert result["status"] == "cancelled" and len(events.arrays("quant/ladder")) == 2
    stop = threading.Event()

    def inside(kind, content):
        if kind == "progress" and content["text"].startswith("AdaRound"):
            stop.set()

    # 100,000 steps per layer would take minutes: the loop itself must notice the cancel.
    result, events = quantize(Events(inside), stop, adaround={"enabled": True, "iterations": 100_000})
    assert result["status"] == "cancelled"
    assert [len(a["steps"]) for a in events.arrays("quant/ladder")] == [1, 2, 3]  # no adaround rung


def test_quantization_aware_training_recovers_what_ptq_lost(quantize):
    result, events = quantize(weights={"bits": 2, "granularity": "per_tensor"}, qat={"epochs": 2, "lr": 1e-3})
    done(result)
    steps = [s["step"] for s in result["steps"]]
    assert steps[-2:] == ["activation_ranges", "qat"]
    ptq, qat = result["steps"][-2], result["steps"][-1]
    assert qat["loss"] < ptq["loss"] and qat["accuracy"] >= ptq["accuracy"]
    assert result["quantized"]["accuracy"] == qat["accuracy"] and result["qat"]["epochs"] == 2
    assert all(e["rounding"] == "qat" for e in result["layers"] if e["tensor"] == "weight")
    # The training engine's own curves and checkpoints, in the quantize run.
    assert any("train/loss" in json.dumps(m) for m in events.of("metrics"))
    assert Path(result["qat"]["checkpoint"]).is_file()


def test_failures_name_what_to_do(quantize, digits_run):
    workspace, run_dir = digits_run
    result, _ = quantize(source={"run": "no-such-run"})
    assert result["status"] == "failed" and result["error"]["message"].startswith(
        "source.run: No run matches"
    )
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    result = run_task(get_task("quant.analyze"), {}, emit=Events(), workspace=workspace)
    assert result["status"] == "failed" and "nothing to quantize" in result["error"]["message"]
    # A model spec with its own checkpoint works without a run, on the dataset it names.
    spec = {
        "model": {"name": "cnn", "checkpoint": str(Path(run_dir) / "checkpoints" / "model.pt")},
        "dataset": DIGITS_TRAIN["dataset"],
        "weights": {"bits": 8},
        "calibration": {"samples": 64},
    }
    result = done(run_task(get_task("quant.analyze"), spec, emit=Events(), workspace=workspace))
    assert result["source"]["run"] is None and result["fp32"]["accuracy"] >= 0.975


def test_a_target_drop_meant_as_a_percentage_is_refused_with_its_unit(quantize):
    result, _ = quantize(mixed_precision={"target_drop": 1})
    assert result["status"] == "failed" and "traceback" not in result
    assert result["error"]["message"] == (
        "mixed_precision.target_drop: 1 is a fraction of accuracy: 0.01 allows a "
        "drop of one percentage point, so 1 would allow 100 points; for 1 %, set "
        "0.01"
    )


def test_a_target_drop_in_a_monitors_own_units_is_not_a_fraction():
    from types import SimpleNamespace

    from workbench.worker.quant.pipeline import check_target_drop

    check_target_drop(0.8, SimpleNamespace(monitor="mae"))  # an MAE may rise by 0.8 of its own units
    check_target_drop(0.5, None)
    with pytest.raises(SpecError, match=r"^mixed_precision.target_drop: 0.6 is a fraction of mIoU"):
        check_target_drop(0.6, SimpleNamespace(monitor="miou"))
    # A LightningModule's own monitor decides: its val_loss rises in its own units, its val_acc is a share.
    check_target_drop(2.0, None, {"name": "val_loss", "higher_is_better": False})
    check_target_drop(0.8, None, {"name": "val_bleu", "higher_is_better": True})
    with pytest.raises(SpecError, match=r"is a fraction of accuracy"):
        check_target_drop(0.8, None, {"name": "val_acc", "higher_is_better": True})


def test_the_result_says_where_the_time_went(quantize):
    result = done(
        quantize(weights={"bits": 8, "range": "minmax"}, activations={"bits": 8, "range": "minmax"})[0]
    )
    stages = result["stage_s"]
    assert list(stages)[:2] == ["setup", "fp32"] and list(stages)[-1] == "save"
    assert {"weight_ranges", "activation_ranges", "analysis"} <= set(stages)
    assert all(seconds >= 0 for seconds in stages.values())
    assert sum(stages.values()) <= result["elapsed_analysis_s"] + 0.05
