"""Example inputs keep what the data gives: dtype, shape, structure and names; random ones are drawn like
them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from workbench.errors import JobError, SpecError
from workbench.specs import ExportSpec, ModelSpec
from workbench.worker import inputs
from workbench.worker.models.build import check_forward


class ByName(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(20, 4)

    def forward(self, ids, attention_mask):
        return (self.emb(ids) * attention_mask.unsqueeze(-1)).sum(1)


def test_token_ids_stay_int64_and_take_forwards_names():
    ids = torch.tensor([[3, 5, 9], [4, 4, 12]])
    example = inputs.named_for(inputs.from_value((ids, torch.ones(2, 3))), ByName())
    assert example.names == ["ids", "attention_mask"]
    assert example.dtypes() == {"ids": "int64", "attention_mask": "float32"}
    assert example.shapes() == {"ids": [3], "attention_mask": [3]}
    assert not example.single
    assert example.ranges[0] == (3, 12)


def test_random_inputs_keep_dtypes_and_draw_ids_within_the_observed_range():
    ids = torch.tensor([[3, 5, 9], [4, 4, 12]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    example = inputs.from_value({"ids": ids, "mask": mask, "scale": torch.ones(2, 1)})
    drawn = example.random(50, torch.Generator().manual_seed(1))
    got = drawn.value
    assert set(got) == {"ids", "mask", "scale"}
    assert got["ids"].dtype == torch.int64 and got["ids"].shape == (50, 3)
    assert int(got["ids"].min()) >= 3 and int(got["ids"].max()) <= 12
    assert got["mask"].dtype == torch.bool
    assert got["scale"].dtype == torch.float32
    assert not drawn.real


def test_scaling_and_shifting_touch_floating_inputs_only():
    example = inputs.from_value((torch.tensor([[1, 2]]), torch.tensor([[0.5]])))
    changed = example.floats_changed(lambda t: t * 5 + 3)
    assert torch.equal(changed.tensors[0], torch.tensor([[1, 2]]))
    assert torch.allclose(changed.tensors[1], torch.tensor([[5.5]]))


def test_a_batch_repeats_the_real_samples():
    example = inputs.from_value(torch.tensor([[1, 2], [3, 4]]))
    assert example.batch(5).tensors[0][:, 0].tolist() == [1, 3, 1, 3, 1]
    assert example.batch(5).real


def test_an_input_spec_draws_typed_inputs():
    example = inputs.from_input_spec(
        {
            "ids": {"shape": [1, 48], "dtype": "int64", "low": 0, "high": 200},
            "mask": {"shape": [1, 48], "dtype": "bool"},
        },
        batch=3,
    )
    assert example.kind == "dict" and example.names == ["ids", "mask"]
    assert example.tensors[0].shape == (3, 48) and example.tensors[0].dtype == torch.int64
    assert 0 <= int(example.tensors[0].min()) and int(example.tensors[0].max()) <= 200
    assert example.tensors[1].dtype == torch.bool


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"shape": [1, 48], "dtype": "long"}, "model.input_spec.ids.dtype: 'long' is not allowed"),
        ({"shape": [0, 48]}, "model.input_spec.ids.shape"),
        ({"shape": [1, 4], "low": 9, "high": 2}, "low 9 is above high 2"),
        ({"shape": [1, 4], "colour": "red"}, "unknown key 'colour'"),
    ],
)
def test_a_bad_input_spec_names_the_field(entry, said):
    with pytest.raises(SpecError, match=said.replace("[", r"\[").replace("(", r"\(")):
        ExportSpec.from_dict({"model": {"input_spec": {"ids": entry}}})


def test_an_input_spec_round_trips():
    spec = ModelSpec.from_dict(
        {"input_spec": {"ids": {"shape": [1, 48], "dtype": "int64", "low": 0, "high": 200}}}
    )
    assert ModelSpec.from_dict(spec.to_dict()) == spec


def test_a_float_input_for_an_embedding_names_the_dtype_it_needed():
    model = nn.Sequential(nn.Embedding(20, 4), nn.Flatten(), nn.Linear(32, 2))
    with pytest.raises(JobError, match="expected integer inputs .*but got float32"):
        check_forward(model, "tokens", (8,), 2)
    check_forward(model, "tokens", (8,), 2, example=torch.zeros(8, dtype=torch.int64))  # ids pass
