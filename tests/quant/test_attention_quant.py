"""nn.MultiheadAttention's weights are quantized: QuantizableAttention computes what it computes, with its q,
k, v and out projections as Linear layers that torch.fx sees; a quantize run of a small attention model
quantizes them, counts them in its coverage and exports them as int8 in ONNX QDQ with parity; a run saved
before (packed in_proj keys) still loads and exports; torchvision's ViT traces with them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from quant_helpers import done
from torch import nn

from workbench.worker.quant import graph
from workbench.worker.quant.attention import QuantizableAttention, swap_attention

L, S, N, E, H = 5, 7, 3, 16, 4


def _pair(seed: int = 0, **options) -> tuple[nn.MultiheadAttention, QuantizableAttention]:
    torch.manual_seed(seed)
    mha = nn.MultiheadAttention(E, H, **options).eval()
    with torch.no_grad():  # biases that matter (torch initialises them to zero)
        for name, p in mha.named_parameters():
            if "bias" in name:
                p.normal_()
    return mha, QuantizableAttention(mha).eval()


def _inputs(batch_first: bool, kdim: int = E, vdim: int = E, seed: int = 1):
    g = torch.Generator().manual_seed(seed)

    def make(length, width):
        return torch.randn((N, length, width) if batch_first else (length, N, width), generator=g)

    return make(L, E), make(S, kdim), make(S, vdim)


def _same(expected, found) -> None:
    out, weights = expected
    assert torch.allclose(found[0], out, atol=1e-5, rtol=0), (found[0] - out).abs().max()
    if weights is None:
        assert found[1] is None
    else:
        assert found[1].shape == weights.shape and torch.allclose(found[1], weights, atol=1e-5, rtol=0)


BOOL_MASK = torch.rand(L, S, generator=torch.Generator().manual_seed(2)) > 0.6
BOOL_MASK[:, 0] = False  # no row without a key to attend to (torch gives NaN there)
MASKS = {
    "none": None,
    "bool": BOOL_MASK,
    "float": torch.randn(L, S, generator=torch.Generator().manual_seed(3)),
    "float3d": torch.randn(N * H, L, S, generator=torch.Generator().manual_seed(4)),
}
PADDING = torch.zeros(N, S, dtype=torch.bool)
PADDING[1, -2:] = True
PADDING[2, -1] = True


# torch itself warns that a bool padding mask beside a float attn_mask is deprecated; it still computes it.
@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask")
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("padding", [False, True])
def test_it_computes_what_multihead_attention_computes(batch_first, mask, padding):
    mha, swapped = _pair(batch_first=batch_first)
    q, k, v = _inputs(batch_first)
    options = {"attn_mask": MASKS[mask], "key_padding_mask": PADDING if padding else None}
    with torch.no_grad():
        for average in (True, False):
            _same(
                mha(q, k, v, average_attn_weights=average, **options),
                swapped(q, k, v, average_attn_weights=average, **options),
            )
        _same(mha(q, k, v, need_weights=False, **options), swapped(q, k, v, need_weights=False, **options))
    if mask != "none":  # the mask is not ignored
        assert not torch.allclose(swapped(q, k, v, **options)[0], swapped(q, k, v)[0])


@pytest.mark.parametrize("batch_first", [True, False])
def test_kdim_vdim_causal_float_padding_and_unbatched_inputs(batch_first):
    mha, swapped = _pair(batch_first=batch_first, kdim=6, vdim=10)
    assert mha.in_proj_weight is None and swapped.k_proj.in_features == 6 and swapped.v_proj.in_features == 10
    q, k, v = _inputs(batch_first, 6, 10)
    with torch.no_grad():
        _same(mha(q, k, v, attn_mask=MASKS["bool"]), swapped(q, k, v, attn_mask=MASKS["bool"]))
        float_padding = torch.where(PADDING, -1e4, 0.0)
        _same(mha(q, k, v, key_padding_mask=float_padding), swapped(q, k, v, key_padding_mask=float_padding))
        mha, swapped = _pair(batch_first=batch_first)  # self-attention from here on
        x = _inputs(batch_first)[0]
        causal = nn.Transformer.generate_square_subsequent_mask(L)
        for need in (True, False):
            _same(
                mha(x, x, x, attn_mask=causal, is_causal=True, need_weights=need),
                swapped(x, x, x, attn_mask=causal, is_causal=True, need_weights=need),
            )
        # The hint alone (torch asks for the mask too): the same triangle.
        _same(mha(x, x, x, attn_mask=causal, is_causal=True), swapped(x, x, x, is_causal=True))
        # Unbatched: (L, E) inputs, a (S,) padding mask, an (H, L, S) mask.
        one = x[0] if batch_first else x[:, 0]
        _same(
            mha(one, one, one, key_padding_mask=PADDING[1, :L]),
            swapped(one, one, one, key_padding_mask=PADDING[1, :L]),
        )
        heads = torch.randn(H, L, L)
        _same(
            mha(one, one, one, attn_mask=heads, average_attn_weights=False),
            swapped(one, one, one, attn_mask=heads, average_attn_weights=False),
        )


class Block(nn.Module):
    """A pre-norm transformer block over a ModuleList (which torch.fx walks into), called as `x, _ =
    attn(...)`."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(E)
        self.layers = nn.ModuleList([nn.MultiheadAttention(E, H, batch_first=True)])
        self.head = nn.Linear(E, 2)

    def forward(self, x, mask):
        h = self.norm(x)
        a, _ = self.layers[0](h, h, h, key_padding_mask=mask, need_weights=False)
        return self.head(x + a)


