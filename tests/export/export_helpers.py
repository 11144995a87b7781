"""Helpers for the export tests: run a task through the real runner, keep its logs, and user model files whose
export goes wrong on purpose."""

from __future__ import annotations

import textwrap
from pathlib import Path

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

CONTRACT_KEYS = {"run_dir", "status", "artifact", "format", "size_bytes", "parity"}
PARITY_KEYS = {
    "max_abs_diff",
    "max_rel_diff",
    "tolerance",
    "passed",
    "first_divergent_layer",
    "batches",
    "samples",
}


def train_project(root: Path, source: str, dataset: str, *, batch_size: int) -> tuple[dict, Path]:
    """Write `source` as root/project.py and train its `dataset` class with its `net` for one epoch: (result,
    workspace)."""
    (root / "project.py").write_text(textwrap.dedent(source))
    workspace = root / "ws"
    result = run(
        "train.classifier",
        {
            "dataset": {"name": f"file:{root / 'project.py'}:{dataset}", "num_workers": 0},
            "model": {"name": f"file:{root / 'project.py'}:net"},
            "epochs": 1,
            "batch_size": batch_size,
        },
        workspace,
    )
    assert result["status"] == "done", result.get("error")
    return result, workspace


def run(task: str, spec: dict, workspace: Path, logs: list | None = None) -> dict:
    def emit(msg_type, content, buffers):
        if logs is not None and msg_type == "log":
            logs.append((content["level"], content["text"]))

    return run_task(get_task(task), spec, emit=emit, workspace=workspace)


def export(workspace: Path, spec: dict) -> tuple[dict, list[tuple[str, str]]]:
    logs: list[tuple[str, str]] = []
    return run("export.model", spec, workspace, logs), logs


def done(result: dict) -> dict:
    assert result["status"] == "done", (result.get("error"), result.get("traceback"))
    return result


def failed(result: dict) -> str:
    assert result["status"] == "failed", result
    assert result["error"]["type"] == "JobError", result
    assert "traceback" not in result, result["traceback"]
    return result["error"]["message"]


# Identity when run eagerly; x 1.5 while an exporter traces it: the export is wrong in exactly one module.
SNEAKY = """
import torch
from torch import nn


class Sneaky(nn.Module):
    def forward(self, x):
        if torch.onnx.is_in_onnx_export() or torch.compiler.is_exporting() or torch.jit.is_tracing():
            return x * 1.5
        return x


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.sneaky = Sneaky()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.conv2(self.sneaky(self.act1(self.conv1(x))))
        return self.head(x.mean((2, 3)))
"""

# A data-dependent branch: torch.export refuses it; the TorchScript-based ONNX exporter traces the branch it
# sees.
BRANCHY = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = x.flatten(1)
        if x.mean() > -100:
            return self.fc(x)
        return self.fc(-x)
"""

# The batch size baked into a reshape: fine eagerly, refused by torch.export with a dynamic batch, and traced
# as a constant by the TorchScript-based exporter.
BAKED = """
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(x.reshape(int(x.shape[0]), -1))
"""

# An operator no ONNX exporter knows, called from one module.
MYSTERY = """
import torch
from torch import nn


@torch.library.custom_op("wbexporttest::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class Odd(nn.Module):
    def forward(self, x):
        return torch.ops.wbexporttest.mystery(x)


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.odd = Odd()
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.fc(self.odd(x.flatten(1)))
"""


def user_model(folder: Path, name: str, source: str) -> dict:
    """A model.* spec part for the class Net in a file written to `folder`."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return {"name": f"file:{path}:Net", "input_shape": [1, 8, 8]}


def export_qdq_matching(workspace: Path, quant_run_dir: str) -> dict:
    """Export a quantize run as onnx_qdq and check that the file computes what the simulation does: parity
    passes, every quantizer of the file gives the simulation's codes up to rounding ties (as deployed and as
    written), and the accuracy in onnxruntime equals the simulated one. The export's result."""
    result, _ = export(
        workspace, {"source": {"run": Path(quant_run_dir).name}, "format": "onnx_qdq", "parity_samples": 14}
    )
    parity = done(result)["parity"]
    assert parity["passed"] is True, parity.get("explanation")
    for mode in ("deployed", "as_written"):
        quantizers = parity["steps"][mode]["quantizers"]
        assert quantizers["one_step_elsewhere"] == 0 and quantizers["two_or_more"] == 0, (mode, quantizers)
    assert result["accuracy"]["equal"] is True, result["accuracy"]
    return result
