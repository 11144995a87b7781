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
