"""`workbench train` (one real subprocess each) on a Lightning project that detects: a small torchvision
FasterRCNN in a LightningModule, a DataModule of (images, targets of boxes and labels) batches. task=detection
and task=auto end with the test mAP pycocotools computes again from the two COCO files of the run; a batch
that is not such a pair, or whose boxes or labels are the wrong shape, fails with one line that says what."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "detection"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
from cli_helpers import TRACEBACK, expect, one_json, wb  # noqa: E402
from coco_check import pycocotools_map  # noqa: E402
from training_helpers import metrics  # noqa: E402

pytest.importorskip("lightning")
pytest.importorskip("pycocotools")

PROJECT = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
import lightning as L
from torchvision.models.detection import FasterRCNN
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.ops import MultiScaleRoIAlign


class Boxes(Dataset):
    """64 x 64 images of dim noise with one or two filled rectangles: red is class 1, green class 2."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.samples = []
        for _ in range(n):
            image = torch.rand(3, 64, 64, generator=g) * 0.3
            boxes, labels = [], []
            for k in range(1 + int(torch.randint(0, 2, (1,), generator=g))):
                x, y = (int(v) for v in torch.randint(0, 40, (2,), generator=g))
                w, h = (int(v) for v in torch.randint(12, 24, (2,), generator=g))
                label = 1 + (k + int(torch.randint(0, 2, (1,), generator=g))) % 2
                image[label - 1, y : y + h, x : x + w] = 1.0
                boxes.append([x, y, min(x + w, 64), min(y + h, 64)])
                labels.append(label)
            target = {
                "boxes": torch.tensor(boxes, dtype=torch.float32),
                "labels": torch.tensor(labels, dtype=torch.int64),
            }
            self.samples.append((image, target))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]


def collate(batch):
    return tuple(zip(*batch))


class Rectangles(L.LightningDataModule):
    classes = ["red", "green"]

    def setup(self, stage=None):
        self.train_set, self.val_set, self.test_set = Boxes(16, 0), Boxes(5, 1), Boxes(6, 2)

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=4, shuffle=True, collate_fn=collate)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=3, collate_fn=collate)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=3, collate_fn=collate)


class NoTest(Rectangles):
    """No test_dataloader: the run is scored on the validation batches."""

    test_dataloader = L.LightningDataModule.test_dataloader


def _five(batch):
    images, targets = collate(batch)
    return images, [{**t, "boxes": torch.cat([t["boxes"], t["boxes"][:, :1]], 1)} for t in targets]


class FiveColumns(Rectangles):
    """Boxes of five numbers each."""

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=4, collate_fn=_five)


def _from_zero(batch):
    images, targets = collate(batch)
    return images, [{**t, "labels": t["labels"] - 1} for t in targets]


class FromZero(Rectangles):
    """Labels 0..K-1, where torchvision's detectors keep 0 for the background."""

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=4, collate_fn=_from_zero)


class Stacked(Rectangles):
    """The default collate: a batch is [images, targets as one dict of stacked tensors], not a list."""

    def train_dataloader(self):
        return DataLoader([(s[0], {"labels": s[1]["labels"][:1]}) for s in self.train_set], batch_size=4)


class Detector(L.LightningModule):
    def __init__(self):
        super().__init__()
        backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
        backbone.out_channels = 16
        self.model = FasterRCNN(
            backbone, num_classes=3, min_size=64, max_size=64,
            rpn_anchor_generator=AnchorGenerator(sizes=((16, 24),), aspect_ratios=((1.0,),)),
            box_roi_pool=MultiScaleRoIAlign(featmap_names=["0"], output_size=5, sampling_ratio=2),
        )

    def forward(self, images):
        return self.model(images)

    def training_step(self, batch, batch_idx):
        images, targets = batch
        losses = self.model(list(images), list(targets))
        loss = sum(losses.values())
        self.log("train_loss", loss, batch_size=len(images))
        for name, value in losses.items():
            self.log(name, value, batch_size=len(images))
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("detection")
    (folder / "project.py").write_text(textwrap.dedent(PROJECT))
    return folder


def _train(project: Path, data: str = "Rectangles", *settings: str):
    sets = [arg for setting in settings for arg in ("--set", setting)]
    return wb(
        project,
        "train",
        "--set",
        "model.name=lightning:project.py:Detector",
        "--set",
        f"dataset.name=lightning:project.py:{data}",
        *sets,
        "--json",
        workspace=project / f"ws-{data}-{len(list(project.glob('ws-*')))}",
        timeout=300,
    )


def test_task_detection_reports_the_test_map_pycocotools_computes_from_the_run_files(project):
    (project / "train.toml").write_text(
        'task = "detection"\nepochs = 2\nlog_every_steps = 1\n'
        '[model]\nname = "lightning:project.py:Detector"\n'
        '[dataset]\nname = "lightning:project.py:Rectangles"\n'
    )
    proc = wb(project, "train", "train.toml", "--json", workspace=project / "ws-toml", timeout=300)
    expect(proc, 0)
    assert TRACEBACK not in proc.stdout + proc.stderr
    result = one_json(proc)
    assert result["status"] == "done" and result["task"] == "detection", result
    folder = Path(result["run_dir"]) / "artifacts"
    assert (folder / "predictions_test.json").is_file() and (folder / "ground_truth_test.json").is_file()
    truth = json.loads((folder / "ground_truth_test.json").read_text())
    assert len(truth["images"]) == 6  # the test batches, not the validation ones
    assert [c["name"] for c in truth["categories"]] == ["red", "green"]
    expected = pycocotools_map(folder)
    test_metrics = result["final"]["test_metrics"]
    assert set(test_metrics) >= {"map", "map_50", "map_75", "mar_100"}
    assert test_metrics["map"] == pytest.approx(expected, abs=1e-3)
    assert result["metrics"]["test_map"] == pytest.approx(expected, abs=1e-3)
    assert result["monitor"]["name"] == "map" and result["monitor"]["test"] == pytest.approx(
        expected, abs=1e-3
    )
    evaluation = json.loads(Path(result["evaluation"]).read_text())
    assert evaluation["task"] == "detection" and evaluation["metrics"]["map"] == test_metrics["map"]
    assert [row["class"] for row in evaluation["per_class"]] == ["red", "green"]
    assert all(0.0 <= row["ap"] <= 1.0 for row in evaluation["per_class"])
    # the module's own logged losses stay its training curves
    assert {"train_loss", "loss_classifier", "loss_rpn_box_reg"} <= set(metrics(result["run_dir"]))
