"""torch's transformer modules are quantized: the quantizable encoder/decoder layers and stacks compute what
nn.TransformerEncoder/Decoder and their layers compute, trace() sees their Linear layers under their own
names, a quantize run of a token-id model quantizes and counts them, a run saved before still loads, and
Hugging Face's BERT and ViT (which torch.fx cannot trace) have their Linear layers quantized module by
module."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from quant_helpers import done
from torch import nn

from workbench.worker.quant import graph, module_level
from workbench.worker.quant.attention import QuantizableAttention
from workbench.worker.quant.coverage import coverage
from workbench.worker.quant.transformer import (
    QuantizableDecoder,
    QuantizableEncoder,
    QuantizableEncoderLayer,
    swap_one,
    swap_transformers,
)

# torch's own warnings: a bool padding mask beside a float mask is deprecated (it still computes it), nested
# tensors are a prototype, a stack that is not batch_first cannot take its nested path.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Support for mismatched"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
]

L, S, N, E, H, FF = 6, 5, 3, 16, 4, 32
TOL = 1e-5


def _biased(module: nn.Module, seed: int) -> nn.Module:
    """`module` in eval mode with every bias random (torch starts attention's at zero, which would hide a bias
    applied wrongly)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "bias" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return module.eval()


def _seq(length: int, batch_first: bool, seed: int, batched: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if not batched:
        return torch.randn(length, E, generator=g)
    return torch.randn((N, length, E) if batch_first else (length, N, E), generator=g)


def _close(expected: torch.Tensor, found: torch.Tensor) -> float:
    assert found.shape == expected.shape
    gap = float((found - expected).abs().max())
    assert gap <= TOL, gap
    return gap


def _square(size: int, seed: int) -> dict[str, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    banned = torch.rand(size, size, generator=g) > 0.6
    banned[:, 0] = False  # every query keeps a key (torch gives NaN for a row with none)
    return {
        "none": None,
        "bool": banned,
        "float": torch.randn(size, size, generator=g),
        "causal": nn.Transformer.generate_square_subsequent_mask(size),
    }


def _padding(length: int) -> torch.Tensor:
    padding = torch.zeros(N, length, dtype=torch.bool)
    padding[1, -2:] = True
    padding[2, -1] = True
    return padding


ACTIVATIONS = {
    "relu": "relu",
    "gelu": "gelu",
    "gelu-module": nn.GELU(),
    "callable": lambda x: F.leaky_relu(x, 0.1),
}


def _both(module: nn.Module, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's output with and without grad (its fused fast paths run only without), which agree here."""
    with torch.no_grad():
        fast = module(*args, **kwargs)
    slow = module(*args, **kwargs).detach()
    return fast, slow


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_the_encoder_layer_computes_what_torch_computes(batch_first, norm_first, activation, mask):
    torch.manual_seed(0)
    layer = _biased(
        nn.TransformerEncoderLayer(
            E, H, FF, activation=ACTIVATIONS[activation], batch_first=batch_first, norm_first=norm_first
        ),
        1,
    )
    swapped = swap_one(layer).eval()
    assert isinstance(swapped, QuantizableEncoderLayer) and isinstance(
        swapped.self_attn, QuantizableAttention
    )
    x, masks = _seq(L, batch_first, 2), _square(L, 3)
    for padding in (None, _padding(L)):
        options = {"src_mask": masks[mask], "src_key_padding_mask": padding, "is_causal": mask == "causal"}
        with torch.no_grad():
            found = swapped(x, **options)
        fast, slow = _both(layer, x, **options)
        _close(slow, found)
        # torch's fused layer (what it runs without grad) gives NaN for a float mask of arbitrary values (0
        # and -inf, the causal one, it computes): its other path is the reference there.
        if mask != "float":
            _close(fast, found)
        if mask != "none" or padding is not None:  # the masks are not ignored
            with torch.no_grad():
                assert not torch.allclose(found, swapped(x), atol=1e-3)


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("masks", ["none", "bool", "float", "causal"])
def test_the_decoder_layer_and_stack_compute_what_torch_computes(batch_first, norm_first, activation, masks):
    torch.manual_seed(0)
    layer = nn.TransformerDecoderLayer(
        E, H, FF, activation=activation, batch_first=batch_first, norm_first=norm_first
    )
    stack = _biased(nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(E)), 1)
    layer = _biased(layer, 1)
    swapped_layer, swapped_stack = swap_one(layer).eval(), swap_one(stack).eval()
    assert isinstance(swapped_stack, QuantizableDecoder)
    assert isinstance(swapped_stack.layers[1].multihead_attn, QuantizableAttention)
    tgt, memory = _seq(L, batch_first, 2), _seq(S, batch_first, 3)
    g = torch.Generator().manual_seed(4)
    memory_masks = {
        "none": None,
        "bool": torch.rand(L, S, generator=g) > 0.7,
        "float": torch.randn(L, S, generator=g),
        "causal": None,
    }
    memory_masks["bool"][:, 0] = False
    for padding in (False, True):
        options = {
            "tgt_mask": _square(L, 5)[masks],
            "memory_mask": memory_masks[masks],
            "tgt_key_padding_mask": _padding(L) if padding else None,
            "memory_key_padding_mask": _padding(S) if padding else None,
        }
        if masks == "causal":
            options["tgt_is_causal"] = True
        with torch.no_grad():
            for torch_module, ours in ((layer, swapped_layer), (stack, swapped_stack)):
                _close(torch_module(tgt, memory, **options), ours(tgt, memory, **options))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [True, False])
def test_the_encoder_stack_computes_what_torch_computes_without_its_nested_tensor_path(
    batch_first, norm_first
):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, FF, batch_first=batch_first, norm_first=norm_first)
    stacks = {
        nested: _biased(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=nested), 1)
        for nested in (False, True)
    }
    swapped = swap_one(stacks[True]).eval()
    assert isinstance(swapped, QuantizableEncoder) and swapped.norm is stacks[True].norm
    assert [type(m) for m in swapped.layers] == [QuantizableEncoderLayer] * 2
    x, masks = _seq(L, batch_first, 2), _square(L, 3)
    padding = _padding(L)
    for name, mask in masks.items():
        for pad in (None, padding):
            options = {"mask": mask, "src_key_padding_mask": pad}
            if name == "causal":
                options["is_causal"] = True
            with torch.no_grad():
                found = swapped(x, **options)
            fast, slow = _both(stacks[False], x, **options)
            _close(slow, found)
            if name != "float":  # see the encoder layer's test
                _close(fast, found)
    # With enable_nested_tensor, torch's own eager output under no_grad zeroes the padded positions before the
    # final norm (its nested tensors hold no value there); with grad, or exported, it does not. The
    # quantizable stack never takes that path: every position a padding mask lets through is the same.
    with torch.no_grad():
        found = swapped(x, src_key_padding_mask=padding)
        nested = stacks[True](x, src_key_padding_mask=padding)
    kept = ~padding if batch_first else ~padding.T
    _close(nested[kept], found[kept])


