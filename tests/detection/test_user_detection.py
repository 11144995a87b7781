"""A user's own `file:` Dataset of (image, torchvision target) samples trains as a detection set: task=auto
picks detection, its `classes` name the labels, and the test mAP is pycocotools' on the saved files."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

pytestmark = pytest.mark.slow

DATA = """
import torch
from torch.utils.data import Dataset


class Boxes(Dataset):
    classes = ["bright square"]

    def __len__(self):
        return 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = (torch.rand(3, 96, 96, generator=g) * 70).to(torch.uint8)  # uint8: divided by 255
        x, y = (int(v) for v in torch.randint(0, 60, (2,), generator=g))
        image[:, y : y + 30, x : x + 30] = 255
        box = torch.tensor([[x, y, x + 30, y + 30]], dtype=torch.float32)
        return image, {"boxes": box, "labels": torch.tensor([1])}
"""


def test_a_users_detection_dataset_trains_and_reports_map(tmp_path):
    (tmp_path / "data.py").write_text(textwrap.dedent(DATA))
    spec = {
        "epochs": 1,
        "batch_size": 4,
        "optimizer": "sgd",
        "lr": 0.01,
        "momentum": 0.9,
        "dataset": {"name": f"file:{tmp_path / 'data.py'}:Boxes", "test_fraction": 0.2, "num_workers": 0},
        "model": {
            "name": "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn",
            "args": {"min_size": 96, "max_size": 96},
        },
    }
    result = run_task(get_task("train.model"), spec, emit=lambda *a: None, workspace=tmp_path / "ws")
    assert result["status"] == "done", result.get("error")
    assert result["task"] == "detection" and result["monitor"]["name"] == "map"
    run = Path(result["run_dir"])
    truth = json.loads((run / "artifacts" / "ground_truth_test.json").read_text())
    assert truth["categories"] == [{"id": 1, "name": "bright square"}] and len(truth["images"]) == 4
    assert "num_classes = 2" in (run / "spec.toml").read_text()
    evaluation = json.loads((run / "artifacts" / "evaluation.json").read_text())
    assert evaluation["images"][0]["file"] == "" and evaluation["images"][0]["width"] == 96
