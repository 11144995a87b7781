"""Model and dataset families in their registries: Lightning is registered like any other source (its training
route, its own outputs, user code), and a family registered by a test alone reaches build_model, load_dataset
and the user-code checks, with no prefix test anywhere."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.errors import JobError
from workbench.specs import DataSpec, ModelSpec
from workbench.worker.data.loader import load_dataset
from workbench.worker.data.registry import (
    DATASETS,
    find_dataset,
    is_user_dataset,
    list_datasets,
    register_dataset_family,
)
from workbench.worker.models.build import build_model
from workbench.worker.models.registry import (
    LIGHTNING,
    MODELS,
    WORKBENCH,
    find_model,
    is_user_code,
    model_trainer,
    register_model,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lightning"))
from lightning_helpers import write_project  # noqa: E402


@pytest.fixture
def scratch_registries(monkeypatch):
    """Registrations made by a test are forgotten after it: each registry gets a copy of its entries."""
    for registry in (MODELS, DATASETS):
        registry.load_builtins()
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))


def test_lightning_is_a_registered_model_family_trained_by_lightning():
    entry, arg = find_model("lightning:/project/model.py:Classifier")
    assert (entry.name, arg) == ("lightning", "/project/model.py:Classifier")
    assert entry.family and entry.trainer == LIGHTNING and entry.owns_outputs and entry.user_code
    assert model_trainer("lightning:/project/model.py:Classifier") == LIGHTNING
    assert is_user_code("lightning:/project/model.py:Classifier") and is_user_code("file:/project/net.py:Net")
    for name in ("cnn", "mlp", "torchvision:resnet18", "file:/project/net.py:Net"):
        assert model_trainer(name) == WORKBENCH and not find_model(name)[0].owns_outputs
    assert not is_user_code("cnn") and not is_user_code("torchvision:resnet18")
    # A name no entry knows trains on the built-in route, whose model build then words the error.
    assert model_trainer("lightnin:/project/model.py:Classifier") == WORKBENCH
    assert find_model("lightning") is None and find_model("lightning:") is None


def test_lightning_and_file_are_registered_dataset_families_of_user_code():
    for name, family in (("lightning:/p/data.py:Features", "lightning"), ("file:/p/data.py:Digits", "file")):
        entry = find_dataset(name)
        assert entry.name == family and entry.family and entry.user_code and is_user_dataset(name)
    assert not is_user_dataset("digits") and not is_user_dataset("file") and not is_user_dataset("nope:x")
    assert (
        "lightning" not in list_datasets() and "file" not in list_datasets() and "digits" in list_datasets()
    )


def test_an_unknown_dataset_name_lists_the_families_as_they_are_written():
    with pytest.raises(
        JobError, match=r"no dataset named 'zzz'; choose one of: .*lightning:<path.py>:<Light"
    ):
        load_dataset(DataSpec(name="zzz"))


@pytest.mark.usefixtures("scratch_registries")
def test_a_model_family_that_owns_its_outputs_is_built_as_declared():
    """Five outputs for num_classes 10 fail the built-in route's trial pass; a family that owns its outputs is
    built as its builder gives it, with model.freeze still applied."""

    @register_model("fixed", family=True, owns_outputs=True, user_code=True)
    def build_fixed(arg, *, num_classes, input_shape, weights, log, args=None):
        return nn.Sequential(nn.Linear(3, int(arg)), nn.Linear(int(arg), 5))

    model = build_model(ModelSpec(name="fixed:4", num_classes=10, freeze=["0"]))
    assert model.training and model(torch.zeros(2, 3)).shape == (2, 5)
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    assert is_user_code("fixed:4") and model_trainer("fixed:4") == WORKBENCH

    @register_model("plain", family=True)
    def build_plain(arg, *, num_classes, input_shape, weights, log, args=None):
        return nn.Linear(3, 5)

    with pytest.raises(JobError, match="gives outputs of shape 5 per sample, but model.num_classes is 10"):
        build_model(ModelSpec(name="plain:x", num_classes=10), input_shape=(3,))


@pytest.mark.usefixtures("scratch_registries")
def test_a_dataset_family_is_opened_afresh_by_load_dataset_for_every_job(tmp_path):
    opened = []

    @register_dataset_family("mine", usage="mine:<what>", user_code=True)
    def open_mine(spec, workspace, ctx=None):
        opened.append((spec.name, workspace))
        return object()

    first, second = (
        load_dataset(DataSpec(name="mine:a"), workspace=tmp_path),
        load_dataset(DataSpec(name="mine:a"), workspace=tmp_path),
    )
    assert first is not second and opened == [("mine:a", tmp_path.absolute())] * 2
    assert is_user_dataset("mine:a") and "mine" not in list_datasets()


def test_a_lightning_model_builds_from_its_class_and_args_alone(tmp_path):
    pytest.importorskip("lightning")
    project = write_project(tmp_path)
    model = build_model(
        ModelSpec(name=f"lightning:{project}:Classifier", num_classes=7, args={"hidden": 4}, freeze=["net.0"])
    )
    assert model.training and model(torch.zeros(2, 8)).shape == (2, 3)  # its own 3 classes, not num_classes
    assert model.net[0].weight.shape == (4, 8) and not model.net[0].weight.requires_grad
    with pytest.raises(JobError, match="model.weights: a lightning: model has no pretrained weights"):
        build_model(ModelSpec(name=f"lightning:{project}:Classifier", weights="DEFAULT"))