@pytest.mark.parametrize("batch_first", [True, False])
def test_unbatched_inputs_and_the_whole_transformer(batch_first):
    torch.manual_seed(0)
    model = _biased(
        nn.Transformer(
            E, H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, batch_first=batch_first
        ),
        1,
    )
    swapped = swap_one(model).eval()
    src, tgt = _seq(S, batch_first, 2), _seq(L, batch_first, 3)
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    with torch.no_grad():
        _close(
            model(
                src,
                tgt,
                tgt_mask=causal,
                tgt_is_causal=True,
                src_key_padding_mask=_padding(S),
                memory_key_padding_mask=_padding(S),
            ),
            swapped(
                src,
                tgt,
                tgt_mask=causal,
                tgt_is_causal=True,
                src_key_padding_mask=_padding(S),
                memory_key_padding_mask=_padding(S),
            ),
        )
        # Unbatched (L, E) sequences, as torch takes them.
        one_src, one_tgt = _seq(S, batch_first, 4, batched=False), _seq(L, batch_first, 5, batched=False)
        _close(model(one_src, one_tgt, tgt_mask=causal), swapped(one_src, one_tgt, tgt_mask=causal))
        layer = model.encoder.layers[0]
        _close(
            layer(one_src, src_key_padding_mask=_padding(S)[1]),
            swap_one(layer)(one_src, src_key_padding_mask=_padding(S)[1]),
        )


