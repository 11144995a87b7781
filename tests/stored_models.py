"""Models and runs the tests share: a model file torch.export cannot capture, a model with a dead ReLU layer,
and a finished training run of the digits cnn as the store keeps one, made without training."""

from __future__ import annotations

import textwrap
from pathlib import Path

# fc2's bias pushes every unit below zero: its ReLU passes nothing, a dead layer from the first step, and
# nothing flows back past it (the layer statistics tests, #21).
DEAD_NET = textwrap.dedent("""
    import torch
    from torch import nn

    class DeadNet(nn.Module):
        # fc2's bias pushes every unit below zero: its ReLU passes nothing, a dead layer from the first step.
        def __init__(self, num_classes=10):
            super().__init__()
            self.fc1 = nn.Linear(64, 32)
            self.fc2 = nn.Linear(32, 32)
            self.fc3 = nn.Linear(32, num_classes)
            with torch.no_grad():
                self.fc2.bias.fill_(-1000.0)

        def forward(self, x):
            x = torch.relu(self.fc1(x.flatten(1)))
            x = torch.relu(self.fc2(x))
            return self.fc3(x)
""")

# Which layer runs depends on the data: neither torch.export mode can capture it; eager and tracing still run
# it.
BRANCHY = """
import torch
from torch import nn


class Branchy(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.a = nn.Linear(4 * 8 * 8, num_classes)
        self.b = nn.Linear(4 * 8 * 8, num_classes)

    def forward(self, x):
        h = self.conv(x).flatten(1)
        if h.sum() > 0:
            return self.a(h)
        return self.b(h)
"""


def stored_training_run(workspace: Path, seed: int = 7) -> str:
    """The id of a finished training run of the digits cnn as the store keeps one (its spec and a last.pt of
    seeded weights), without training: graph, quantize and bench read nothing else of it."""
    import torch

    from workbench.runs import RunStore
    from workbench.specs import TrainSpec
    from workbench.worker.checkpoints import save_state_dict
    from workbench.worker.models import build_model

    spec = TrainSpec.from_dict({"dataset": {"name": "digits"}, "model": {"name": "cnn"}, "epochs": 1})
    run = RunStore(workspace).create_run("train", spec.to_dict(), task="train.classifier")
    torch.manual_seed(seed)
    save_state_dict(
        build_model(spec.model, input_shape=(1, 8, 8)).state_dict(), run.checkpoints_dir / "last.pt"
    )
    run.set_status("done")
    run.close()
    return run.id
