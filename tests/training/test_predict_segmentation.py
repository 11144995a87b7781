"""Try it (`predict.model`) on segmentation runs through the real runner: the shapes example's U-Net, trained
briefly, gives a sample's predicted mask (H×W uint8 class ids, the argmax of its scores), each class's pixel
share, the true mask and that image's pixel accuracy and IoU; the command line gets the masks as JSON rows; a
W8A8 quantize run of a small segmenter gives its FP32 and quantized masks side by side."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from training_helpers import Recorder, done, train

import workbench
from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

EXAMPLE = Path(workbench.__file__).parent / "resources" / "examples" / "shapes_segmentation"


def predict(workspace, **spec) -> dict:
    return run_task(get_task("predict.model"), spec, emit=Recorder(), workspace=workspace)


@pytest.fixture(scope="module")
def unet(tmp_path_factory):
    """(workspace, run id) of the shapes example's U-Net after one short epoch on 120 images."""
    workspace = tmp_path_factory.mktemp("segment")
    spec = {
        "task": "segmentation",
        "epochs": 1,
        "batch_size": 16,
        "lr": 0.003,
        "dataset": {
            "name": f"file:{EXAMPLE / 'data.py'}:Shapes",
            "args": {"size": 120},
            "num_workers": 0,
            "val_fraction": 0.1,
            "test_fraction": 0.1,
        },
        "model": {"name": f"file:{EXAMPLE / 'model.py'}:UNet", "num_classes": 3},
    }
    return workspace, Path(done(train(workspace, spec))["run_dir"]).name


def test_a_unet_sample_gives_its_mask_shares_true_mask_and_scores(unet):
    workspace, run_id = unet
    result = done(
        predict(workspace, source={"run": run_id}, sample={"split": "test", "index": 0}, preview=True)
    )
    assert result["task"] == "segmentation" and result["classes"] == ["background", "square", "disc"]
    mask = result["mask"]
    assert isinstance(mask, np.ndarray) and mask.dtype == np.uint8 and mask.shape == (32, 32)
    assert set(np.unique(mask).tolist()) <= {0, 1, 2}
    assert (result["masks"]["fp32"] == mask).all()
    shares = result["predictions"]
    assert [row["class"] for row in shares] == [0, 1, 2] and [row["label"] for row in shares][
        0
    ] == "background"
    assert abs(sum(row["share"] for row in shares) - 1) < 1e-9
    assert [row["pixels"] for row in shares] == np.bincount(mask.reshape(-1), minlength=3).tolist()
    # The image as the model saw it, and the sample's own true mask with this image's scores against it.
    assert result["preview"].dtype == np.uint8 and result["preview"].shape == (32, 32, 3)
    true = result["true_mask"]
    assert true.shape == (32, 32) and set(np.unique(true).tolist()) <= {0, 1, 2}
    scores = result["scores"]["fp32"]
    assert scores["pixel_accuracy"] == pytest.approx(float((mask == true).mean()))
    assert len(scores["iou"]) == 3 and 0 <= scores["miou"] <= 1
    background = scores["iou"][0]["iou"]
    inter, union = ((mask == 0) & (true == 0)).sum(), ((mask == 0) | (true == 0)).sum()
    assert background == pytest.approx(inter / union)


def test_the_mask_is_the_argmax_of_the_models_scores():
    from workbench.worker.predict_masks import segmentation_answer

    scores = torch.zeros(1, 3, 2, 4)
    scores[0, 1, 0, :2] = 5  # class 1 top left, class 2 bottom right, class 0 elsewhere
    scores[0, 2, 1, 2:] = 5
    truth = np.array([[1, 1, 0, 0], [0, 0, 2, 255]], dtype=np.uint8)  # 255: ignored
    answer = segmentation_answer(scores, ["bg", "a", "b"], truth)
    assert answer["mask"].tolist() == [[1, 1, 0, 0], [0, 0, 2, 2]]
    assert [row["share"] for row in answer["shares"]] == [0.5, 0.25, 0.25]
    assert answer["scores"]["pixel_accuracy"] == 1.0 and answer["scores"]["miou"] == 1.0


def test_the_command_line_gets_the_masks_as_json_rows(unet):
    from cli_helpers import one_json, wb

    workspace, run_id = unet
    result = one_json(
        wb(
            workspace,
            "predict",
            "--set",
            f"source.run={run_id}",
            "--set",
            "sample.split=test",
            "--set",
            "sample.index=1",
            "--json",
            workspace=workspace,
        )
    )
    assert result["status"] == "done" and result["task"] == "segmentation"
    mask = np.array(result["mask"])
    assert mask.shape == (32, 32) and mask.max() <= 2 and np.array(result["true_mask"]).shape == (32, 32)
    assert json.dumps(result["scores"])  # plain numbers: no arrays in the JSON


def test_a_quantize_run_gives_fp32_and_quantized_masks(tmp_path):
    spec = {
        "task": "segmentation",
        "epochs": 1,
        "batch_size": 16,
        "lr": 0.003,
        "dataset": {
            "name": f"file:{EXAMPLE / 'data.py'}:Shapes",
            "args": {"size": 80, "side": 16},
            "num_workers": 0,
        },
        "model": {"name": f"file:{EXAMPLE / 'model.py'}:UNet", "num_classes": 3},
    }
    run_id = Path(done(train(tmp_path, spec))["run_dir"]).name
    quant = run_task(
        get_task("quant.analyze"),
        {"source": {"run": run_id}, "calibration": {"samples": 16}},
        emit=Recorder(),
        workspace=tmp_path,
    )
    assert quant["status"] == "done", quant.get("error")
    result = done(
        predict(
            tmp_path,
            source={"run": Path(quant["run_dir"]).name},
            sample={"split": "val", "index": 0},
            preview=True,
        )
    )
    assert result["run_kind"] == "quantize" and set(result["masks"]) == {"fp32", "quantized"}
    fp32, quantized = result["masks"]["fp32"], result["masks"]["quantized"]
    assert fp32.shape == quantized.shape == (16, 16) and (result["mask"] == quantized).all()
    assert result["mask_agreement"] == pytest.approx(float((fp32 == quantized).mean()))
    assert set(result["scores"]) == {"fp32", "quantized"}
    assert (
        [row["class"] for row in result["fp32"]] == [row["class"] for row in result["quantized"]] == [0, 1, 2]
    )
