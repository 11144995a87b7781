"""QuantSpec, the quantize job's contract, and SourceSpec, the shared way to name a model's source."""

from __future__ import annotations

import json

import pytest

from workbench.errors import SpecError
from workbench.specs import QuantSpec, SourceSpec, apply_overrides


def error(data: dict) -> str:
    with pytest.raises(SpecError) as info:
        QuantSpec.from_dict(data)
    return str(info.value)


def test_defaults_are_the_safe_w8a8_flow_and_name_no_model_yet():
    spec = QuantSpec()
    assert (spec.weights.bits, spec.weights.granularity, spec.weights.symmetric) == (8, "per_channel", True)
    assert spec.weights.restricted and spec.weights.range == "mse"
    assert (spec.activations.bits, spec.activations.symmetric, spec.activations.range) == (8, False, "mse")
    assert spec.fold_bn and not spec.cle and spec.bias_correction == "none" and not spec.adaround.enabled
    assert (spec.calibration.samples, spec.calibration.seed) == (256, 0)  # the Data tab's defaults
    assert spec.qat.epochs == 0 and not spec.sensitivity and spec.mixed_precision.target_drop == 0
    # No source is not a spec error (a wizard builds the spec field by field); the task says what is missing.
    assert spec.source == SourceSpec() and QuantSpec.from_dict({}) == spec


def test_a_w4a8_spec_from_a_run_round_trips_through_toml_json_and_overrides():
    data = {
        "source": {"run": "20250101-000000-train-abc123"},
        "weights": {"bits": 4, "range": "mse"},
        "adaround": {"enabled": True, "iterations": 300},
        "cle": True,
        "bias_correction": "empirical",
        "mixed_precision": {"target_drop": 0.005, "layers": [{"name": "classifier", "bits": "16"}]},
    }
    spec = QuantSpec.from_dict(data)
    assert spec.mixed_precision.layers == [{"name": "classifier", "bits": 16}]
    assert QuantSpec.from_toml(spec.to_toml()) == spec
    assert QuantSpec.from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json())["source"]["run"] == "20250101-000000-train-abc123"
    over = apply_overrides(
        {},
        [
            "source.run=r1",
            "weights.bits=4",
            "weights.granularity=per_tensor",
            "activations.range=cross_entropy",
            "calibration.samples=64",
            "adaround.enabled=yes",
        ],
        QuantSpec,
    )
    spec = QuantSpec.from_dict(over)
    assert (spec.source.run, spec.weights.bits, spec.weights.granularity) == ("r1", 4, "per_tensor")
    assert (
        spec.activations.range == "cross_entropy" and spec.calibration.samples == 64 and spec.adaround.enabled
    )


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"weights": {"bits": 17}}, "weights.bits: 17 is out of range; must be >= 2 and <= 16"),
        ({"activations": {"bits": 1}}, "activations.bits: 1 is out of range; must be >= 2 and <= 16"),
        (
            {"weights": {"granularity": "per_row"}},
            "weights.granularity: 'per_row' is not allowed; choose one of: per_tensor, per_channel",
        ),
        (
            {"weights": {"range": "bn"}},
            "weights.range: 'bn' is not allowed; choose one of: minmax, mse, percentile",
        ),
        (
            {"activations": {"range": "kl"}},
            "activations.range: 'kl' is not allowed; choose one of: minmax, mse, "
            "percentile, cross_entropy, bn",
        ),
        (
            {"bias_correction": "yes"},
            "bias_correction: 'yes' is not allowed; choose one of: none, empirical, analytical",
        ),
        (
            {"calibration": {"samples": 0}},
            "calibration.samples: 0 is out of range; must be >= 1 and <= 100000000",
        ),
        (
            {"adaround": {"iterations": 0}},
            "adaround.iterations: 0 is out of range; must be >= 1 and <= 10000000",
        ),
        ({"qat": {"lr": 0}}, "qat.lr: 0.0 is out of range; must be > 0 and <= 10"),
        (
            {"mixed_precision": {"target_drop": 2}},
            "mixed_precision.target_drop: 2.0 is out of range; must be >= 0 and <= 1",
        ),
        (
            {"mixed_precision": {"layers": [{"name": "fc", "bits": 4}]}},
            "mixed_precision.layers[0].bits: 4 is not allowed; choose one of: 8, 16",
        ),
        (
            {"mixed_precision": {"layers": [{"name": "fc", "bits": 8, "why": 1}]}},
            "mixed_precision.layers[0].why: unknown field; a layer is a table {name=..., bits=...}",
        ),
        (
            {"mixed_precision": {"layers": [{"name": "fc", "bits": 8}, {"name": "fc", "bits": 16}]}},
            "mixed_precision.layers[1].name: 'fc' is listed twice",
        ),
        ({"device": "tpu"}, "device: 'tpu' is not allowed; must be auto, cpu, mps, cuda or cuda:N"),
        ({"calibration_count": 64}, "calibration_count: unknown field; did you mean 'calibration'?"),
    ],
)
def test_bad_values_name_the_field_and_what_is_allowed(data, expected):
    assert error(data) == expected


def test_a_model_is_named_one_way():
    message = error({"source": {"run": "r1", "file": "m.onnx"}})
    assert message.startswith("source.run: 'r1' and file 'm.onnx' are both given")
    message = error({"source": {"run": "r1"}, "model": {"checkpoint": "w.pt"}})
    assert message.startswith("model.checkpoint: 'w.pt' and source.run 'r1' are both given")
    message = error({"source": {"run": "r1"}, "model": {"name": "mlp"}})
    assert message.startswith("model: source.run 'r1' gives the model spec")
    assert "quantize works on a PyTorch model" in error({"source": {"file": "m.onnx"}})
    spec = QuantSpec.from_dict({"model": {"name": "mlp", "checkpoint": "w.pt", "input_shape": [1, 8, 8]}})
    assert spec.model.checkpoint == "w.pt" and spec.source.run == ""


def test_source_spec_is_one_shared_part():
    assert SourceSpec.from_dict({"run": "  r1 "}).run == "r1"  # a pasted id with spaces still names the run
    assert QuantSpec.field_help("source.run").startswith("A run (its id")
    assert SourceSpec.from_dict({"file": "model.onnx"}).file == "model.onnx"
