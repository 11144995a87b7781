"""How much of a model a quantize run quantizes: the share of its parameters held in quantized conv and linear
weights (with their biases, and the BatchNorms folded into them), and the modules whose parameters stay float.
Worker side; never imports Qt.
"""

from __future__ import annotations

from torch import nn

WARN_BELOW = 0.95  # under this share the label W8A8 misleads: say which modules stay float


def coverage(model: nn.Module, quantized: set[str], folded: dict[str, dict]) -> dict:
    """{"parameters": share quantized, "quantized_parameters", "total_parameters", "float": [{"type", "modules",
    "parameters"}] largest first}. `quantized`: module paths of the quantized layers; `folded`: layer -> {"bn": the
    BatchNorm folded into it}."""
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
    return {"parameters": done / total if total else 1.0, "quantized_parameters": done, "total_parameters": total,
            "float": kept}


def warning(report: dict) -> str | None:
    """The log line when too little is quantized, naming what stays float; None otherwise."""
    share = report["parameters"]
    if share >= WARN_BELOW:
        return None
    kinds = ", ".join(f"{e['type']} ({e['parameters']:,} parameters in {e['modules']})" for e in report["float"][:4])
    return (f"only {share:.1%} of the model's parameters are quantized (conv and linear weights); these stay float: "
            f"{kinds}. The scheme's label covers only the quantized layers")
