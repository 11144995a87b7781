"""A layer that no quantizer feeds (after a LayerNorm, a mean over tokens) gets a quantizer at its input:
integer kernels take 8-bit inputs, and left float, onnxruntime quantizes a MatMul's input itself at run time
(MatMulNBits), so the deployed file stops computing what was simulated. With it, every quantizer of the file
gives the simulation's codes as deployed."""

from __future__ import annotations

import textwrap

import torch
from export_helpers import export_qdq_matching, run

MIXER = '''
import torch
from torch import nn


class Mixer(nn.Module):
    """A conv stem, then the tokens through LayerNorm -> Linear -> GELU -> Linear with a residual, as a ViT's MLP."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, stride=4)
        self.norm = nn.LayerNorm(16)
        self.fc1 = nn.Linear(16, 32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 16)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x):
        t = self.stem(x).flatten(2).transpose(1, 2)
        t = t + self.fc2(self.act(self.fc1(self.norm(t))))
        return self.head(t.mean(1))
'''  # noqa: E501


def test_layers_fed_by_no_quantizer_get_one_and_the_file_matches_as_deployed(tmp_path):
    (tmp_path / "mixer.py").write_text(textwrap.dedent(MIXER))
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        from mixer import Mixer
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(0)
    checkpoint = tmp_path / "mixer.pt"
    torch.save(Mixer().state_dict(), checkpoint)
    data = {"name": "fake", "num_classes": 10, "size": 64, "test_fraction": 0.25, "image_size": [32, 32]}
    quant = run(
        "quant.analyze",
        {
            "model": {"name": f"file:{tmp_path / 'mixer.py'}:Mixer", "checkpoint": str(checkpoint)},
            "dataset": data,
            "calibration": {"samples": 32},
            "eval_samples": 16,
        },
        tmp_path / "ws",
    )
    assert quant["status"] == "done", quant.get("error")
    kinds = {e["name"]: e["kind"] for e in quant["layers"] if e["tensor"] == "activation"}
    # The LayerNorm's output (fc1's input) and the mean over tokens (the head's input) are quantized; fc2's
    # input is fc1's quantized output already.
    assert kinds["norm"] == "requant" and kinds["head.input"] == "requant", kinds
    assert "fc2.input" not in kinds
    export_qdq_matching(tmp_path / "ws", quant["run_dir"])
