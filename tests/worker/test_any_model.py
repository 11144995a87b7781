"""Any model, any input, end to end through the real runner: a token-id Dataset with an nn.TransformerEncoder
classifier, the same Dataset with a Hugging Face BERT built from a BertConfig inside a user file, and a
segmentation U-Net whose decoder is a ConvTranspose2d. Each trains, then passes graph, W8A8 quantize with at
least 90 % of its parameters quantized, ONNX and ONNX QDQ export with parity, and a benchmark with an
onnxruntime INT8 row."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

pytestmark = pytest.mark.slow

TOKENS = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Tokens(Dataset):
    """Sequences of token ids; the label says whether token 7 appears more often than token 3."""

    vocab = ["<pad>"] + [f"w{i}" for i in range(1, 40)]

    def __init__(self, n=240, length=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(1, 40, (n, length), generator=g)
        self.y = ((self.x == 7).sum(1) > (self.x == 3).sum(1)).long()
        self.classes = ["no", "yes"]

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


class Encoder(nn.Module):
    def __init__(self, num_classes=2, vocab=40, dim=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, ids):
        return self.head(self.enc(self.emb(ids)).mean(1))


class Bert(nn.Module):
    """A BERT built from a config inside the user's file: no download."""

    def __init__(self, num_classes=2):
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=32, num_labels=num_classes)
        self.bert = BertForSequenceClassification(config)

    def forward(self, ids):
        return self.bert(input_ids=ids).logits
'''

CELLS = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Cells(Dataset):
    """Bright discs on a dark field, and their masks (0 background, 1 cell)."""

    classes = ["background", "cell"]

    def __init__(self, n=96, size=16, seed=0):
        g = torch.Generator().manual_seed(seed)
        yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
        self.images, self.masks = [], []
        for _ in range(n):
            cy, cx = torch.randint(4, size - 4, (2,), generator=g)
            r = int(torch.randint(2, 4, (1,), generator=g))
            mask = ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r).long()
            self.images.append((mask.float() + 0.2 * torch.randn(size, size, generator=g)).unsqueeze(0))
            self.masks.append(mask)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], self.masks[i]


class UNet(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.down = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1),
                                  nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.out = nn.Conv2d(8, num_classes, 1)

    def forward(self, x):
        return self.out(torch.relu(self.up(self.down(x))))
'''  # noqa: E501

PROJECTS = {
    "transformer": (TOKENS, "Tokens", "Encoder", {}),
    "bert": (TOKENS, "Tokens", "Bert", {}),
    "unet": (CELLS, "Cells", "UNet", {"task": "segmentation"}),
}


def run(task: str, spec: dict, workspace: Path) -> dict:
    result = run_task(get_task(task), spec, emit=lambda *args: None, workspace=workspace)
    assert result["status"] == "done", (task, result.get("error"))
    return result


@pytest.mark.parametrize("name", list(PROJECTS))
def test_a_project_goes_from_training_to_an_int8_benchmark(tmp_path, name):
    if name == "bert":
        pytest.importorskip("transformers")
    source, data, model, extra = PROJECTS[name]
    (tmp_path / "project.py").write_text(textwrap.dedent(source))
    workspace = tmp_path / "ws"
    project = tmp_path / "project.py"
    trained = run(
        "train.classifier",
        {
            "dataset": {"name": f"file:{project}:{data}", "num_workers": 0},
            "model": {"name": f"file:{project}:{model}", "num_classes": 2},
            "epochs": 2,
            "batch_size": 16,
            "lr": 0.003,
            **extra,
        },
        workspace,
    )
    source_run = {"source": {"run": trained["run_dir"]}}

    graph = run("graph.build", source_run, workspace)
    assert graph["nodes"] > 0 and graph["params_total"] > 0

    quantized = run(
        "quant.analyze", {**source_run, "calibration": {"samples": 64}, "eval_samples": 64}, workspace
    )
    assert quantized["coverage"]["parameters"] >= 0.90, quantized["coverage"]

    for fmt in ("onnx", "torchscript", "exported_program"):
        exported = run("export.model", {**source_run, "format": fmt, "parity_samples": 8}, workspace)
        assert exported["parity"]["passed"], (fmt, exported["parity"])
        if name != "unet":  # token ids stay int64 and keep forward()'s name
            assert exported["input_names"] == ["ids"] and exported["input_dtypes"] == {"ids": "int64"}, fmt

    qdq = run(
        "export.model",
        {"source": {"run": quantized["run_dir"]}, "format": "onnx_qdq", "parity_samples": 8},
        workspace,
    )
    assert qdq["parity"]["passed"], qdq["parity"].get("explanation")

    bench = run(
        "bench.latency",
        {
            "source": {"run": quantized["run_dir"]},
            "iters": 3,
            "warmup": 1,
            "min_time_s": 0,
            "batch_sizes": [1, 4],
            "backends": ["eager", "onnxruntime", "onnxruntime_int8"],
        },
        workspace,
    )
    rows = {(r["backend"], r["batch_size"]): r for r in bench["results"]}
    assert rows[("onnxruntime_int8", 4)]["status"] == "ok", rows[("onnxruntime_int8", 4)]["reason"]
