"""The job specs: round trips, coercion, validation messages, overrides, files and field listings."""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.errors import SpecError
from workbench.specs import (
    MAX_SAMPLE_VALUES,
    MAX_SEED,
    SPEC_TYPES,
    BenchSpec,
    DataInfoSpec,
    DataSpec,
    ExportSpec,
    GraphSpec,
    ModelSpec,
    QuantSpec,
    Spec,
    TrainSpec,
    apply_overrides,
    dump,
    spec_for,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATASET = {
    "name": "cifar10",
    "root": "/data/cifar",
    "download": True,
    "val_fraction": 0.2,
    "test_fraction": 0.05,
    "seed": 7,
    "image_size": [32, 40],
    "normalize": {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]},
    "augment": [{"name": "random_crop", "size": 32, "padding": 4}, {"name": "hflip"}],
    "num_workers": 4,
    "pin_memory": True,
}
MODEL = {
    "name": "torchvision:resnet18",
    "num_classes": 100,
    "input_shape": [3, 32, 32],
    "checkpoint": "runs/a/best.pt",
    "weights": "DEFAULT",
    "replace_head": True,
    "freeze": ["backbone", "layer4.0"],
}

# A spec of every kind with many non-default values, nested tables, an augment list and a normalize table.
NON_DEFAULTS: dict[type[Spec], dict] = {
    TrainSpec: {
        "dataset": DATASET,
        "model": MODEL,
        "epochs": 3,
        "batch_size": 128,
        "lr": 0.05,
        "optimizer": "sgd",
        "momentum": 0.8,
        "weight_decay": 5e-4,
        "no_decay_bias_norm": False,
        "scheduler": "onecycle",
        "loss": "nll",
        "label_smoothing": 0.1,
        "amp": "bf16",
        "grad_accum_steps": 2,
        "clip_grad_norm": 1.5,
        "seed": 42,
        "deterministic": True,
        "compile": "reduce-overhead",
        "channels_last": True,
        "checkpoint_every": 0,
        "keep_best": False,
        "early_stop_patience": 3,
        "device": "cuda:1",
        "distributed": "ddp",
        "nproc": 4,
        "profile_steps": 5,
        "log_every_steps": 50,
    },
    QuantSpec: {
        "model": MODEL,
        "dataset": {"name": "mnist", "normalize": "none"},
        "weights": {
            "bits": 4,
            "granularity": "per_tensor",
            "symmetric": False,
            "range": "percentile",
            "percentile": 99.9,
        },
        "activations": {"bits": 6, "symmetric": True, "range": "cross_entropy"},
        "fold_bn": False,
        "cle": True,
        "bias_correction": "analytical",
        "adaround": {"enabled": True, "iterations": 50},
        "calibration": {"samples": 64, "seed": 3},
        "qat": {"epochs": 2, "lr": 1e-5},
        "sensitivity": True,
        "mixed_precision": {"target_drop": 0.01, "layers": [{"name": "features.0", "bits": 8}]},
        "eval_samples": 500,
        "device": "cpu",
    },
    ExportSpec: {
        "model": {"name": "file:models/net.py:build_net", "input_shape": [1, 28, 28]},
        "format": "tensorrt",
        "script": True,
        "opset": 17,
        "precision": "int8",
        "output": "exports/net.ts",
        "dynamic_batch": False,
        "verify": False,
        "parity_samples": 4,
        "dataset": {"name": "fake", "size": 20, "num_classes": 3},
        "device": "cuda",
    },
    BenchSpec: {
        "model": {"name": "mlp"},
        "artifact": "exports/model.onnx",
        "backends": ["onnxruntime", "eager"],
        "batch_sizes": [1, 8, 64],
        "dtype": "float16",
        "warmup": 0,
        "iters": 10,
        "min_time_s": 0.5,
        "threads": 4,
        "dataset": {"name": "svhn", "augment": [{"name": "rotation", "degrees": 15.0}]},
        "device": "mps",
    },
    GraphSpec: {"model": MODEL, "const_element_count_limit": 0, "port": 8081, "open_browser": True},
    DataInfoSpec: {"dataset": DATASET},
}


def error(call, *args, **kwargs) -> str:
    with pytest.raises(SpecError) as info:
        call(*args, **kwargs)
    return str(info.value)