def test_the_traced_graph_calls_the_projections_as_layers():
    torch.manual_seed(0)
    model = Block().eval()
    gm = graph.trace(model)
    calls = [n.target for n in gm.graph.nodes if n.op == "call_module"]
    assert calls == ["norm"] + [f"layers.0.{p}_proj" for p in "qkv"] + ["layers.0.out_proj", "head"]
    assert sum(n.op == "call_function" and n.target.__name__ == "attend" for n in gm.graph.nodes) == 1
    assert isinstance(model.layers[0], nn.MultiheadAttention)  # the original is left alone
    x = torch.randn(2, L, E)
    with torch.no_grad():
        for mask in (None, PADDING[:2, :L]):
            assert torch.allclose(gm(x, mask), model(x, mask), atol=1e-5, rtol=0)


def test_what_cannot_be_swapped_is_kept_with_the_reason():
    model = nn.Module()
    model.plain = nn.MultiheadAttention(E, H)
    model.biased = nn.MultiheadAttention(E, H, add_bias_kv=True)
    model.zeros = nn.MultiheadAttention(E, H, add_zero_attn=True)
    model.block = nn.TransformerEncoderLayer(E, H, dim_feedforward=32)
    kept: dict[str, str] = {}
    assert swap_attention(model, kept) == ["plain"]
    assert isinstance(model.plain, QuantizableAttention)
    assert "add_bias_kv" in kept["biased"] and "add_zero_attn" in kept["zeros"]
    # Its fast path reads the packed weights, and fx would not see the projections inside it anyway.
    assert (
        isinstance(model.block.self_attn, nn.MultiheadAttention) and "keeps whole" in kept["block.self_attn"]
    )


@pytest.mark.parametrize(
    "options", [{}, {"kdim": 6, "vdim": 10}, {"bias": False}], ids=["packed", "kdim", "no-bias"]
)
def test_a_state_dict_saved_with_multihead_attention_loads_into_the_swapped_model(options):
    from workbench.worker.quant.artifacts import _unpacked_attention

    mha, _ = _pair(**options)
    model = nn.Sequential(nn.Identity())
    model.attention = mha
    swapped = nn.Sequential(nn.Identity())
    swapped.attention = nn.MultiheadAttention(E, H, **options)
    assert swap_attention(swapped) == ["attention"]
    expected = set(swapped.state_dict())
    state = _unpacked_attention(model.state_dict(), expected)
    assert set(state) == expected
    swapped.load_state_dict(state)
    q, k, v = _inputs(False, options.get("kdim", E), options.get("vdim", E))
    with torch.no_grad():
        _same(mha(q, k, v), swapped.attention(q, k, v))


