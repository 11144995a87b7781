"""The "lightning" section of train_overhead.py (issue #20): one LightningModule trained by a bare Lightning
`Trainer` (no logger, progress bar, checkpointing or model summary) and by the workbench
(model.name=lightning:..., which adds its logger, callback, checkpoints and final weights). Both are timed by
the module itself, over the steps after WARMUP_STEPS, so the two rows measure the same thing. Goal: the
workbench within 1.05x (>= 0.95x samples/s)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PROJECT = """
import os
import time

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

WARMUP_STEPS = 20


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(32, 10))
        self.times, self.samples = [], []

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.times.append(time.perf_counter())
        self.samples.append(len(batch[1]))

    def on_train_end(self):
        # Samples/s from the end of the warm-up to the last step, everything between them included (logging,
        # validation, checkpoints): what the Trainer's user waits for.
        start = WARMUP_STEPS - 1
        rate = sum(self.samples[start + 1:]) / (self.times[-1] - self.times[start])
        with open(os.environ["BENCH_RATE_FILE"], "w") as f:
            f.write(str(rate))


class Data(L.LightningDataModule):
    def __init__(self, size=2000, batch_size=64):
        super().__init__()
        self.size, self.batch_size = size, batch_size

    def setup(self, stage=None):
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(self.size, 3, 32, 32, generator=g), torch.randint(0, 10, (self.size,), generator=g)
        n = self.size // 10
        self.train_set, self.val_set = TensorDataset(x[n:], y[n:]), TensorDataset(x[:n], y[:n])

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.batch_size)
"""  # noqa: E501


def project_file(workspace: str) -> Path:
    path = Path(workspace) / "lightning_project.py"
    if not path.exists():
        path.write_text(PROJECT)
    return path


def _rate(run) -> float:
    with tempfile.NamedTemporaryFile(suffix=".rate", delete=False) as f:
        os.environ["BENCH_RATE_FILE"] = f.name
    try:
        run()
        return float(Path(os.environ["BENCH_RATE_FILE"]).read_text())
    finally:
        os.unlink(os.environ.pop("BENCH_RATE_FILE"))


def bare_trainer(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    import lightning as L

    from workbench.worker.models.user_code import import_user_file

    module = import_user_file(project_file(workspace))
    L.seed_everything(seed, verbose=False)
    trainer = L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=workspace,
    )
    return _rate(lambda: trainer.fit(module.Net(), datamodule=module.Data(batch_size=batch_size)))


def workbench_route(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    path = project_file(workspace)
    spec = {
        "model": {"name": f"lightning:{path}:Net"},
        "epochs": epochs,
        "seed": seed,
        "device": "cpu",
        "dataset": {"name": f"lightning:{path}:Data", "args": {"batch_size": batch_size}},
    }

    def run() -> None:
        result = run_task(get_task("train.classifier"), spec, emit=lambda *args: None, workspace=workspace)
        if result["status"] != "done":
            raise SystemExit(f"workbench run failed: {result.get('error')}")

    return _rate(run)


def lightning_rows() -> dict:
    return {"bare Lightning Trainer": bare_trainer, "workbench, lightning: model": workbench_route}