# --- round trips -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(NON_DEFAULTS), ids=lambda c: c.__name__)
def test_defaults_round_trip_through_toml_and_json(cls):
    spec = cls()
    assert cls.from_dict({}) == spec
    assert cls.from_toml(spec.to_toml()) == spec
    assert cls.from_json(spec.to_json()) == spec
    assert cls.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize("cls", list(NON_DEFAULTS), ids=lambda c: c.__name__)
def test_non_defaults_round_trip_through_toml_and_json(cls):
    spec = cls.from_dict(NON_DEFAULTS[cls])
    assert spec != cls()
    assert spec.to_dict() == cls.from_dict(spec.to_dict()).to_dict()
    assert cls.from_toml(spec.to_toml()) == spec
    assert cls.from_json(spec.to_json()) == spec
    json.loads(spec.to_json())  # plain JSON, nothing custom


@pytest.mark.parametrize("cls", list(NON_DEFAULTS), ids=lambda c: c.__name__)
def test_dump_and_load_by_suffix(cls, tmp_path):
    spec = cls.from_dict(NON_DEFAULTS[cls])
    for name in ("spec.toml", "spec.json", "SPEC.TOML"):
        dump(spec, tmp_path / name)
        assert cls.load(tmp_path / name) == spec
    assert tomllib.loads((tmp_path / "spec.toml").read_text()) == spec.to_dict()
    assert json.loads((tmp_path / "spec.json").read_text()) == spec.to_dict()


def test_nested_values_survive_a_round_trip():
    spec = TrainSpec.from_toml(TrainSpec.from_dict(NON_DEFAULTS[TrainSpec]).to_toml())
    assert spec.dataset.augment == [{"name": "random_crop", "size": 32, "padding": 4}, {"name": "hflip"}]
    assert spec.dataset.normalize == {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]}
    assert spec.model.input_shape == [3, 32, 32]
    assert isinstance(spec.dataset, DataSpec) and isinstance(spec.model, ModelSpec)


def test_to_dict_leaves_out_none():
    spec = DataSpec()
    spec.root = None  # type: ignore[assignment]
    assert "root" not in spec.to_dict()
    assert "root" not in spec.to_toml()


def test_defaults_are_not_shared_between_instances():
    a, b = TrainSpec(), TrainSpec()
    a.dataset.augment.append({"name": "hflip"})
    a.model.freeze.append("backbone")
    assert b.dataset.augment == [] and b.model.freeze == []
    assert (
        ExportSpec().format == "onnx" and BenchSpec().batch_sizes == [1] and BenchSpec().backends == ["eager"]
    )


def test_nested_spec_instances_are_accepted_and_checked():
    spec = TrainSpec.from_dict({"dataset": DataSpec(name="mnist")})
    assert spec.dataset.name == "mnist"
    message = error(TrainSpec.from_dict, {"dataset": DataSpec(name="nope")})
    assert message.startswith("dataset.name: 'nope'")


# --- coercion --------------------------------------------------------------------------------------


def test_from_dict_coerces_strings():
    spec = TrainSpec.from_dict(
        {
            "epochs": "3",
            "lr": "0.01",
            "momentum": 1,
            "deterministic": "Yes",
            "channels_last": "off",
            "keep_best": "0",
            "model": {"input_shape": "1, 28,28", "freeze": "layer1,layer2"},
            "dataset": {"image_size": "", "val_fraction": "0.25", "download": "TRUE"},
        }
    )
    assert spec.epochs == 3 and type(spec.epochs) is int
    assert spec.lr == 0.01 and type(spec.lr) is float
    assert spec.momentum == 1.0 and type(spec.momentum) is float
    assert spec.deterministic is True and spec.channels_last is False and spec.keep_best is False
    assert spec.model.input_shape == [1, 28, 28]
    assert spec.model.freeze == ["layer1", "layer2"]
    assert (
        spec.dataset.image_size == [] and spec.dataset.val_fraction == 0.25 and spec.dataset.download is True
    )


def test_int_accepts_integral_floats_and_rejects_the_rest():
    assert TrainSpec.from_dict({"epochs": 4.0}).epochs == 4
    assert TrainSpec.from_dict({"epochs": "5.0"}).epochs == 5
    assert error(TrainSpec.from_dict, {"epochs": 2.5}) == "epochs: 2.5 is not an integer"
    assert error(TrainSpec.from_dict, {"epochs": True}) == "epochs: True is not an integer"
    assert error(TrainSpec.from_dict, {"epochs": "ten"}) == "epochs: 'ten' is not an integer"


