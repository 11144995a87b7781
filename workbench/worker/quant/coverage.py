"""How much of a model a quantize run quantizes: the share of its parameters held in quantized conv,
transposed conv, linear and embedding weights (with their biases, the BatchNorms folded into them, and
attention's projections; an embedding's table is quantized row by row, its padding row too), the share of its
FLOPs those layers compute, and the modules whose parameters stay float with the reason. Worker side; never
imports Qt.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from workbench.worker.quant.attention import fx_keeps_whole, swap_attention, why_kept
from workbench.worker.quant.transformer import SWAPS, swap_transformers

WARN_BELOW = 0.95  # under this share the label W8A8 misleads: say which modules stay float

# Why a kind of module stays float, checked in order.
RECURRENT = (
    "ONNX's LSTM/GRU/RNN operators take float weights: onnxruntime has no QDQ kernel for them, so their "
    "weights stay float"
)
NORMS = (
    nn.LayerNorm,
    nn.GroupNorm,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.LocalResponseNorm,
    nn.RMSNorm,
)
REASONS = (
    ((nn.RNNBase, nn.RNNCellBase), RECURRENT),
    (
        NORMS,
        "int8 runtimes compute normalisation in float (a BatchNorm right after a conv or linear layer is "
        "folded into it instead)",
    ),
    (
        (
            nn.Conv1d,
            nn.Conv2d,
            nn.Conv3d,
            nn.ConvTranspose1d,
            nn.ConvTranspose2d,
            nn.ConvTranspose3d,
            nn.Linear,
            nn.Embedding,
            nn.EmbeddingBag,
        ),
        "the traced graph never calls it as a layer (its weights are used some other way, or not at all), so "
        "it is not quantized",
    ),
)
WHOLE = "torch.fx keeps it whole, so its layers are not seen"
ATTENTION = (
    "its projections are not among the quantized layers (quantize makes them Linear layers where torch.fx "
    "traces the model)"
)
OTHER = "not a conv or linear layer: its parameters are used as they are, in float"


def reason_for(module: nn.Module) -> str:
    """Why a module whose parameters are not quantized stays float."""
    for kinds, reason in REASONS:
        if isinstance(module, kinds):
            return reason
    return OTHER


def _count(module: nn.Module, recurse: bool = True) -> int:
    return sum(p.numel() for p in module.parameters(recurse=recurse))


def _attention(path: str, mha: nn.MultiheadAttention, covered: set[str]) -> tuple[int, int]:
    """(parameters quantized, parameters in all) of an attention that trace() swaps for Linear projections:
    the packed in-projection counts a third (its rows and bias) per quantized q/k/v layer, out_proj as
    itself."""
    embed, done = mha.embed_dim, 0
    for i, part in enumerate(("q", "k", "v")):
        if f"{path}.{part}_proj" not in covered:
            continue
        weight = mha.in_proj_weight if mha.in_proj_weight is not None else getattr(mha, f"{part}_proj_weight")
        done += weight.numel() // 3 if mha.in_proj_weight is not None else weight.numel()
        done += 0 if mha.in_proj_bias is None else mha.in_proj_bias[i * embed : (i + 1) * embed].numel()
    if f"{path}.out_proj" in covered:
        done += _count(mha.out_proj)
    return done, _count(mha)


def coverage(model: nn.Module, quantized: set[str], folded: dict[str, dict], example=None) -> dict:
    """{"parameters": share quantized, "quantized_parameters", "total_parameters", "float": [{"type",
    "modules", "parameters", "reason"}] largest first, and with `example` (one input batch) "flops",
    "quantized_flops", "total_flops"}. `model`: the model as built (its nn.MultiheadAttention counts as
    quantized where trace()'s q_proj, k_proj, v_proj and out_proj layers are); `quantized`: module paths of
    the quantized layers; `folded`:
    layer -> {"bn": the BatchNorm folded into it}."""
    folded_norms = {entry.get("bn") for entry in folded.values()}
    covered = set(quantized) | {name for name in folded_norms if name}
    total = done = 0
    left: dict[tuple[str, str], list[int]] = {}
    whole: list[str] = []  # modules counted with everything inside them

    def keep(module: nn.Module, params: int, reason: str) -> None:
        entry = left.setdefault((type(module).__name__, reason), [0, 0])
        entry[0] += 1
        entry[1] += params

    for name, module in model.named_modules():
        if any(name.startswith(f"{outer}.") for outer in whole):
            continue
        if isinstance(module, nn.MultiheadAttention):
            whole.append(name)
            kept = why_kept(module)
            own, every = (0, _count(module)) if kept else _attention(name, module, covered)
            total, done = total + every, done + own
            if every > own:
                keep(module, every - own, kept or ATTENTION)
            continue
        inside = f"{name}."
        if (
            name
            and list(module.children())
            and fx_keeps_whole(module, name)
            and not any(path.startswith(inside) for path in covered)
        ):  # not quantized some other way
            every = _count(module)
            whole.append(name)
            # e.g. nn.TransformerEncoderLayer under module-level quantization: its fast path is one call
            if every:
                total += every
                keep(module, every, WHOLE)
            continue
        own = _count(module, recurse=False)
        if not own:
            continue
        total += own
        if name in covered:
            done += own
        else:
            keep(module, own, reason_for(module))
    kept = sorted(
        (
            {"type": kind, "modules": count, "parameters": params, "reason": reason}
            for (kind, reason), (count, params) in left.items()
        ),
        key=lambda e: -e["parameters"],
    )
    report = {
        "parameters": done / total if total else 1.0,
        "quantized_parameters": done,
        "total_parameters": total,
        "float": kept,
    }
    if example is not None:
        report.update(flop_share(model, quantized, example))
    return report


def flop_share(model: nn.Module, quantized: set[str], example) -> dict:
    """{"flops", "quantized_flops", "total_flops"}: the matmul and convolution FLOPs of one sample (torch's
    FlopCounterMode), and those inside the quantized layers. An LSTM counts as float, and so does an attention
    whose projections are not quantized; {} when the model cannot be counted (a custom op the counter does not
    know is then no failure)."""
    one = example[:1] if isinstance(example, torch.Tensor) else example
    if any(isinstance(m, (nn.MultiheadAttention, *SWAPS)) for m in model.modules()):
        # Counted as trace() runs it: the projections as the q_proj, k_proj, v_proj and out_proj layers named
        # in `quantized` (nn.MultiheadAttention computes them inside one module call, none of them by name),
        # and a transformer layer's feed-forward through its Linear modules (torch's fast path calls one fused
        # op).
        model = copy.deepcopy(model)
        swap_transformers(model)
        swap_attention(model)
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            model(one)
    except Exception:  # the share is a report, never a reason for the job to fail
        return {}
    counts = counter.get_flop_counts()
    root = type(model).__name__
    total = int(counter.get_total_flops())
    inside = sum(int(sum(counts.get(f"{root}.{name}", {}).values())) for name in quantized)
    return {"flops": inside / total if total else 1.0, "quantized_flops": inside, "total_flops": total}


def warning(report: dict) -> str | None:
    """The log line when too little is quantized, naming what stays float; None otherwise."""
    share, flops = report["parameters"], report.get("flops")
    if share >= WARN_BELOW and (flops is None or flops >= WARN_BELOW):
        return None
    kinds = ", ".join(
        f"{e['type']} ({e['parameters']:,} parameters in {e['modules']})" for e in report["float"][:4]
    )
    largest = report["float"][0] if report["float"] else None
    why = f"; {largest['type']}: {largest['reason']}" if largest and largest.get("reason") else ""
    of_flops = f" and {flops:.1%} of its FLOPs" if flops is not None else ""
    return (
        f"only {share:.1%} of the model's parameters{of_flops} are quantized (conv and linear layers); these "
        f"stay float: {kinds or 'their functional ops (matmuls outside modules)'}{why}. The scheme's label "
        "covers only the quantized layers"
    )