class Seq2Seq(nn.Module):
    """Masks as the model's own inputs: tracing sees them as values, never branches on them."""

    def __init__(self):
        super().__init__()
        self.enc = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(E, H, FF, batch_first=True, activation="gelu"),
            2,
            enable_nested_tensor=False,
        )
        self.dec = nn.TransformerDecoderLayer(E, H, FF, batch_first=True, norm_first=True)
        self.head = nn.Linear(E, 3)

    def forward(self, src, tgt, padding, causal):
        memory = self.enc(src, src_key_padding_mask=padding)
        out = self.dec(tgt, memory, tgt_mask=causal, memory_key_padding_mask=padding, tgt_is_causal=True)
        return self.head(out)


def test_the_traced_graph_calls_their_linear_layers_by_their_names():
    torch.manual_seed(0)
    model = _biased(Seq2Seq(), 1)
    gm = graph.trace(model)
    layers = graph.find_structure(gm).layers
    originals = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    # Every Linear the model holds is a layer under its own name (attention's out_proj included), and the
    # attentions' q/k/v projections are added beside it.
    assert originals <= set(layers)
    projections = {
        f"{path}.{p}_proj"
        for path in (
            "enc.layers.0.self_attn",
            "enc.layers.1.self_attn",
            "dec.self_attn",
            "dec.multihead_attn",
        )
        for p in "qkv"
    }
    assert set(layers) == originals | projections
    assert (
        sum(n.op == "call_function" and getattr(n.target, "__name__", "") == "attend" for n in gm.graph.nodes)
        == 4
    )
    assert isinstance(model.enc, nn.TransformerEncoder)  # the original is left alone
    src, tgt = _seq(S, True, 2), _seq(L, True, 3)
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    with torch.no_grad():
        for padding in (torch.zeros(N, S, dtype=torch.bool), _padding(S)):
            _close(model(src, tgt, padding, causal), gm(src, tgt, padding, causal))


def test_subclasses_and_what_fx_keeps_whole_are_left_alone():
    class Mine(nn.TransformerEncoderLayer):  # its own forward is what fx should trace
        pass

    model = nn.Module()
    model.mine = Mine(E, H, FF)
    model.plain = nn.TransformerEncoderLayer(E, H, FF)
    model.inside = nn.Sequential(nn.TransformerDecoderLayer(E, H, FF))
    assert swap_transformers(model) == ["plain", "inside.0"]
    assert type(model.mine) is Mine


# --- through the real quantize task -------------------------------------------------------------------------

PROJECT = '''
import torch
from torch import nn
from torch.utils.data import Dataset


class Tokens(Dataset):
    """Sequences of 32 token ids; the label: whether token 7 occurs more often than token 3."""

    def __init__(self, size=96):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 50, (size, 32), generator=g)
        self.labels = ((self.ids == 7).sum(1) > (self.ids == 3).sum(1)).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.ids[i], self.labels[i]


class Net(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 2)
        self.head = nn.Linear(32, num_classes)

    def forward(self, ids):
        return self.head(self.enc(self.embed(ids))).mean(1)  # the head straight on the encoder's output


class Bert(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        from transformers import BertConfig, BertForSequenceClassification

        self.bert = BertForSequenceClassification(BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, num_labels=num_classes))

    def forward(self, ids):
        return self.bert(input_ids=ids).logits
'''


def run(task: str, spec: dict, workspace: Path) -> dict:
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    return run_task(get_task(task), spec, emit=lambda *_: None, workspace=workspace)


def _load(source: Path) -> dict:
    namespace: dict = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """(workspace, project file, its namespace, {model: quantize spec})."""
    root = tmp_path_factory.mktemp("transformer-quant")
    source = root / "project.py"
    source.write_text(textwrap.dedent(PROJECT))
    namespace = _load(source)
    specs = {}
    for name in ("Net", "Bert"):
        torch.manual_seed(0)
        torch.save(namespace[name]().state_dict(), root / f"{name}.pt")
        specs[name] = {
            "model": {"name": f"file:{source}:{name}", "checkpoint": str(root / f"{name}.pt")},
            "dataset": {"name": f"file:{source}:Tokens", "num_workers": 0, "test_fraction": 0.25},
            "calibration": {"samples": 32, "seed": 0},
            "eval_samples": 24,
        }
    return root / "ws", source, namespace, specs


