"""ONNX QDQ export of transposed convs (a DequantizeLinear on the weight along axis 1, ONNX ConvTranspose's
output-channel axis) and embedding tables (a DequantizeLinear along axis 0 before Gather, fed int64 token ids
with no QuantizeLinear on them): onnxruntime computes the simulation's codes quantizer by quantizer, as
deployed and as written, and the parity check passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "quant"))

from embedding_models import (  # noqa: E402
    Tokens,
    Transposed1d,
    Transposed3d,
    batches,
    images,
    quantize,
    token_ids,
    unet,
)

from workbench.specs import QuantSpec  # noqa: E402
from workbench.worker.export import formats, onnx_qdq, qdq_job  # noqa: E402

RANDOM = (1, 7)


def _has_vnni() -> bool:
    """Whether the CPU has VNNI int8 dot products. Without them onnxruntime's fused uint8 x int8 kernels
    (AVX2's VPMADDUBSW) saturate pairwise sums at int16, so as deployed they differ from the simulation on a
    plain Conv2d fed random images too (with any model, not only these): there only the file as written is
    held to parity."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


VNNI = _has_vnni()


class _Ctx:
    """What the parity check asks of a job's context."""

    def __init__(self):
        self.logs: list[tuple[str, str]] = []

    def check_stop(self) -> None:
        pass

    def log(self, text: str, level: str = "info") -> None:
        self.logs.append((level, text))


def _say(text: str, level: str = "info") -> None:
    pass


def export_and_check(sim, example: torch.Tensor, inputs: list[tuple[str, torch.Tensor]], path: Path) -> dict:
    """Write the simulation as ONNX QDQ and run the export job's parity check on it: (the nodes written,
    parity)."""
    import onnx

    module, layers = onnx_qdq.qdq_module(sim, QuantSpec(), _say)
    build = onnx_qdq.QdqBuild(None, sim, module, tuple(example.shape[1:]), layers)
    info = onnx_qdq.export_qdq(build, path, opset=18, dynamic_batch=True, say=_say, example=example)
    cpu = torch.device("cpu")
    deployed = formats.onnx_runner(formats.onnx_session(path, cpu))
    parity, by_module, _ = qdq_job._parity(build, path, cpu, deployed, inputs, list(RANDOM), 0, 0, _Ctx())
    return {
        "info": info,
        "layers": layers,
        "parity": parity,
        "by_module": by_module,
        "proto": onnx.load(str(path)),
    }


def _dequantize_feeding(proto, op_type: str) -> list:
    """The DequantizeLinear nodes whose output an `op_type` node takes as its weight (second input) or table
    (first input, for Gather)."""
    produced = {out: node for node in proto.graph.node for out in node.output}
    found = []
    for node in proto.graph.node:
        if node.op_type != op_type:
            continue
        source = produced.get(node.input[0] if op_type == "Gather" else node.input[1])
        if source is not None and source.op_type == "DequantizeLinear":
            found.append(source)
    return found


def _axis(node) -> int | None:
    return next((a.i for a in node.attribute if a.name == "axis"), None)


def _assert_parity(result: dict) -> None:
    parity = result["parity"]
    assert parity["as_written"]["within_tolerance"] is True, parity.get("explanation")
    for mode in ("deployed", "as_written") if VNNI else ("as_written",):
        quantizers = parity["steps"][mode]["quantizers"]
        assert quantizers["checked"] == len(result["layers"]["activations"]["qdq"]), quantizers
        assert quantizers["one_step_elsewhere"] == 0 and quantizers["two_or_more"] == 0, (mode, quantizers)
        assert parity["steps"][mode]["local_passed"] is True
    if VNNI:
        assert parity["passed"] is True, parity.get("explanation")
    else:  # deployed parity still runs, step analysis and all
        assert parity["steps"]["deployed"]["quantizers"]["checked"] > 0


def test_a_unet_with_transposed_convs_exports_and_matches_in_onnxruntime(tmp_path):
    sim = quantize(unet(), batches(images(64)), adaround=20, correction="empirical")
    inputs = [(f"random batch {b}", images(b, seed=20 + b)) for b in RANDOM] + [
        ("samples", images(14, seed=3))
    ]
    result = export_and_check(sim, images(2, seed=9), inputs, tmp_path / "unet.onnx")
    assert sorted(result["layers"]["weights"]["qdq"]) == sorted(sim.weights)
    transposed = _dequantize_feeding(result["proto"], "ConvTranspose")
    assert len(transposed) == 2 and all(_axis(node) == 1 for node in transposed)
    assert all(_axis(node) in (0, None) for node in _dequantize_feeding(result["proto"], "Conv"))
    _assert_parity(result)


def test_a_token_model_exports_its_embedding_per_row_and_takes_int64_ids(tmp_path):
    import onnx

    torch.manual_seed(0)
    model = Tokens().eval()
    sim = quantize(model, batches(token_ids(64)), correction="empirical")
    inputs = [(f"random batch {b}", token_ids(b, seed=30 + b)) for b in RANDOM] + [
        ("samples", token_ids(14, 5))
    ]
    result = export_and_check(sim, token_ids(2, seed=9), inputs, tmp_path / "tokens.onnx")
    proto = result["proto"]
    assert proto.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64
    # Nothing quantizes the ids: the graph's input feeds no QuantizeLinear.
    assert not any(
        n.op_type == "QuantizeLinear" and proto.graph.input[0].name in n.input for n in proto.graph.node
    )
    (table,) = _dequantize_feeding(proto, "Gather")
    assert _axis(table) == 0
    scale = next(i for i in proto.graph.initializer if i.name == table.input[1])
    assert list(scale.dims) == [50]  # one scale per row
    assert "embed" in result["layers"]["weights"]["qdq"]
    _assert_parity(result)


@pytest.mark.parametrize("make, shape", [(Transposed1d, (2, 20)), (Transposed3d, (2, 4, 6, 6))])
def test_transposed_1d_and_3d_convs_export_with_axis_1(make, shape, tmp_path):
    torch.manual_seed(0)
    model = make().eval()
    generator = torch.Generator().manual_seed(3)
    sim = quantize(model, batches(torch.randn(48, *shape, generator=generator), 24))
    inputs = [(f"random batch {b}", torch.randn(b, *shape, generator=generator)) for b in RANDOM]
    result = export_and_check(sim, torch.randn(2, *shape, generator=generator), inputs, tmp_path / "t.onnx")
    (weight,) = _dequantize_feeding(result["proto"], "ConvTranspose")
    assert _axis(weight) == 1
    _assert_parity(result)
