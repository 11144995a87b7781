"""Models by name from the optional extras: `hf:<folder>` (Hugging Face transformers, loaded offline through
its Auto classes from a folder written by save_pretrained) and `timm:<name>`; their refusals and install
messages, and a tiny BERT trained for an epoch by `workbench train` on a user token Dataset."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from workbench.errors import JobError, SpecError
from workbench.specs import ModelSpec
from workbench.worker.models import build_model, get_model_builder

SEQUENCE = 12  # tokens per sample


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=2,
    )
    folder = tmp_path_factory.mktemp("hf") / "bert"
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def vit(tmp_path_factory) -> Path:
    transformers = pytest.importorskip("transformers")
    config = transformers.ViTConfig(
        image_size=16,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=3,
    )
    folder = tmp_path_factory.mktemp("hf") / "vit"
    transformers.ViTForImageClassification(config).save_pretrained(folder)
    return folder


def _ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 100, shape, generator=torch.Generator().manual_seed(0))


# -- hf: -----------------------------------------------------------------------------------------------------


def test_an_hf_text_classifier_from_a_saved_folder_gives_logits_for_token_ids(bert):
    logs: list[str] = []
    model = build_model(
        ModelSpec(name=f"hf:{bert}", num_classes=2),
        input_shape=(SEQUENCE,),
        example=_ids(SEQUENCE),
        log=logs.append,
    )
    model.eval()
    out = model(_ids(4, SEQUENCE))
    assert isinstance(out, torch.Tensor) and out.shape == (4, 2)
    # Keyword inputs from a dict sample, named as transformers names them (and as an ONNX export names its
    # inputs).
    mask = torch.ones(4, SEQUENCE, dtype=torch.long)
    assert torch.allclose(model(input_ids=_ids(4, SEQUENCE), attention_mask=mask), out)
    assert any("as sequence-classification" in line and "without remote code" in line for line in logs)


def test_num_classes_other_than_the_checkpoints_gives_a_fresh_head_of_that_size(bert):
    logs: list[str] = []
    example = {"input_ids": _ids(SEQUENCE), "attention_mask": torch.ones(SEQUENCE, dtype=torch.long)}
    model = build_model(
        ModelSpec(name=f"hf:{bert}", num_classes=5), input_shape=(SEQUENCE,), example=example, log=logs.append
    )
    assert model.eval()(**{key: value[None] for key, value in example.items()}).shape == (1, 5)
    assert any("the checkpoint has 2 labels" in line for line in logs)


def test_model_args_pick_the_task_and_reach_from_pretrained(bert):
    spec = ModelSpec(
        name=f"hf:{bert}", num_classes=4, args={"task": "token-classification", "hidden_dropout_prob": 0.25}
    )
    model = build_model(spec, input_shape=(SEQUENCE,), example=_ids(SEQUENCE), task="custom")
    assert type(model.model).__name__ == "BertForTokenClassification"
    assert model.model.config.hidden_dropout_prob == 0.25
    assert model.eval()(_ids(2, SEQUENCE)).shape == (2, SEQUENCE, 4)  # a score per token


def test_an_hf_image_classifier_takes_pixels(vit):
    model = build_model(ModelSpec(name=f"hf:{vit}", num_classes=3), input_shape=(3, 16, 16))
    assert type(model.model).__name__ == "ViTForImageClassification"  # the task its config names
    assert model.eval()(torch.randn(2, 3, 16, 16)).shape == (2, 3)


def test_a_missing_folder_says_hf_works_offline_from_a_folder_or_the_cache(tmp_path):
    pytest.importorskip("transformers")
    missing = tmp_path / "nothing-here"
    with pytest.raises(
        JobError,
        match=r"^model.name: hf:.*nothing-here.* is not a folder here, and not a model in "
        r"the local Hugging Face cache; hf: works offline, from a local folder \(e.g. "
        r"one written by save_pretrained\) or the cache",
    ):
        build_model(ModelSpec(name=f"hf:{missing}"), input_shape=(SEQUENCE,))
    (tmp_path / "empty").mkdir()
    with pytest.raises(JobError, match=r"^model.name: hf:.*empty: the folder .*empty holds no config.json"):
        build_model(ModelSpec(name=f"hf:{tmp_path / 'empty'}"), input_shape=(SEQUENCE,))


def test_hf_refuses_remote_code_weights_and_a_wrong_task(bert):
    pytest.importorskip("transformers")
    with pytest.raises(JobError, match="^model.args: trust_remote_code is refused"):
        build_model(ModelSpec(name=f"hf:{bert}", args={"trust_remote_code": True}), input_shape=(SEQUENCE,))
    with pytest.raises(JobError, match="^model.weights: hf:.* loads the weights saved with it"):
        build_model(ModelSpec(name=f"hf:{bert}", weights="DEFAULT"), input_shape=(SEQUENCE,))
    with pytest.raises(
        JobError,
        match="^model.args: task 'translation' is not one of: sequence-classification, "
        "token-classification, image-classification$",
    ):
        build_model(ModelSpec(name=f"hf:{bert}", args={"task": "translation"}), input_shape=(SEQUENCE,))
    with pytest.raises(
        JobError,
        match="^model.args: num_labels is not passed to from_pretrained: set model.num_classes instead$",
    ):
        build_model(ModelSpec(name=f"hf:{bert}", args={"num_labels": 3}), input_shape=(SEQUENCE,))


def test_without_transformers_the_job_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now fails
    with pytest.raises(
        JobError,
        match=r"^model.name: an hf: model is loaded by Hugging Face transformers, which is "
        r"not installed here .*; install it with pip install 'torch-workbench\[hf\]'$",
    ):
        build_model(ModelSpec(name=f"hf:{tmp_path}"), input_shape=(SEQUENCE,))


def test_a_file_model_that_returns_a_transformers_model_works_as_it_is(tmp_path):
    pytest.importorskip("transformers")
    path = tmp_path / "wrapped.py"
    path.write_text(
        textwrap.dedent("""
        from transformers import BertConfig, BertForSequenceClassification


        def bert(num_classes):
            return BertForSequenceClassification(BertConfig(
                vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
                max_position_embeddings=64, num_labels=num_classes))
    """)  # noqa: E501
    )
    build_model(
        ModelSpec(name=f"file:{path}:bert", num_classes=3), input_shape=(SEQUENCE,), example=_ids(SEQUENCE)
    )


# -- timm: ---------------------------------------------------------------------------------------------------


def test_a_timm_model_is_built_untrained_for_the_input_channels_and_classes():
    pytest.importorskip("timm")
    model = build_model(ModelSpec(name="timm:resnet18", num_classes=3), input_shape=(3, 32, 32))
    assert model.eval()(torch.randn(2, 3, 32, 32)).shape == (2, 3)
    gray = build_model(
        ModelSpec(name="timm:test_vit", num_classes=4, args={"img_size": 16}), input_shape=(1, 16, 16)
    )
    assert gray.eval()(torch.randn(2, 1, 16, 16)).shape == (2, 4)


def test_timm_weights_come_from_a_local_state_dict_file(tmp_path):
    pytest.importorskip("timm")
    spec = ModelSpec(name="timm:test_vit", num_classes=3, args={"img_size": 16})
    trained = build_model(spec, input_shape=(3, 16, 16))
    torch.save(trained.state_dict(), tmp_path / "weights.pt")
    loaded = build_model(
        ModelSpec(
            name="timm:test_vit", num_classes=3, args={"img_size": 16}, weights=str(tmp_path / "weights.pt")
        ),
        input_shape=(3, 16, 16),
    )
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(loaded.eval()(x), trained.eval()(x))
    # The file's own 3 classes, then a fresh 5-class head where replace_head asks for it, as for torchvision.
    with pytest.raises(JobError, match="set model.replace_head=true to train a new head"):
        build_model(
            ModelSpec(
                name="timm:test_vit",
                num_classes=5,
                args={"img_size": 16},
                weights=str(tmp_path / "weights.pt"),
            ),
            input_shape=(3, 16, 16),
        )
    fresh_head = build_model(
        ModelSpec(
            name="timm:test_vit",
            num_classes=5,
            args={"img_size": 16},
            replace_head=True,
            weights=str(tmp_path / "weights.pt"),
        ),
        input_shape=(3, 16, 16),
    )
    assert fresh_head.eval()(x).shape == (2, 5)
    with pytest.raises(
        JobError,
        match="^model.weights: 'DEFAULT' is not a file; a timm: model loads its weights from "
        "a local state_dict file",
    ):
        build_model(ModelSpec(name="timm:resnet18", weights="DEFAULT"), input_shape=(3, 32, 32))


def test_timm_names_close_matches_and_refuses_what_the_workbench_sets():
    pytest.importorskip("timm")
    with pytest.raises(JobError, match="^model.name: timm has no model 'resnet_18'; close names: resnet18"):
        build_model(ModelSpec(name="timm:resnet_18"), input_shape=(3, 32, 32))
    with pytest.raises(JobError, match="^model.args: pretrained is not passed to timm.create_model"):
        build_model(ModelSpec(name="timm:resnet18", args={"pretrained": True}), input_shape=(3, 32, 32))
    with pytest.raises(
        JobError, match="^model.args: timm cannot build resnet18 with these arguments: .*'bogus'"
    ):
        build_model(ModelSpec(name="timm:resnet18", args={"bogus": 1}), input_shape=(3, 32, 32))


def test_without_timm_the_job_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(JobError, match=r"install it with pip install 'torch-workbench\[timm\]'$"):
        build_model(ModelSpec(name="timm:resnet18", num_classes=3), input_shape=(3, 32, 32))


# -- the spec and the registry -------------------------------------------------------------------------------


def test_the_spec_accepts_hf_and_timm_names_with_args():
    hub = ModelSpec.from_dict({"name": "hf:org/bert-tiny", "args": {"task": "token-classification"}})
    assert hub.name == "hf:org/bert-tiny"
    assert ModelSpec.from_dict({"name": "hf:/models/my bert", "args": {"revision": "main"}}).args
    assert ModelSpec.from_dict({"name": "timm:resnet18.a1_in1k", "args": {"drop_rate": 0.1}}).args
    with pytest.raises(SpecError, match=r"hf:<folder or hub id>, timm:<name>"):
        ModelSpec.from_dict({"name": "timm:"})
    assert get_model_builder("hf:C:\\models\\bert")[1] == "C:\\models\\bert"  # a Windows path keeps its colon


def test_runs_are_labelled_by_the_folder_or_the_timm_name():
    from workbench.gui.run_identity import short_model

    assert short_model("hf:/long/path/to/bert-tiny/") == "bert-tiny"
    assert short_model("hf:org/bert-tiny") == "bert-tiny"
    assert short_model("timm:resnet18") == "resnet18"


# -- training through the command line -----------------------------------------------------------------------

TOKENS = '''
import torch
from torch.utils.data import Dataset


class Tokens(Dataset):
    """Sequences of token ids; the class is whether the first id is 50 or more."""

    def __init__(self, size=64):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, 100, (size, 12), generator=g)
        self.y = (self.ids[:, 0] >= 50).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long)}, self.y[i]
'''


@pytest.mark.slow
def test_workbench_train_fine_tunes_an_hf_folder_on_a_user_token_dataset(tmp_path, bert):
    from cli_helpers import expect, no_traceback, one_json, wb

    (tmp_path / "tokens.py").write_text(TOKENS)
    spec = tmp_path / "spec.toml"
    spec.write_text(
        textwrap.dedent(f"""
        epochs = 1
        batch_size = 16
        device = "cpu"
        [dataset]
        name = "file:{tmp_path / "tokens.py"}:Tokens"
        num_workers = 0
        [model]
        name = "hf:{bert}"
    """)
    )
    proc = wb(tmp_path, "train", str(spec), "--json", timeout=300)
    expect(proc, 0)
    no_traceback(proc)
    result = one_json(proc)
    assert result["status"] == "done" and result["epochs_completed"] == 1, json.dumps(result)
    assert result["task"] == "classification" and result["parameters"]["trainable"] > 0
    assert "loading hf:" in proc.stderr and "without remote code" in proc.stderr
    assert Path(result["checkpoint"]).is_file()