@pytest.fixture(scope="module")
def token_runs(project):
    """{"new": the token model's quantize result, "old": one quantized as before transformers were
    swapped}."""
    workspace, _, _, specs = project
    runs = {"new": done(run("quant.analyze", specs["Net"], workspace))}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph, "swap_transformers", lambda model: [])
        runs["old"] = done(run("quant.analyze", specs["Net"], workspace))
    return runs


def _encoder_linears(model: nn.Module) -> dict[str, int]:
    """{module path: parameters} of the encoder's feed-forward Linear layers and attentions."""
    return {
        name: sum(p.numel() for p in m.parameters())
        for name, m in model.enc.named_modules()
        if isinstance(m, (nn.MultiheadAttention, nn.Linear)) and not name.endswith("out_proj")
    }


def test_a_token_model_quantizes_its_encoder_and_counts_it(project, token_runs):
    _, _, namespace, _ = project
    new, old = token_runs["new"], token_runs["old"]
    weights = {e["name"] for e in new["layers"] if e["tensor"] == "weight"}
    expected = {
        f"enc.layers.{i}.{part}"
        for i in range(2)
        for part in (
            "linear1",
            "linear2",
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.out_proj",
        )
    }
    assert expected | {"head"} <= weights
    assert not expected & {e["name"] for e in old["layers"]}
    model = namespace["Net"]()
    encoder = sum(_encoder_linears(model).values())
    total = sum(p.numel() for p in model.parameters())
    norms = sum(p.numel() for m in model.modules() if isinstance(m, nn.LayerNorm) for p in m.parameters())
    cover = new["coverage"]
    assert cover["total_parameters"] == total
    # Everything but the LayerNorms (and the embedding table, where another layer type does not quantize it).
    float_kinds = {e["type"]: e["parameters"] for e in cover["float"]}
    assert set(float_kinds) <= {"LayerNorm", "Embedding"} and float_kinds["LayerNorm"] == norms, cover[
        "float"
    ]
    assert cover["quantized_parameters"] >= encoder + sum(p.numel() for p in model.head.parameters())
    assert old["coverage"]["parameters"] < 0.2 and old["coverage"]["float"][0]["type"] == "TransformerEncoder"
    # The attention's own matmuls (scores, context) stay float: the share of FLOPs is high, and honest.
    assert 0.6 < cover["flops"] < 0.95 and cover["flops"] > old["coverage"]["flops"]
    assert new["quantized"]["logit_sqnr_db"] > 15