def test_float_rejects_bools_words_and_non_finite():
    assert error(TrainSpec.from_dict, {"lr": True}) == "lr: True is not a number"
    assert error(TrainSpec.from_dict, {"lr": "fast"}) == "lr: 'fast' is not a number"
    assert "lr: 'nan' is not a finite number" == error(TrainSpec.from_dict, {"lr": "nan"})
    assert "not a finite number" in error(TrainSpec.from_toml, "lr = inf")


def test_bool_rejects_other_words_and_numbers():
    message = error(TrainSpec.from_dict, {"deterministic": "maybe"})
    assert message.startswith("deterministic: 'maybe' is not a boolean")
    assert "true" in message and "false" in message
    assert "is not a boolean" in error(TrainSpec.from_dict, {"deterministic": 1})


def test_str_and_list_type_errors():
    assert error(TrainSpec.from_dict, {"device": 0}) == "device: 0 is not a string"
    assert error(ModelSpec.from_dict, {"input_shape": 3}) == "input_shape: 3 is not a list"
    message = error(TrainSpec.from_dict, {"model": {"input_shape": [1, "x", 3]}})
    assert message == "model.input_shape[1]: 'x' is not an integer"


def test_nested_spec_must_be_a_table():
    assert error(TrainSpec.from_dict, {"dataset": "mnist"}) == "dataset: 'mnist' is not a table"
    assert "is not a table" in error(TrainSpec.from_dict, ["epochs"])


def test_augment_strings_become_tables():
    spec = DataSpec.from_dict({"augment": ["hflip", {"name": "rotation", "degrees": 10}]})
    assert spec.augment == [{"name": "hflip"}, {"name": "rotation", "degrees": 10}]
    assert DataSpec.from_dict({"augment": "hflip,vflip"}).augment == [{"name": "hflip"}, {"name": "vflip"}]


def test_normalize_accepts_strings_and_tables():
    assert DataSpec.from_dict({"normalize": "none"}).normalize == "none"
    spec = DataSpec.from_dict({"normalize": {"mean": [0, "0.5"], "std": "1,2"}})
    assert spec.normalize == {"mean": [0.0, 0.5], "std": [1.0, 2.0]}
    assert all(type(v) is float for v in spec.normalize["mean"] + spec.normalize["std"])


# --- messages --------------------------------------------------------------------------------------


def test_literal_message_lists_the_choices():
    message = error(TrainSpec.from_dict, {"optimizer": "adamx"})
    assert message == "optimizer: 'adamx' is not allowed; choose one of: sgd, adam, adamw, rmsprop"
    message = error(TrainSpec.from_dict, {"compile": "fast"})
    assert "compile: 'fast'" in message and "reduce-overhead" in message and "max-autotune" in message


