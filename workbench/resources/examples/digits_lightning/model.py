"""A LightningModule and a LightningDataModule on scikit-learn's bundled digits (1,797 8x8 images, 10 classes,
offline): the kind of project you would bring already written for Lightning. The workbench trains it with
Lightning's own Trainer; nothing here knows about the workbench."""

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class DigitsClassifier(L.LightningModule):
    """A small CNN; it logs train_loss, val_loss and val_acc, and its ModelCheckpoint names the monitor."""

    def __init__(self, lr: float = 0.003):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(32 * 2 * 2, 10),
        )
        self.example_input_array = torch.zeros(1, 1, 8, 8)

    def forward(self, x):
        return self.net(x)

    def _step(self, batch):
        x, y = batch
        logits = self(x)
        return nn.functional.cross_entropy(logits, y), (logits.argmax(1) == y).float().mean()

    def training_step(self, batch, batch_idx):
        loss, acc = self._step(batch)
        self.log("train_loss", loss)
        self.log("train_acc", acc)
        return loss

    def validation_step(self, batch, batch_idx):
        loss, acc = self._step(batch)
        self.log("val_loss", loss)
        self.log("val_acc", acc)

    def test_step(self, batch, batch_idx):
        loss, acc = self._step(batch)
        self.log("test_loss", loss)
        self.log("test_acc", acc)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    def configure_callbacks(self):
        return [ModelCheckpoint(monitor="val_acc", mode="max", save_top_k=0)]


class DigitsData(L.LightningDataModule):
    """The digits scaled to [0, 1] as 1x8x8 images, split 70/15/15 with a fixed seed."""

    def __init__(self, batch_size: int = 64, seed: int = 0):
        super().__init__()
        self.batch_size, self.seed = batch_size, seed

    def setup(self, stage=None):
        x, y = load_digits(return_X_y=True)
        images = torch.tensor(x, dtype=torch.float32).view(-1, 1, 8, 8) / 16.0
        data = TensorDataset(images, torch.tensor(y))
        self.train_set, self.val_set, self.test_set = random_split(
            data, [0.7, 0.15, 0.15], generator=torch.Generator().manual_seed(self.seed)
        )

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)

    def test_dataloader(self):
        return DataLoader(self.test_set, batch_size=256)