def test_torchvision_vit_traces_with_its_attention_as_linear_layers():
    from torchvision.models.vision_transformer import VisionTransformer

    # vit_b_16's own class and patch size at a small image, depth and width (vit_b_16 itself: 86M parameters).
    torch.manual_seed(0)
    model = VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10
    ).eval()
    gm = graph.trace(model)
    structure = graph.find_structure(gm)
    attention = [
        f"encoder.layers.encoder_layer_{i}.self_attention.{p}"
        for i in range(2)
        for p in ("q_proj", "k_proj", "v_proj", "out_proj")
    ]
    assert set(attention) <= set(structure.layers)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(gm(x), model(x), atol=1e-5, rtol=0)
    from workbench.worker.quant.coverage import coverage

    found = coverage(model, {layer.node.target for layer in structure.layers.values()}, {})
    # What stays float: the class token (the model's), the position embedding (its Encoder's) and the
    # LayerNorms.
    assert found["parameters"] > 0.95
    assert {e["type"] for e in found["float"]} == {"VisionTransformer", "Encoder", "LayerNorm"}


# --- through the real quantize task and the ONNX QDQ export -------------------------------------------------

MODEL = """
import torch
from torch import nn


class Net(nn.Module):  # patches -> LayerNorm -> self-attention -> GELU MLP, pre-norm residuals, mean-pooled head
    def __init__(self, num_classes=10):
        super().__init__()
        self.patches = nn.Conv2d(3, 32, 4, stride=4)
        self.norm1, self.norm2 = nn.LayerNorm(32), nn.LayerNorm(32)
        self.attention = nn.MultiheadAttention(32, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, num_classes)

    def forward(self, x):
        x = self.patches(x).flatten(2).transpose(1, 2)
        h = self.norm1(x)
        a, _ = self.attention(h, h, h, need_weights=False)
        x = x + a
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(1))
"""  # noqa: E501
DATA = {"name": "fake", "num_classes": 10, "size": 96, "test_fraction": 0.25, "image_size": [16, 16]}
PROJECTIONS = [f"attention.{p}" for p in ("q_proj", "k_proj", "v_proj", "out_proj")]


def run(task: str, spec: dict, workspace: Path) -> dict:
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    return run_task(get_task(task), spec, emit=lambda *_: None, workspace=workspace)


EXPORTED: dict[str, dict] = {}


