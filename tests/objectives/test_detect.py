"""detect_task's rules from one sample, check_target's messages and target_num_outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from workbench.errors import JobError
from workbench.worker.objectives import check_target, detect_task, target_num_outputs

IMAGE = torch.zeros(3, 64, 64)


@pytest.mark.parametrize(
    "target", [torch.tensor(3), 3, np.int64(3), np.int32(0), torch.tensor(2, dtype=torch.uint8)]
)
def test_integer_scalar_is_classification(target):
    assert detect_task(IMAGE, target) == ("classification", "the target is an integer scalar (a class index)")


@pytest.mark.parametrize(
    "target",
    [
        torch.tensor([0, 1, 1]),
        torch.tensor([True, False]),
        [0.0, 1.0, 0.0],
        np.array([1, 0, 0, 0], dtype=np.uint8),
    ],
)
def test_binary_vector_is_multilabel(target):
    task, reason = detect_task(IMAGE, target)
    assert task == "multilabel" and "0 or 1" in reason


def test_integer_map_of_input_size_is_segmentation():
    task, reason = detect_task(IMAGE, torch.zeros(64, 64, dtype=torch.int64))
    assert task == "segmentation"
    assert reason == "the target is an int64 map of 64×64, the input's spatial size"
    # The first tensor of a tuple or dict input gives the spatial size; a (1, H, W) map counts too.
    assert detect_task((IMAGE, torch.zeros(5)), np.zeros((1, 64, 64), dtype=np.uint8))[0] == "segmentation"
    assert detect_task({"image": IMAGE}, torch.zeros(64, 64, dtype=torch.int32))[0] == "segmentation"


@pytest.mark.parametrize(
    "target",
    [
        2.5,
        np.float64(0.3),
        torch.tensor(1.5),
        torch.tensor([0.2, 3.0]),
        np.zeros((64, 64), dtype=np.float32),
        [1.5, 2.0],
        torch.tensor(1.0),
    ],
)
def test_float_is_regression(target):
    task, reason = detect_task(IMAGE, target)
    assert task == "regression" and "float" in reason


@pytest.mark.parametrize(
    "target,words",
    [
        (torch.zeros(32, 32, dtype=torch.int64), ["int64 tensor of shape (32, 32)", "(64×64)"]),
        (torch.tensor([3, 7, 1]), ["int64 vector of 3 values", "other than 0 and 1"]),
        (torch.tensor([4]), ["int64 vector of 1 value", "target[0]"]),
        ("cat", ["str"]),
        (True, ["bool scalar"]),
        ([0], ["int64 vector of 1 value"]),
    ],
)
def test_anything_else_raises_naming_the_target(target, words):
    with pytest.raises(JobError) as info:
        detect_task(IMAGE, target)
    message = str(info.value)
    assert "set task=" in message.lower() or "Set task=" in message
    for word in words:
        assert word in message


def test_check_target_messages():
    check_target("classification", IMAGE, 3)
    check_target("regression", IMAGE, 0.5)
    check_target("multilabel", IMAGE, [0, 1])
    check_target("segmentation", IMAGE, torch.zeros(64, 64, dtype=torch.int64))
    check_target("custom", IMAGE, "anything")
    with pytest.raises(JobError) as info:
        check_target("regression", IMAGE, torch.tensor(4))
    assert str(info.value) == (
        "task=regression, but the target is an int64 scalar; it looks like classification "
        "(the target is an integer scalar (a class index)): set task=classification or "
        "task=auto"
    )
    with pytest.raises(
        JobError,
        match=r"task=classification, but the target is a float32 vector of 2 values; "
        r"it looks like regression",
    ):
        check_target("classification", IMAGE, torch.tensor([0.5, 2.0]))
    with pytest.raises(
        JobError,
        match=r"task=segmentation, but the target is an int64 tensor of shape "
        r"\(32, 32\); segmentation needs an integer class map",
    ):
        check_target("segmentation", IMAGE, torch.zeros(32, 32, dtype=torch.int64))
    with pytest.raises(
        JobError,
        match=r"task=multilabel, but the target is an int64 scalar; it looks like "
        r"classification",
    ):
        check_target("multilabel", IMAGE, 2)
    with pytest.raises(JobError, match="task=auto cannot tell"):
        check_target("auto", IMAGE, "cat")


def test_target_num_outputs():
    assert target_num_outputs("multilabel", [0, 1, 1, 0]) == 4
    assert target_num_outputs("regression", 2.0) == 1
    assert target_num_outputs("regression", np.array([1.0, 2.0, 3.0])) == 3
    assert target_num_outputs("classification", 3) == 0
    assert target_num_outputs("segmentation", torch.zeros(8, 8, dtype=torch.int64)) == 0