@pytest.mark.parametrize(
    ("cls", "data", "expected"),
    [
        (TrainSpec, {"lr": -1.0}, "lr: -1.0 is out of range; must be > 0 and <= 10"),
        (TrainSpec, {"lr": 0}, "lr: 0.0 is out of range; must be > 0 and <= 10"),
        (TrainSpec, {"epochs": 0}, "epochs: 0 is out of range; must be >= 1 and <= 100000"),
        (TrainSpec, {"momentum": 1.5}, "momentum: 1.5 is out of range; must be >= 0 and <= 1"),
        (TrainSpec, {"label_smoothing": 1}, "label_smoothing: 1.0 is out of range; must be >= 0 and < 1"),
        (
            TrainSpec,
            {"dataset": {"val_fraction": 1.0}},
            "dataset.val_fraction: 1.0 is out of range; must be >= 0 and < 1",
        ),
        (
            TrainSpec,
            {"dataset": {"num_classes": 1}},
            "dataset.num_classes: 1 is out of range; must be >= 2 and <= 1000000",
        ),
        (QuantSpec, {"weights": {"bits": 1}}, "weights.bits: 1 is out of range; must be >= 2 and <= 16"),
        (ExportSpec, {"opset": 26}, "opset: 26 is out of range; must be >= 7 and <= 25"),
        (GraphSpec, {"port": 70000}, "port: 70000 is out of range; must be >= 0 and <= 65535"),
        (
            BenchSpec,
            {"batch_sizes": [1, 0]},
            "batch_sizes[1]: 0 is out of range; must be >= 1 and <= 1048576",
        ),
        (
            TrainSpec,
            {"model": {"input_shape": [1, -28, 28]}},
            "model.input_shape[1]: -28 is out of range; must be >= 1",
        ),
    ],
)
def test_range_messages(cls, data, expected):
    assert error(cls.from_dict, data) == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # The two values issue #7 met: 17 TB of resized images, and a learning rate that overflows.
        (
            ["dataset.image_size=100000"],
            "dataset.image_size[0]: 100000 is out of range; must be >= 1 and <= 4096",
        ),
        (
            ["dataset.image_size=224,100000"],
            "dataset.image_size[1]: 100000 is out of range; must be >= 1 and <= 4096",
        ),
        (["lr=1e308"], "lr: 1e+308 is out of range; must be > 0 and <= 10"),
        (["gamma=1e308"], "gamma: 1e+308 is out of range; must be > 0 and <= 10"),
        (["batch_size=100000000"], "batch_size: 100000000 is out of range; must be >= 1 and <= 1048576"),
        (["epochs=1000000"], "epochs: 1000000 is out of range; must be >= 1 and <= 100000"),
        (["dataset.num_workers=5000"], "dataset.num_workers: 5000 is out of range; must be >= 0 and <= 1024"),
        (["weight_decay=5"], "weight_decay: 5.0 is out of range; must be >= 0 and <= 1"),
        (["distributed=ddp", "nproc=100000"], "nproc: 100000 is out of range; must be >= 1 and <= 1024"),
        (
            ["grad_accum_steps=1000000"],
            "grad_accum_steps: 1000000 is out of range; must be >= 1 and <= 65536",
        ),
        (
            ["model.num_classes=100000000"],
            "model.num_classes: 100000000 is out of range; must be >= 0 and <= 1000000",
        ),
    ],
)
def test_values_that_can_only_be_mistakes_are_refused_with_the_allowed_range(overrides, expected):
    # Through --set, as the command line gives them, and through from_dict, as a spec file or the GUI does.
    message = error(apply_overrides, {}, overrides, TrainSpec)
    assert message == f"--set {overrides[-1]}: {expected}"
    data = apply_overrides({}, overrides[:-1], TrainSpec)
    key, _, raw = overrides[-1].partition("=")
    node = data
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = raw
    assert error(TrainSpec.from_dict, data) == expected


def test_the_upper_bounds_themselves_are_allowed():
    spec = TrainSpec.from_dict(
        {
            "lr": 10,
            "gamma": 10,
            "weight_decay": 1,
            "epochs": 100_000,
            "batch_size": 2**20,
            "dataset": {"image_size": [4096, 4096], "num_workers": 1024},
            "model": {"input_shape": [16, 4096, 4096]},
        }
    )
    assert (
        spec.lr == 10.0
        and spec.dataset.image_size == [4096, 4096]
        and spec.model.input_shape == [16, 4096, 4096]
    )


def test_an_input_shape_too_large_in_total_names_the_field_the_shape_and_the_limit():
    message = error(TrainSpec.from_dict, {"model": {"input_shape": [3, 100000, 100000]}})
    assert message == (
        "model.input_shape: 3,100000,100000 is 30,000,000,000 values per sample; must be at most 268,435,456"
    )
    assert error(ExportSpec.from_dict, {"model": {"input_shape": [17, 4096, 4096]}}).startswith(
        "model.input_shape: "
    )


@pytest.mark.parametrize("cls", list(SPEC_TYPES.values()), ids=lambda c: c.__name__)
def test_integer_bounds_fit_the_forms_spin_boxes(cls):
    # The GUI's spec form turns an int field's min and max into a QSpinBox range, which holds 32-bit ints
    # only; seeds alone go to torch's 64-bit bound, and the form clamps those (tests/gui/test_spec_form*).
    for path, hint, _default, meta in cls.iter_fields():
        if hint is int and meta.get("max") is not None:
            assert meta["max"] <= 2**31 - 1 or (path.endswith("seed") and meta["max"] == MAX_SEED), path


def test_open_choices_and_patterns():
    message = error(TrainSpec.from_dict, {"dataset": {"name": "imagenet"}})
    assert message.startswith("dataset.name: 'imagenet' is not allowed; choose one of: digits, mnist")
    assert "fake" in message
    message = error(TrainSpec.from_dict, {"device": "gpu"})
    assert message.startswith("device: 'gpu' is not allowed") and "cuda:N" in message
    for device in ("auto", "cpu", "mps", "cuda", "cuda:0", "cuda:12"):
        assert TrainSpec.from_dict({"device": device}).device == device
    assert "cuda:N" in error(QuantSpec.from_dict, {"device": "cuda:x"})
    message = error(ExportSpec.from_dict, {"format": "tflite"})
    assert message.startswith("format: 'tflite' is not allowed") and "onnx_qdq" in message
    message = error(BenchSpec.from_dict, {"backends": "eager,ort"})
    assert message.startswith("backends[1]: 'ort' is not allowed") and "onnxruntime_int8" in message
    assert "quantize run" in error(ExportSpec.from_dict, {"format": "onnx_qdq"})


