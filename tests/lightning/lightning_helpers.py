"""A small LightningModule project written by the tests themselves (not the bundled example): a classifier on
8 random features with a DataModule, and variants that are broken on purpose."""

from __future__ import annotations

import textwrap
from pathlib import Path

PROJECT = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint


class Classifier(L.LightningModule):
    def __init__(self, lr=0.1, hidden=16):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        out = self(x)
        self.log("val_loss", nn.functional.cross_entropy(out, y))
        self.log("val_acc", (out.argmax(1) == y).float().mean())

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_acc", (self(x).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    def configure_callbacks(self):
        return [ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=0)]


class Plain(Classifier):
    """No ModelCheckpoint of its own: the monitor is the first val_* metric it logs."""

    def configure_callbacks(self):
        return []


class NoStep(L.LightningModule):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NoOptimizer(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return None


class NaNLoss(Plain):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) * float("nan")


class NoneStep(Plain):
    def training_step(self, batch, batch_idx):
        return None


class Features(L.LightningDataModule):
    def __init__(self, size=192, batch_size=32):
        super().__init__()
        self.size, self.batch_size = size, batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(self.size, 8, generator=g)
        y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
        n = self.size // 4
        self.train_set = TensorDataset(x[2 * n:], y[2 * n:])
        self.val_set, self.test_set = TensorDataset(x[:n], y[:n]), TensorDataset(x[n:2 * n], y[n:2 * n])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=64)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=64)
'''


# A LightningModule that detects (a small torchvision FasterRCNN) and its DataModule of (images, targets of
# boxes and labels) batches, with variants that are broken on purpose.
DETECTION_PROJECT = textwrap.dedent('''
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


class Classifies(Detector):
    """Returns logits in eval mode: not a detector's answer."""

    def forward(self, images):
        return torch.zeros(len(images), 3)
''')


def write_project(folder: Path) -> Path:
    path = Path(folder) / "project.py"
    path.write_text(textwrap.dedent(PROJECT))
    return path


def lightning_spec(path: Path, module: str = "Classifier", data: str | None = "Features", **changes) -> dict:
    spec = {"model": {"name": f"lightning:{path}:{module}"}, "epochs": 2, "log_every_steps": 1}
    if data is not None:
        spec["dataset"] = {"name": f"lightning:{path}:{data}"}
    spec.update(changes)
    return spec
