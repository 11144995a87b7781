"""How much of a model a quantize run quantizes: the share of its parameters held in quantized conv and linear
weights (with their biases, and the BatchNorms folded into them), the share of its FLOPs those layers compute, and
the modules whose parameters stay float. Worker side; never imports Qt.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

WARN_BELOW = 0.95  # under this share the label W8A8 misleads: say which modules stay float


def coverage(model: nn.Module, quantized: set[str], folded: dict[str, dict], example=None) -> dict:
    """{"parameters": share quantized, "quantized_parameters", "total_parameters", "float": [{"type", "modules",
    "parameters"}] largest first, and with `example` (one input batch) "flops", "quantized_flops", "total_flops"}.
    `quantized`: module paths of the quantized layers; `folded`: layer -> {"bn": the BatchNorm folded into it}."""
    folded_norms = {entry.get("bn") for entry in folded.values()}
    covered = set(quantized) | {name for name in folded_norms if name}
    total = done = 0
    left: dict[str, list[int]] = {}
    for name, module in model.named_modules():
        own = sum(p.numel() for p in module.parameters(recurse=False))
        if not own:
            continue
        total += own
        if name in covered:
            done += own
        else:
            entry = left.setdefault(type(module).__name__, [0, 0])
            entry[0] += 1
            entry[1] += own
    kept = sorted(({"type": kind, "modules": count, "parameters": params} for kind, (count, params) in left.items()),
                  key=lambda e: -e["parameters"])
    report = {"parameters": done / total if total else 1.0, "quantized_parameters": done, "total_parameters": total,
              "float": kept}
    if example is not None:
        report.update(flop_share(model, quantized, example))
    return report


def flop_share(model: nn.Module, quantized: set[str], example) -> dict:
    """{"flops", "quantized_flops", "total_flops"}: the matmul and convolution FLOPs of one sample (torch's
    FlopCounterMode), and those inside the quantized layers. An attention's own projections or an LSTM count as
    float; {} when the model cannot be counted (a custom op the counter does not know is then no failure)."""
    one = example[:1] if isinstance(example, torch.Tensor) else example
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
    kinds = ", ".join(f"{e['type']} ({e['parameters']:,} parameters in {e['modules']})" for e in report["float"][:4])
    of_flops = f" and {flops:.1%} of its FLOPs" if flops is not None else ""
    return (f"only {share:.1%} of the model's parameters{of_flops} are quantized (conv and linear layers); these "
            f"stay float: {kinds or 'their functional ops (matmuls outside modules)'}. The scheme's label covers only "
            "the quantized layers")