@pytest.mark.parametrize(
    "name", ["mlp", "cnn", "torchvision:resnet18", "file:models/net.py:Net", "file:C:\\m\\net.py:build"]
)
def test_model_names_that_are_allowed(name):
    assert ModelSpec.from_dict({"name": name}).name == name


@pytest.mark.parametrize(
    "name", ["resnet", "torchvision:", "file:net.py", "file:net.txt:Net", "file:net.py:9x"]
)
def test_model_names_that_are_not(name):
    message = error(TrainSpec.from_dict, {"model": {"name": name}})
    assert message.startswith(f"model.name: {name!r} is not allowed")
    assert "torchvision:<arch>" in message and "file:<path.py>:<ClassOrFactory>" in message


def test_list_lengths():
    assert (
        error(BenchSpec.from_dict, {"backends": []}) == "backends: [] has too few items; must have at least 1"
    )
    assert "batch_sizes: [] has too few items" in error(BenchSpec.from_dict, {"batch_sizes": ""})
    message = error(TrainSpec.from_dict, {"dataset": {"image_size": [1, 2, 3]}})
    assert message == "dataset.image_size: [1, 2, 3] has too many items; must have at most 2"
    assert "model.input_shape: [1, 2, 3, 4]" in error(
        TrainSpec.from_dict, {"model": {"input_shape": "1,2,3,4"}}
    )
    assert DataSpec.from_dict({"image_size": [64]}).image_size == [64]


def test_unknown_field_did_you_mean():
    assert error(TrainSpec.from_dict, {"lrr": 0.1}) == "lrr: unknown field; did you mean 'lr'?"
    message = error(TrainSpec.from_dict, {"dataset": {"nmae": "mnist"}})
    assert message == "dataset.nmae: unknown field; did you mean 'name'?"
    message = error(QuantSpec.from_dict, {"model": {"num_clases": 3}})
    assert message == "model.num_clases: unknown field; did you mean 'num_classes'?"


def test_unknown_field_with_nothing_close_lists_the_fields():
    message = error(GraphSpec.from_dict, {"zzzzzz": 1})
    assert message == (
        "zzzzzz: unknown field; allowed fields: source, model, dataset, const_element_count_limit, port, "
        "open_browser, quant_run"
    )
    message = error(TrainSpec.from_dict, {"model": {"qqqqqq": 1}})
    assert message.startswith("model.qqqqqq: unknown field; allowed fields: name, num_classes, input_shape")


def test_augment_messages():
    message = error(TrainSpec.from_dict, {"dataset": {"augment": ["blur"]}})
    assert message.startswith(
        "dataset.augment[0].name: 'blur' is not allowed; choose one of: random_crop, hflip"
    )
    assert "random_erasing" in message
    message = error(DataSpec.from_dict, {"augment": [{"name": "hflip"}, {"p": 0.5}]})
    assert message.startswith("augment[1].name: {'p': 0.5} has no name; choose one of:")
    assert "augment[0]: 3 is not a table" == error(DataSpec.from_dict, {"augment": [3]})


def test_normalize_messages():
    message = error(TrainSpec.from_dict, {"dataset": {"normalize": "imagenet"}})
    assert message.startswith("dataset.normalize: 'imagenet' is not allowed; choose one of: auto, none")
    assert "mean" in message and "std" in message
    assert error(DataSpec.from_dict, {"normalize": 3}) == "normalize: 3 is not a string or a table"
    message = error(DataSpec.from_dict, {"normalize": {"mean": [0.5]}})
    assert message.startswith("normalize: {'mean': [0.5]} has no std")
    message = error(TrainSpec.from_dict, {"dataset": {"normalize": {"mean": [0.5], "sdt": [1]}}})
    assert message == "dataset.normalize.sdt: unknown field; did you mean 'std'?"
    message = error(DataSpec.from_dict, {"normalize": {"mean": [0.5, 0.5], "std": [1.0]}})
    assert message.startswith("normalize.std: [1.0] has 1 values but mean has 2")
    message = error(DataSpec.from_dict, {"normalize": {"mean": [0.5, 0.5], "std": [1.0, 0]}})
    assert message == "normalize.std[1]: 0.0 is out of range; must be > 0"
    message = error(DataSpec.from_dict, {"normalize": {"mean": [], "std": []}})
    assert message == "normalize.mean: [] has too few items; must have at least 1"