def test_a_run_saved_before_the_swap_still_loads(project, token_runs):
    from workbench.specs import ModelSpec
    from workbench.worker.models import build_model
    from workbench.worker.quant.artifacts import load_quantized

    _, _, _, specs = project
    folder = Path(token_runs["old"]["artifacts"]["weights"]).parent
    params = json.loads((folder / "quant_params.json").read_text())
    saved_points = {a["name"] for a in params["activations"]}
    assert "enc" in saved_points  # the head's input, after the encoder fx kept whole
    saved = torch.load(folder / "quantized.pt", weights_only=True)
    assert "enc.layers.0.self_attn.in_proj_weight" in saved["state_dict"]

    def fresh():
        model = build_model(
            ModelSpec.from_dict(params["model"]),
            input_shape=(32,),
            log=lambda *a, **k: None,
            pretrained=False,
            task="custom",
            example=torch.zeros(32, dtype=torch.long),
        )
        return model.eval()

    sim = load_quantized(fresh(), folder)
    # The encoder's layers have no saved codes: they stay float; the saved input quantizer of the head is the
    # one at the encoder's last node now.
    assert set(sim.weights) == {w["name"] for w in params["weights"]}
    on = {name for name, state in sim.points.items() if state.module.enabled}
    assert "enc.layers.1.norm2" in on and not any(name.startswith("enc.layers.0") for name in on)
    assert len(on) == len(saved_points)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph, "swap_transformers", lambda model: [])
        before = load_quantized(fresh(), folder)  # as that version loaded it
    ids = torch.randint(0, 50, (8, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        _close(before(ids), sim(ids))


# --- Hugging Face -------------------------------------------------------------------------------------------


def _non_embedding_share(model: nn.Module, report: dict) -> float:
    """The quantized share of the parameters outside nn.Embedding tables."""
    tables = {name for name, m in model.named_modules() if isinstance(m, nn.Embedding)}
    table_params = sum(
        p.numel() for name, m in model.named_modules() if name in tables for p in m.parameters()
    )
    quantized_tables = sum(e["parameters"] for e in report["float"] if e["type"] == "Embedding")
    quantized_tables = table_params - quantized_tables  # the tables counted as quantized, if any
    return (report["quantized_parameters"] - quantized_tables) / (report["total_parameters"] - table_params)


def test_hugging_face_bert_is_quantized_module_by_module(project):
    """transformers 5 has no fx tracer (transformers.utils.fx is gone) and torch.fx cannot trace BERT:
    quantize falls back to module-level quantization, which hooks every Linear of it."""
    workspace, _, namespace, specs = project
    result = done(run("quant.analyze", specs["Bert"], workspace))
    assert result["module_level"]["reason"]
    weights = {e["name"] for e in result["layers"] if e["tensor"] == "weight"}
    model = namespace["Bert"]()
    linears = {name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    # q, k, v, output, intermediate, output; pooler, head
    assert linears <= weights and len(linears) == 2 * 6 + 2
    share = _non_embedding_share(model, result["coverage"])
    assert share >= 0.95, result["coverage"]
    assert {e["type"] for e in result["coverage"]["float"]} <= {"LayerNorm", "Embedding"}
    assert result["quantized"]["logit_sqnr_db"] > 10


def test_hugging_face_vit_has_its_linear_layers_quantized():
    from transformers import ViTConfig, ViTForImageClassification

    class Vit(nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = ViTForImageClassification(
                ViTConfig(
                    image_size=16,
                    patch_size=4,
                    num_channels=3,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=4,
                    intermediate_size=64,
                    num_labels=3,
                )
            )

        def forward(self, x):
            return self.vit(pixel_values=x).logits

    torch.manual_seed(0)
    model = Vit().eval()
    with pytest.raises(graph.Untraceable):
        graph.trace(model)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    structure, _ = module_level.find_structure(module_level.prepare(model), x)
    weighted = {name for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))}
    assert set(structure.layers) == weighted
    report = coverage(model, set(structure.layers), {}, example=x)
    # What stays float: the class token and position embedding (ViTEmbeddings' own parameters) and the
    # LayerNorms.
    assert {e["type"] for e in report["float"]} == {"ViTEmbeddings", "LayerNorm"}
    assert report["parameters"] > 0.95


def test_module_level_quantization_sees_torch_transformer_layers():
    """A model torch.fx cannot trace still has its nn.TransformerEncoder's Linear layers hooked: torch's fused
    fast path would run them without calling those modules."""

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, FF, batch_first=True), 1)
            self.head = nn.Linear(E, 2)

        def forward(self, x):
            h = self.enc(x)
            if h.mean() > 1e6:  # a branch on a value: torch.fx cannot trace it
                h = h / 2
            return self.head(h.mean(1))

    model = _biased(Branchy(), 1)
    with pytest.raises(graph.Untraceable):
        graph.trace(model)
    prepared = module_level.prepare(model)
    x = _seq(L, True, 2)
    with torch.no_grad():
        _close(model(x), prepared(x))
    structure, _ = module_level.find_structure(prepared, x)
    assert {
        "enc.layers.0.linear1",
        "enc.layers.0.linear2",
        "enc.layers.0.self_attn.q_proj",
        "enc.layers.0.self_attn.out_proj",
        "head",
    } <= set(structure.layers)
    assert coverage(model, set(structure.layers), {})["float"][0]["type"] == "LayerNorm"
