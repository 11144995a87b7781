"""QDQ parity on real torchvision models at a small size (the heavy tier: `pytest -m heavy`): models that
failed parity before, each at its random initialisation after torch.manual_seed(0), quantized at W8A8 and
exported with onnx_qdq; onnxruntime, as deployed and as written, computes the simulation's codes quantizer by
quantizer, and its accuracy equals the simulated one. benchmarks/qdq_zoo.py runs the whole sweep."""

from __future__ import annotations

import pytest
import torch
from export_helpers import export_qdq_matching, run

pytestmark = pytest.mark.heavy

# A residual network, one with a bias that overflowed int32 in onnxruntime, a float output after an average of
# codes, a depthwise one, and one whose Linear layers follow LayerNorms (onnxruntime quantized their float
# inputs itself, MatMulNBits, until they got quantizers of their own).
MODELS = ("resnet18", "googlenet", "squeezenet1_0", "mobilenet_v2", "convnext_tiny")


@pytest.mark.parametrize("arch", MODELS)
def test_a_torchvision_model_keeps_qdq_parity_as_deployed(arch, tmp_path):
    import torchvision

    torch.manual_seed(0)
    checkpoint = tmp_path / f"{arch}.pt"
    torch.save(torchvision.models.get_model(arch, num_classes=10).state_dict(), checkpoint)
    data = {"name": "fake", "num_classes": 10, "size": 64, "test_fraction": 0.25, "image_size": [48, 48]}
    quant = run(
        "quant.analyze",
        {
            "model": {"name": f"torchvision:{arch}", "checkpoint": str(checkpoint)},
            "dataset": data,
            "calibration": {"samples": 16},
            "eval_samples": 16,
        },
        tmp_path / "ws",
    )
    assert quant["status"] == "done", quant.get("error")
    export_qdq_matching(tmp_path / "ws", quant["run_dir"])
