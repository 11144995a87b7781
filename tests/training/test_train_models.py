"""The model registry and build_model: built-in networks, user files, checkpoints, heads, freezing,
torchvision."""

from __future__ import annotations

import pytest
import torch
from training_helpers import QUICK, done, failed, merge, train

from workbench.errors import JobError
from workbench.specs import ModelSpec
from workbench.worker.checkpoints import load_state_dict, save_state_dict
from workbench.worker.models import build_model, find_head, get_model, list_models, load_checkpoint


def test_the_registry_lists_every_way_to_name_a_model():
    assert list_models() == [
        "cnn",
        "file:<path.py>:<ClassOrFactory>",
        "hf:<folder or hub id>",
        "lightning:<path.py>:<LightningModule>",
        "mlp",
        "timm:<name>",
        "torchvision:<arch>",
    ]
    with pytest.raises(JobError, match="'cnm' is not a known model; did you mean 'cnn'"):
        get_model("cnm", num_classes=10, input_shape=(1, 8, 8))


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 28, 28), (3, 32, 32), (4, 20, 12)])
def test_cnn_adapts_to_channels_size_and_classes(shape):
    model = build_model(ModelSpec(name="cnn", num_classes=7), input_shape=shape)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    model.eval()
    assert model(torch.zeros(3, *shape)).shape == (3, 7)


def test_input_shape_in_the_spec_wins_over_the_dataset():
    model = build_model(ModelSpec(name="mlp", input_shape=[3, 4, 4]), input_shape=(1, 8, 8))
    assert model[1].in_features == 48


def _write(path, text):
    path.write_text(text)
    return path


def test_a_user_file_model_is_called_with_num_classes_and_trains(tmp_path):
    model_file = _write(
        tmp_path / "my_net.py",
        "from torch import nn\n\n"
        "def make(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))\n"
        "class NoArgs(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(64, 10)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x.flatten(1))\n",
    )
    logs = []
    model = build_model(
        ModelSpec(name=f"file:{model_file}:make", num_classes=3), input_shape=(1, 8, 8), log=logs.append
    )
    assert model[1].out_features == 3
    assert logs == [f"running user code from {model_file}"]
    assert (
        build_model(ModelSpec(name=f"file:{model_file}:NoArgs"), input_shape=(1, 8, 8)).fc.out_features == 10
    )
    with pytest.raises(JobError, match="'Missing' in .* is not defined there; it defines: NoArgs, make"):
        build_model(ModelSpec(name=f"file:{model_file}:Missing"), input_shape=(1, 8, 8))
    result = done(train(tmp_path, merge(QUICK, epochs=1, model={"name": f"file:{model_file}:make"})))
    assert result["final"]["val_accuracy"] > 0.5


def test_model_args_reach_a_user_file_model_and_a_wrong_name_is_refused(tmp_path):
    from workbench.errors import SpecError

    model_file = _write(
        tmp_path / "wide.py",
        "from torch import nn\n\n"
        "def make(num_classes, hidden=4):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.Linear(hidden, num_classes))\n",
    )
    model = build_model(
        ModelSpec(name=f"file:{model_file}:make", num_classes=3, args={"hidden": 12}), input_shape=(1, 8, 8)
    )
    assert model[1].out_features == 12 and model[2].out_features == 3
    with pytest.raises(
        JobError,
        match=r"^model.args: make in .*wide.py takes no argument 'hiden'; its parameters "
        r"are: num_classes, hidden$",
    ):
        build_model(ModelSpec(name=f"file:{model_file}:make", args={"hiden": 12}), input_shape=(1, 8, 8))
    with pytest.raises(SpecError, match="args: cnn is a built-in model and takes no arguments"):
        ModelSpec.from_dict({"name": "cnn", "args": {"hidden": 3}})


def test_a_user_file_with_a_syntax_error_fails_with_file_and_line_and_no_traceback(tmp_path):
    model_file = _write(tmp_path / "broken.py", "import torch\n\ndef make(num_classes:\n    pass\n")
    result = train(tmp_path, merge(QUICK, model={"name": f"file:{model_file}:make"}))
    message = failed(result)
    assert f"{model_file}, line 3" in message and "syntax error" in message
    assert "Traceback" not in message


def test_a_user_file_whose_import_fails_names_the_line(tmp_path):
    model_file = _write(tmp_path / "needs.py", "import torch\nimport not_a_real_package_xyz\n")
    with pytest.raises(JobError) as info:
        build_model(ModelSpec(name=f"file:{model_file}:Net"), input_shape=(1, 8, 8))
    assert f"{model_file}, line 2: ModuleNotFoundError" in str(info.value)


def test_a_model_that_cannot_take_the_input_says_so(tmp_path):
    model_file = _write(
        tmp_path / "wrong_size.py",
        "from torch import nn\n\n"
        "def make(num_classes):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(100, num_classes))\n",
    )
    with pytest.raises(JobError, match=r"cannot take inputs of shape 1,8,8: RuntimeError"):
        build_model(ModelSpec(name=f"file:{model_file}:make"), input_shape=(1, 8, 8))


