"""What the evaluation views draw, as the test evaluators store it in evaluation.json: segmentation's
thumbnails of the worst images (image, true and predicted mask, small and bounded), regression's scatter
indices and output count, multilabel's worst samples with their error counts and probabilities. Tiny real
tensors, in process."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from workbench.worker.objectives import IGNORE_INDEX, build_objective, segmentation, thumbnails


def decode(text: str, *shape: int) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8).reshape(shape)


def one_hot_scores(pred: torch.Tensor, classes: int) -> torch.Tensor:
    return F.one_hot(pred, classes).permute(0, 3, 1, 2).float() * 5


def feed(evaluator, inputs, scores, target, batch: int, offset: int = 0) -> None:
    for start in range(0, int(target.shape[0]), batch):
        idx = torch.arange(start, min(start + batch, int(target.shape[0])))
        evaluator.add_inputs(inputs[idx] if isinstance(inputs, torch.Tensor) else inputs)
        evaluator.add(idx + offset, scores[idx], target[idx])


def test_segmentation_worst_images_carry_thumbnails_of_image_and_both_masks():
    n, side = 12, 10
    target = torch.zeros(n, side, side, dtype=torch.int64)
    target[:, 5:] = 1
    target[:, 0, 0] = IGNORE_INDEX
    pred = target.clamp(max=1).clone()
    pred[4, :5] = 1  # image 4: the top half wrong
    pred[9] = 0  # image 9: every pixel background
    image = torch.randn(n, 3, side, side)
    image[:, 0, 5:] += 4  # the class-1 half is bright in red
    evaluator = build_objective("segmentation", num_outputs=2).test_evaluator(
        "test", ["background", "stripe"]
    )
    feed(evaluator, image, one_hot_scores(pred, 2), target, batch=5, offset=200)
    result = evaluator.result()
    json.dumps(result, allow_nan=False)
    worst = result["worst"]
    assert [w["index"] for w in worst[:2]] == [209, 204]
    with_thumbs = [w for w in worst if "thumbnail" in w]
    assert len(with_thumbs) == segmentation.THUMBNAIL_COUNT == 8
    assert with_thumbs == worst[:8]  # the worst eight, in order
    thumb = worst[0]["thumbnail"]
    assert (thumb["height"], thumb["width"], thumb["channels"]) == (side, side, 3)
    true = decode(thumb["true_mask"], side, side)
    assert true[0, 0] == IGNORE_INDEX and (true[5:] == 1).all() and (true[1:5] == 0).all()
    assert (decode(thumb["predicted_mask"], side, side) == pred[9].numpy()).all()
    assert (decode(worst[1]["thumbnail"]["predicted_mask"], side, side) == pred[4].numpy()).all()
    picture = decode(thumb["image"], side, side, 3)
    # Stretched over 0..255 per image: the full range is used, and the bright red half stays the bright half.
    assert picture.min() == 0 and picture.max() == 255
    assert picture[5:, :, 0].mean() > picture[:5, :, 0].mean() + 60
    original = image[9, :3]
    expected = (
        ((original - original.min()) / (original.max() - original.min()) * 255).round().permute(1, 2, 0)
    )
    assert np.abs(picture.astype(int) - expected.numpy().astype(int)).max() <= 1


def test_segmentation_thumbnails_are_bounded_for_large_images_and_skip_non_image_inputs():
    n, h, w = 3, 200, 100
    target = torch.zeros(n, h, w, dtype=torch.int64)
    target[:, :, 50:] = 2
    scores = one_hot_scores(target, 3)
    evaluator = build_objective("segmentation", num_outputs=3).test_evaluator("test", [])
    feed(evaluator, torch.rand(n, 1, h, w), scores, target, batch=2)
    thumb = evaluator.result()["worst"][0]["thumbnail"]
    assert (thumb["height"], thumb["width"], thumb["channels"]) == (thumbnails.SIDE, thumbnails.SIDE // 2, 1)
    true = decode(thumb["true_mask"], 64, 32)
    assert (true[:, :16] == 0).all() and (true[:, 16:] == 2).all()  # nearest pixel: classes never blend
    assert len(base64.b64decode(thumb["image"])) == 64 * 32
    # A tuple of inputs (a model with two inputs) has no picture to show: masks only.
    evaluator = build_objective("segmentation", num_outputs=3).test_evaluator("test", [])
    feed(evaluator, (torch.rand(n, 3, h, w), torch.rand(n, 4)), scores, target, batch=3)
    thumb = evaluator.result()["worst"][0]["thumbnail"]
    assert thumb["channels"] == 0 and "image" not in thumb and "predicted_mask" in thumb
    # Inputs of another size than the masks are not the image the masks lie over.
    evaluator = build_objective("segmentation", num_outputs=3).test_evaluator("test", [])
    feed(evaluator, torch.rand(n, 3, h // 2, w // 2), scores, target, batch=3)
    assert evaluator.result()["worst"][0]["thumbnail"]["channels"] == 0


def test_segmentation_evaluation_json_stays_small():
    n, side = 40, 64
    target = torch.randint(0, 4, (n, side, side))
    evaluator = build_objective("segmentation", num_outputs=4).test_evaluator("test", [])
    feed(evaluator, torch.randn(n, 3, side, side), torch.randn(n, 4, side, side), target, batch=16)
    result = evaluator.result()
    thumbs = [json.dumps(w["thumbnail"]) for w in result["worst"] if "thumbnail" in w]
    assert len(thumbs) == 8
    # 64 x 64 pixels of 3 image channels and 2 masks, as base64 (4 characters per 3 bytes), and little else.
    assert all(len(t) < 64 * 64 * 5 * 4 // 3 + 200 for t in thumbs)


def test_regression_scatter_knows_its_samples_and_output_count():
    target = torch.linspace(-1, 1, 9)
    pred = target * 2
    evaluator = build_objective("regression").test_evaluator("test", [])
    feed(evaluator, None, pred[:, None], target, batch=4, offset=10)
    result = evaluator.result()
    assert result["outputs"] == 1
    assert result["scatter_index"] == list(range(10, 19))
    assert result["scatter"][3] == pytest.approx([float(target[3]), float(pred[3])])
    two = build_objective("regression").test_evaluator("test", [])
    feed(two, None, torch.zeros(5, 2), torch.ones(5, 2), batch=5)
    assert two.result()["outputs"] == 2


def test_multilabel_worst_samples_carry_errors_and_probabilities():
    truth = torch.tensor([[1, 0, 1], [0, 1, 0], [1, 1, 1], [0, 0, 0]])
    logits = torch.tensor(
        [
            [3.0, -3.0, 3.0],  # all right
            [2.0, -2.0, 0.0],  # three labels wrong
            [3.0, -1.0, 3.0],  # one wrong
            [-3.0, -3.0, -3.0],
        ]
    )  # all right
    evaluator = build_objective("multilabel", num_outputs=3).test_evaluator(
        "test", ["round", "tall", "closed"]
    )
    feed(evaluator, None, logits, truth, batch=3)
    worst = evaluator.result()["worst"]
    assert [(w["index"], w["errors"]) for w in worst] == [(1, 3), (2, 1)]
    assert worst[0]["target"] == ["tall"] and worst[0]["predicted"] == ["round", "closed"]
    assert worst[0]["probabilities"] == pytest.approx(torch.sigmoid(logits[1]).tolist(), abs=1e-4)