def export(workspace: Path, quant: dict) -> dict:
    """The onnx_qdq export of a quantize run, each run exported once."""
    if quant["run_dir"] not in EXPORTED:
        EXPORTED[quant["run_dir"]] = done(
            run(
                "export.model",
                {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq", "parity_samples": 14},
                workspace,
            )
        )
    return EXPORTED[quant["run_dir"]]


def _holds_int8(names, projection: str) -> bool:
    return any(projection.replace(".", "_") in name.replace(".", "_") for name in names)


@pytest.fixture(scope="module")
def attention_runs(tmp_path_factory):
    """(workspace, model spec, {"new": quantize result, "old": one quantized as before attention was
    swapped})."""
    root = tmp_path_factory.mktemp("attention-quant")
    source = root / "net.py"
    source.write_text(textwrap.dedent(MODEL))
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    torch.manual_seed(0)
    torch.save(namespace["Net"]().state_dict(), root / "net.pt")
    model = {"name": f"file:{source}:Net", "checkpoint": str(root / "net.pt")}
    spec = {"model": model, "dataset": DATA, "calibration": {"samples": 32, "seed": 0}, "eval_samples": 24}
    workspace = root / "ws"
    runs = {"new": done(run("quant.analyze", spec, workspace))}
    with pytest.MonkeyPatch.context() as patch:  # the quantize of a version that left attention whole
        patch.setattr(graph, "swap_attention", lambda model, kept=None: [])
        runs["old"] = done(run("quant.analyze", spec, workspace))
    return workspace, model, runs


def test_a_quantize_run_quantizes_the_projections_and_counts_them(attention_runs):
    _, _, runs = attention_runs
    new, old = runs["new"], runs["old"]
    weights = {e["name"] for e in new["layers"] if e["tensor"] == "weight"}
    assert set(PROJECTIONS) <= weights
    assert new["coverage"]["parameters"] > 0.95 and old["coverage"]["parameters"] < 0.7
    kinds = {e["type"] for e in new["coverage"]["float"]}
    assert kinds == {"LayerNorm"}, new["coverage"]["float"]
    assert new["coverage"]["flops"] > old["coverage"]["flops"]
    assert not set(PROJECTIONS) & {e["name"] for e in old["layers"]}


def _int8_initializers(path: str) -> dict:
    import numpy as np
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(path)
    inits = {init.name: numpy_helper.to_array(init) for init in proto.graph.initializer}
    found = {}
    for node in proto.graph.node:
        # 8-bit weight codes: int8, or uint8 with zero point 128 where the CPU's kernels want them unsigned.
        if (
            node.op_type == "DequantizeLinear"
            and node.input[0] in inits
            and inits[node.input[0]].dtype in (np.int8, np.uint8)
            and inits[node.input[0]].ndim >= 2
        ):
            found[node.input[0]] = inits[node.input[0]].shape
    return found


def _parity(result: dict) -> None:
    """onnxruntime, as deployed and as written, gives every quantizer the simulation's codes (a flip at a
    rounding tie aside)."""
    parity = result["parity"]
    assert parity["passed"] is True, parity.get("explanation")
    for mode in ("deployed", "as_written"):
        quantizers = parity["steps"][mode]["quantizers"]
        assert quantizers["checked"] == len(result["layers"]["activations"]["qdq"]), quantizers
        assert quantizers["one_step_elsewhere"] == 0 and quantizers["two_or_more"] == 0, quantizers


def test_the_qdq_export_holds_the_projections_as_int8_and_keeps_parity(attention_runs):
    workspace, _, runs = attention_runs
    result = export(workspace, runs["new"])
    assert set(PROJECTIONS) <= set(result["layers"]["weights"]["qdq"])
    assert result["layers"]["weights"]["float"] == []
    int8 = _int8_initializers(result["artifact"])
    for projection in PROJECTIONS:  # the initializer's name carries the module path
        assert _holds_int8([name for name, shape in int8.items() if shape == (32, 32)], projection), sorted(
            int8
        )
    _parity(result)


def test_a_run_saved_before_attention_was_quantized_still_loads_and_exports(attention_runs):
    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model
    from workbench.worker.quant.artifacts import load_quantized

    workspace, model_part, runs = attention_runs
    folder = Path(runs["old"]["artifacts"]["weights"]).parent
    saved = torch.load(folder / "quantized.pt", weights_only=True)
    assert "attention.in_proj_weight" in saved["state_dict"]  # the packed form
    params = json.loads((folder / "quant_params.json").read_text())
    model = build_model(ModelSpec.from_dict(params["model"]), input_shape=(3, 16, 16)).eval()
    sim = load_quantized(model, folder)
    assert not set(PROJECTIONS) & set(sim.weights)  # no saved codes: they stay float
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph, "swap_attention", lambda model, kept=None: [])
        before = load_quantized(model, folder)  # as that version loaded it
    x = torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.allclose(sim(x), before(x), atol=1e-5, rtol=0)
        attention = sim.gm.get_submodule("attention")
        assert torch.equal(
            torch.cat([attention.get_submodule(f"{p}_proj").weight for p in "qkv"]),
            before.gm.get_submodule("attention").in_proj_weight,
        )
    result = export(workspace, runs["old"])
    assert not set(PROJECTIONS) & set(result["layers"]["weights"]["qdq"])
    int8 = _int8_initializers(result["artifact"])
    assert _holds_int8(int8, "mlp.0") and not any(_holds_int8(int8, p) for p in PROJECTIONS)
    _parity(result)