def test_a_checkpoint_that_does_not_fit_names_the_file_and_the_first_mismatches(tmp_path):
    torch.manual_seed(0)
    mlp = build_model(ModelSpec(name="mlp", num_classes=5), input_shape=(1, 8, 8))
    path = tmp_path / "mlp5.pt"
    save_state_dict(mlp.state_dict(), path)
    with pytest.raises(JobError) as info:
        build_model(ModelSpec(name="mlp", num_classes=10, checkpoint=str(path)), input_shape=(1, 8, 8))
    message = str(info.value)
    assert (
        str(path) in message
        and "5.weight (file 5x128, model 10x128)" in message
        and "replace_head" in message
    )
    with pytest.raises(JobError, match="missing keys: features.0.weight"):
        load_checkpoint(build_model(ModelSpec(name="cnn"), input_shape=(1, 8, 8)), path)
    # A fitting file loads, and so does the `model` entry of a workbench last.pt.
    loaded = build_model(ModelSpec(name="mlp", num_classes=5, checkpoint=str(path)), input_shape=(1, 8, 8))
    torch.testing.assert_close(loaded.state_dict(), mlp.state_dict())
    save_state_dict({"format": 1, "model": mlp.state_dict(), "state": {}}, tmp_path / "last.pt")
    load_checkpoint(loaded, tmp_path / "last.pt")


def test_replace_head_swaps_the_last_linear():
    torch.manual_seed(0)
    model = build_model(ModelSpec(name="cnn", num_classes=10, replace_head=True), input_shape=(1, 8, 8))
    assert find_head(model)[0] == "classifier" and model.classifier.out_features == 10


def test_freeze_backbone_trains_only_the_head(tmp_path):
    torch.manual_seed(0)
    start = build_model(ModelSpec(name="cnn"), input_shape=(1, 8, 8))
    path = tmp_path / "start.pt"
    save_state_dict(start.state_dict(), path)
    result = done(
        train(
            tmp_path,
            merge(QUICK, epochs=1, model={"name": "cnn", "checkpoint": str(path), "freeze": ["backbone"]}),
        )
    )
    assert result["parameters"]["trainable"] == 64 * 10 + 10
    final = load_state_dict(result["checkpoint"])
    for key, value in start.state_dict().items():
        if key.startswith("classifier."):
            assert not torch.equal(final[key], value), key  # the head learned
        else:
            assert torch.equal(final[key], value), key  # weights and BatchNorm statistics untouched


def test_freeze_by_prefix_and_a_prefix_that_matches_nothing():
    model = build_model(ModelSpec(name="cnn", freeze=["features.0"]), input_shape=(1, 8, 8))
    assert [n for n, p in model.named_parameters() if not p.requires_grad] == ["features.0.weight"]
    with pytest.raises(
        JobError, match="'encoder' names no parameters of this model; its modules are: features, pool"
    ):
        build_model(ModelSpec(name="cnn", freeze=["encoder"]), input_shape=(1, 8, 8))


def test_builtin_models_have_no_weights_to_download():
    with pytest.raises(JobError, match="cnn has no pretrained weights .* model.checkpoint"):
        build_model(ModelSpec(name="cnn", weights="DEFAULT"), input_shape=(1, 8, 8))


def test_torchvision_names_and_weights_get_clear_messages():
    with pytest.raises(JobError, match="no classification model 'resnet19'; close names: resnet18"):
        build_model(ModelSpec(name="torchvision:resnet19"), input_shape=(3, 32, 32))
    with pytest.raises(
        JobError, match="'IMAGENET9' is not a weight set of resnet18; choose one of: DEFAULT, IMAGENET1K_V1"
    ):
        build_model(ModelSpec(name="torchvision:resnet18", weights="IMAGENET9"), input_shape=(3, 32, 32))


@pytest.mark.slow
def test_pretrained_weights_offline_say_to_pass_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # an empty cache, so the download is really tried
    try:
        model = build_model(
            ModelSpec(name="torchvision:resnet18", weights="DEFAULT", num_classes=1000),
            input_shape=(3, 32, 32),
        )
    except JobError as exc:
        assert "cannot be downloaded offline" in str(exc) and "model.checkpoint" in str(exc)
    else:  # this machine is online: then the weights really loaded
        assert model.fc.out_features == 1000


@pytest.mark.slow
def test_torchvision_resnet18_builds_and_trains_a_tiny_epoch_on_fake_data(tmp_path):
    spec = {
        "dataset": {"name": "fake", "size": 96, "num_classes": 10},
        "epochs": 1,
        "batch_size": 16,
        "model": {"name": "torchvision:resnet18", "input_shape": [3, 32, 32], "num_classes": 10},
    }
    result = done(train(tmp_path, spec))
    assert result["parameters"]["total"] > 11_000_000 and result["epochs_completed"] == 1
    assert result["final"]["test_accuracy"] is not None
