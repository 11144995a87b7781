"""The "user" section of train_overhead.py (issue #20): a user's own Dataset whose __getitem__ costs about 2
ms of Python, loaded by 2 DataLoader worker processes, trained by a plain DataLoader loop and by the workbench
(dataset.name=file:...). Goal: the workbench within 1.1x of the plain loop (>= 0.91x its samples/s)."""

from __future__ import annotations

import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

PROJECT = """
import time
import torch
from torch import nn
from torch.utils.data import Dataset

GETITEM_S = 0.002  # the Python work of a real __getitem__ (decode, augment, look up): spun, not slept


class Costly(Dataset):
    def __init__(self, size=2000):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(size, 3, 32, 32, generator=g)
        self.labels = torch.randint(0, 10, (size,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        until = time.perf_counter() + GETITEM_S
        while time.perf_counter() < until:
            pass
        return self.images[i], int(self.labels[i])


def net(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(32, num_classes))
"""

WORKERS = 2
WARMUP_STEPS = 20


def project_file(workspace: str) -> Path:
    path = Path(workspace) / "user_project.py"
    if not path.exists():
        path.write_text(PROJECT)
    return path


def plain_loop(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    """What a user writes: their Dataset in a DataLoader with 2 workers, SGD, no reads back but the loss at
    the end."""
    from workbench.worker.models.user_code import import_user_file

    module = import_user_file(project_file(workspace))
    torch.manual_seed(seed)
    dataset, model = module.Costly(), module.net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=WORKERS,
        persistent_workers=True,
        generator=torch.Generator().manual_seed(seed),
    )
    steps = samples = 0
    started = None
    for _ in range(epochs):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == WARMUP_STEPS:
                started = time.perf_counter()
            elif steps > WARMUP_STEPS:
                samples += len(y)
    if started is None:  # the untimed warm-up run of one short epoch never got past the warm-up steps
        return 0.0
    return samples / (time.perf_counter() - started)


def workbench_row(data, model_name, *, epochs, batch_size, seed, device, workspace) -> float:
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    path = project_file(workspace)
    spec = {
        "dataset": {
            "name": f"file:{path}:Costly",
            "num_workers": WORKERS,
            "val_fraction": 0.0,
            "test_fraction": 0.0,
        },
        "model": {"name": f"file:{path}:net"},
        "epochs": epochs,
        "batch_size": batch_size,
        "seed": seed,
        "device": str(device),
        "optimizer": "sgd",
        "lr": 0.01,
        "momentum": 0.9,
        "log_every_steps": WARMUP_STEPS,
        "channels_last": False,
    }
    result = run_task(get_task("train.classifier"), spec, emit=lambda *args: None, workspace=workspace)
    if result["status"] != "done":
        raise SystemExit(f"workbench run failed: {result.get('error')}")
    return result["throughput"]["train_samples_per_s"]


def user_rows() -> dict:
    return {
        "plain DataLoader loop, 2 workers": plain_loop,
        "workbench, file: dataset, num_workers=2": workbench_row,
    }