# --- cross-field checks ----------------------------------------------------------------------------


def test_fractions_must_leave_room_for_training():
    message = error(TrainSpec.from_dict, {"dataset": {"val_fraction": 0.6, "test_fraction": 0.5}})
    assert message.startswith("dataset.val_fraction: 0.6 plus test_fraction 0.5")
    assert "< 1" in message
    assert DataSpec.from_dict({"val_fraction": 0.5, "test_fraction": 0.4}).val_fraction == 0.5


def test_nproc_needs_ddp():
    message = error(TrainSpec.from_dict, {"nproc": 2})
    assert message.startswith("nproc: 2") and "distributed=ddp" in message
    assert TrainSpec.from_dict({"nproc": 2, "distributed": "ddp"}).nproc == 2


# --- overrides -------------------------------------------------------------------------------------


def test_overrides_coerce_with_the_field_type():
    data = {"epochs": 10, "model": {"name": "mlp"}}
    result = apply_overrides(
        data,
        [
            "lr=0.01",
            "epochs=3",
            "deterministic=yes",
            "model.input_shape=1,28,28",
            "dataset.augment=hflip,rotation",
            "amp=bf16",
            "dataset.name=mnist",
            "model.checkpoint=",
        ],
        TrainSpec,
    )
    assert result["lr"] == 0.01 and type(result["lr"]) is float
    assert result["epochs"] == 3 and type(result["epochs"]) is int
    assert result["deterministic"] is True
    assert result["model"] == {"name": "mlp", "input_shape": [1, 28, 28], "checkpoint": ""}
    assert result["dataset"] == {"augment": [{"name": "hflip"}, {"name": "rotation"}], "name": "mnist"}
    assert result["amp"] == "bf16"
    assert data == {"epochs": 10, "model": {"name": "mlp"}}  # the input is untouched
    spec = TrainSpec.from_dict(result)
    assert spec.model.input_shape == [1, 28, 28] and spec.dataset.augment[1] == {"name": "rotation"}


def test_overrides_create_absent_tables_and_later_ones_win():
    result = apply_overrides({}, ["dataset.name=fake", "dataset.size=50", "epochs=2", "epochs=4"], TrainSpec)
    assert result == {"dataset": {"name": "fake", "size": 50}, "epochs": 4}


def test_override_errors_name_the_override():
    assert (
        error(apply_overrides, {}, ["lrr=0.1"], TrainSpec)
        == "--set lrr=0.1: unknown field 'lrr'; did you mean 'lr'?"
    )
    message = error(apply_overrides, {}, ["dataset.nmae=mnist"], TrainSpec)
    assert message == "--set dataset.nmae=mnist: unknown field 'dataset.nmae'; did you mean 'dataset.name'?"
    message = error(apply_overrides, {}, ["lr"], TrainSpec)
    assert message.startswith("--set lr: expected key=value")
    assert error(apply_overrides, {}, ["=3"], TrainSpec).startswith("--set =3: expected key=value")
    assert (
        error(apply_overrides, {}, ["epochs=ten"], TrainSpec)
        == "--set epochs=ten: epochs: 'ten' is not an integer"
    )
    message = error(apply_overrides, {}, ["optimizer=adamx"], TrainSpec)
    assert message.startswith("--set optimizer=adamx: optimizer: 'adamx' is not allowed; choose one of: sgd")
    assert "'lr' has no fields" in error(apply_overrides, {}, ["lr.x=1"], TrainSpec)
    assert "is a table" in error(apply_overrides, {}, ["dataset=mnist"], TrainSpec)
    assert "not a table" in error(apply_overrides, {"dataset": "mnist"}, ["dataset.name=mnist"], TrainSpec)


# --- files -----------------------------------------------------------------------------------------


def test_load_missing_file(tmp_path):
    path = tmp_path / "spec.toml"
    assert error(TrainSpec.load, path) == f"{path}: no such file"


def test_load_bad_suffix(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("epochs: 3\n")
    message = error(TrainSpec.load, path)
    assert message.startswith(f"{path}: ") and ".toml" in message and ".json" in message
    assert ".toml" in error(dump, TrainSpec(), tmp_path / "spec")


def test_load_bad_toml_names_file_and_line(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text('epochs = 3\nlr = 0.1\noptimizer = \n[dataset]\nname = "mnist"\n')
    message = error(TrainSpec.load, path)
    assert message.startswith(f"{path}: line 3: invalid TOML (")
    path.write_text("epochs = [1,")
    assert error(TrainSpec.load, path).startswith(f"{path}: line 1: invalid TOML (")


def test_load_bad_json_names_file_and_line(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text('{\n  "epochs": 3,\n  "lr": ,\n}\n')
    assert error(TrainSpec.load, path).startswith(f"{path}: line 3: invalid JSON (")
    path.write_text("[1, 2]")
    assert error(TrainSpec.load, path).startswith(f"{path}: the top level must be an object")


def test_load_validation_errors_name_the_file(tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text("[dataset]\nnmae = 'mnist'\n")
    assert error(TrainSpec.load, path) == f"{path}: dataset.nmae: unknown field; did you mean 'name'?"


def test_load_directory_is_a_spec_error(tmp_path):
    path = tmp_path / "dir.toml"
    path.mkdir()
    assert error(TrainSpec.load, path).startswith(f"{path}: cannot read")


def test_from_toml_and_json_name_the_source():
    assert error(TrainSpec.from_toml, "a = = 1", source="mine.toml").startswith(
        "mine.toml: line 1: invalid TOML"
    )
    assert error(TrainSpec.from_json, "{", source="mine.json").startswith("mine.json: line 1: invalid JSON")
    assert error(TrainSpec.from_toml, "x = ").startswith("<string>: line 1: invalid TOML")


def test_a_key_or_table_given_twice_is_named():
    # tomllib says only "Cannot overwrite a value" and where it stopped: after the value, or at the file's
    # end.
    assert (
        error(TrainSpec.from_toml, "lr = 0.1\nlr = 0.2\n") == "<string>: line 2: the key 'lr' appears twice"
    )
    assert error(TrainSpec.from_toml, "epochs = 1\n[dataset]\nname = 'a'\nname = 'b'") == (
        "<string>: line 4: the key 'dataset.name' appears twice"
    )
    assert error(TrainSpec.from_toml, "lr = 1\nlr = [\n  1,\n  2,\n]\n") == (
        "<string>: line 2: the key 'lr' appears twice"
    )  # the key's line, not the end of its list
    assert error(TrainSpec.from_toml, "[model]\nname = 'cnn'\n[model]\n") == (
        "<string>: line 3: the table [model] appears twice"
    )


# --- field listings and verbs ----------------------------------------------------------------------


def test_iter_fields_lists_nested_leaves():
    fields = {path: (hint, default, meta) for path, hint, default, meta in TrainSpec.iter_fields()}
    assert "dataset.name" in fields and "model.input_shape" in fields and "lr" in fields
    assert "dataset" not in fields and "model" not in fields
    hint, default, meta = fields["dataset.name"]
    assert hint is str and default == "digits" and "fake" in meta["choices"]
    assert fields["lr"][1] == 1e-3 and fields["lr"][2]["min_exclusive"] is True
    assert fields["dataset.augment"][1] == []
    assert len(fields) == len(TrainSpec.to_dict(TrainSpec())) - 2 + len(DataSpec().to_dict()) + len(
        ModelSpec().to_dict()
    )


@pytest.mark.parametrize("cls", list(SPEC_TYPES.values()), ids=lambda c: c.__name__)
def test_every_field_has_help(cls):
    for path, _hint, _default, meta in cls.iter_fields():
        text = meta.get("help", "")
        assert text.strip() and text.rstrip().endswith("."), path
        assert cls.field_help(path) == text


def test_every_default_spec_validates():
    for cls in SPEC_TYPES.values():
        for path, _hint, default, _meta in cls.iter_fields():
            assert default is not None, path
        assert cls.from_dict(cls().to_dict()) == cls()


def test_field_help_of_unknown_field():
    assert TrainSpec.field_help("dataset.name").startswith("Dataset to load")
    assert (
        error(TrainSpec.field_help, "dataset.nmae")
        == "unknown field 'dataset.nmae'; did you mean 'dataset.name'?"
    )


def test_spec_for_verbs():
    assert spec_for("train") is TrainSpec and spec_for("quantize") is QuantSpec
    assert spec_for("export") is ExportSpec and spec_for("bench") is BenchSpec
    assert spec_for("graph") is GraphSpec and spec_for("data") is DataInfoSpec
    message = error(spec_for, "trian")
    assert "'trian'" in message and "train" in message and "quantize" in message


def test_specs_import_neither_torch_nor_qt():
    import subprocess

    code = (
        "import sys, workbench.specs; print(sorted(m for m in ('torch', 'PySide6', 'numpy') if m in "
        "sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- property --------------------------------------------------------------------------------------

train_values = st.fixed_dictionaries(
    {
        "epochs": st.integers(1, 10_000),
        "lr": st.floats(1e-9, 10.0, allow_nan=False, allow_infinity=False),
        "momentum": st.floats(0.0, 1.0),
        "optimizer": st.sampled_from(["sgd", "adam", "adamw", "rmsprop"]),
        "deterministic": st.booleans(),
        "device": st.sampled_from(["auto", "cpu", "mps", "cuda"])
        | st.integers(0, 64).map(lambda n: f"cuda:{n}"),
        "model": st.fixed_dictionaries(
            {
                "input_shape": st.lists(st.integers(1, 4096), max_size=3).filter(
                    lambda shape: math.prod(shape) <= MAX_SAMPLE_VALUES
                )
            }
        ),
        "dataset": st.fixed_dictionaries(
            {
                "name": st.sampled_from(["digits", "mnist", "fake"]),
                "root": st.text(max_size=20),
                "augment": st.lists(st.sampled_from(["hflip", "vflip", "rotation"]), max_size=3),
            }
        ),
    }
)


@settings(max_examples=75, deadline=None)
@given(train_values)
def test_property_toml_round_trip(values):
    spec = TrainSpec.from_dict(values)
    assert TrainSpec.from_toml(spec.to_toml()) == spec
    assert TrainSpec.from_json(spec.to_json()) == spec


def test_on_device_and_channels_last_take_auto_or_a_boolean():
    assert DataSpec().on_device == "auto" and TrainSpec().channels_last == "auto"
    spec = TrainSpec.from_dict({"channels_last": "true", "dataset": {"on_device": False}})
    assert spec.channels_last is True and spec.dataset.on_device is False
    assert TrainSpec.from_dict({"channels_last": "off"}).channels_last is False  # older specs keep working
    assert TrainSpec.from_toml(TrainSpec().to_toml()) == TrainSpec()
    data = apply_overrides({}, ["channels_last=auto", "dataset.on_device=true"], TrainSpec)
    assert data == {"channels_last": "auto", "dataset": {"on_device": True}}
    assert error(TrainSpec.from_dict, {"channels_last": "fast"}) == (
        "channels_last: 'fast' is not a boolean or one of auto"
    )
    assert error(TrainSpec.from_dict, {"dataset": {"on_device": 2}}).startswith("dataset.on_device: 2 is not")


def test_a_file_beside_the_spec_is_found_from_any_working_folder(tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.py").write_text("")
    (project / "train.toml").write_text(
        '[dataset]\nname = "file:data.py:Shapes"\n[model]\nname = "file:nets.py:Net"\n'
    )
    monkeypatch.chdir(tmp_path)
    spec = TrainSpec.load(project / "train.toml")
    assert spec.dataset.name == f"file:{project / 'data.py'}:Shapes"  # beside the spec: anchored there
    assert spec.model.name == "file:nets.py:Net"  # nowhere to be found: left for the job to report
    monkeypatch.chdir(project)
    # in the working folder: as written
    assert TrainSpec.load("train.toml").dataset.name == "file:data.py:Shapes"


def test_a_dotted_key_inside_a_free_form_table_is_set_with_its_toml_value():
    data = apply_overrides(
        {"model": {"name": "file:m.py:Net", "args": {"width": 8}}},
        [
            "model.args.n_classes=3",
            'model.args.act="relu"',
            "model.args.bias=true",
            "model.args.sizes=[1, 2]",
            "model.args.norm=batch",
            "dataset.args.size=50",
        ],
        TrainSpec,
    )
    assert data["model"]["args"] == {
        "width": 8,
        "n_classes": 3,
        "act": "relu",
        "bias": True,
        "sizes": [1, 2],
        "norm": "batch",
    }
    assert data["dataset"]["args"] == {"size": 50}
    spec = TrainSpec.from_dict(data)
    assert spec.model.args["n_classes"] == 3 and isinstance(spec.model.args["n_classes"], int)
    # A field that is not a free-form table still says it has no fields.
    with pytest.raises(SpecError, match="has no fields"):
        apply_overrides({}, ["model.name.x=3"], TrainSpec)
