"""Parity: the exported model against eager PyTorch on the same inputs (random batches of 1 and 7, real
samples where there is data) within a tolerance per format and dtype, and, when they disagree, the first
module whose output diverges (forward hooks in PyTorch against ONNX node outputs or an unflattened
ExportedProgram). Worker side.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from workbench.worker.export.common import reason
from workbench.worker.models import logits_of

RANDOM_BATCHES = (1, 7)
SEED = 0


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float  # times the largest |reference| value of the tensor compared
    rule: str

    def bound(self, reference_max: float) -> float:
        return self.atol + self.rtol * reference_max


# The export passes when max |exported - eager| <= atol + rtol * max |eager| over every input.
# float32: atol 1e-4 plus 1e-5 of the output's scale: logits of tens are sums of thousands of products, and
#   another kernel library sums them in another order, which moves them by a few ulps of their own size, not
#   of 1.
# float16 (TensorRT): 1e-2 and 1e-2.
# int8 Q/DQ (quant_step): whole steps of the output's quantizer, against the quantize run's simulated model,
#   not the float one (which differs by the quantization error itself); how many steps, qdq_steps derives from
#   the rounding flips it measures quantizer by quantizer.
FP32 = Tolerance(1e-4, 1e-5, "max |diff| <= 1e-4 + 1e-5 * max |eager| (float32)")
FP16 = Tolerance(1e-2, 1e-2, "max |diff| <= 1e-2 + 1e-2 * max |eager| (float16)")


def quant_step(scale: float, steps: int = 1, rule: str = "") -> Tolerance:
    # A difference of exactly k steps is computed in float32 as k * scale * (1 +- a few ulps): allow for them.
    return Tolerance(
        steps * scale * (1 + 1e-4),
        0.0,
        rule
        or f"max |diff| <= {steps} quantization step(s) of the "
        f"output ({scale:.6g}), against the quantize run's "
        "simulated model",
    )


def _finite_max(t: torch.Tensor) -> float:
    if t.numel() == 0:
        return 0.0
    value = float(t.max())
    return math.inf if math.isnan(value) else value


def diff(reference: torch.Tensor, exported: torch.Tensor) -> tuple[float, float]:
    """(max |a - b|, that divided by max |a|): the relative figure is against the tensor's scale, since an
    element-wise ratio is meaningless for the many logits and activations near zero."""
    reference, exported = reference.detach().float().cpu(), exported.detach().float().cpu()
    if reference.shape != exported.shape:
        return math.inf, math.inf
    gap = (exported - reference).abs()
    gap = torch.where(torch.isnan(gap), torch.full_like(gap, math.inf), gap)
    scale = _finite_max(reference.abs())
    worst = _finite_max(gap)
    return worst, (worst / scale if scale > 0 else (0.0 if worst == 0 else math.inf))


def random_inputs(shape: tuple[int, ...], batches: Iterable[int]) -> list[tuple[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(SEED)
    return [(f"random batch {b}", torch.randn(b, *shape, generator=generator)) for b in batches]


# Inputs of other distributions than the example the exporter saw: a tracing exporter freezes a Python `if` on
# tensor values to the branch the example took, and inputs like the example take it too (a branch on x.mean()
# > 1 passed parity on every random and real input, and was 0.64 off on inputs scaled 5x).
SCALE, SHIFT = 5.0, 3.0


def distribution_inputs(shape: tuple[int, ...], batch: int) -> list[tuple[str, torch.Tensor]]:
    """A random batch scaled by SCALE and one shifted by SHIFT."""
    generator = torch.Generator().manual_seed(SEED + 2)
    x = torch.randn(batch, *shape, generator=generator)
    return [
        (f"random batch {batch} scaled x{SCALE:g}", x * SCALE),
        (f"random batch {batch} shifted by +{SHIFT:g}", x + SHIFT),
    ]


def traced_note(exporter: str, fallback_reason: str | None) -> str | None:
    """What a tracing exporter did to data-dependent control flow, or None for one that captures it (or
    refuses)."""
    if exporter not in ("torchscript", "trace"):
        return None
    how = (
        "the TorchScript-based ONNX exporter (the fallback) traced"
        if exporter == "torchscript"
        else "torch.jit.trace traced"
    )
    known = "data-dependent" in (fallback_reason or "")
    lead = "forward() has data-dependent control flow (torch.export said so), and " if known else ""
    return (
        f"{lead}{how} one run of forward(): a Python if or loop on tensor values is frozen to the branch the "
        f"example input took; parity also ran inputs scaled x{SCALE:g} and shifted by +{SHIFT:g} to catch a "
        "frozen branch"
    )


def sample_inputs(batches, limit: int, batch_size: int) -> list[tuple[str, torch.Tensor]]:
    """Up to `limit` real (normalised) samples from `batches` ((x, y) pairs), regrouped into `batch_size`."""
    xs, total = [], 0
    for x, _ in batches:
        x = x.detach().cpu()
        xs.append(x.float() if x.is_floating_point() else x)  # token ids stay integers
        total += len(x)
        if total >= limit:
            break
    if not xs:
        return []
    flat = torch.cat(xs)[:limit]
    return [
        (f"samples {i}..{i + len(chunk) - 1}", chunk)
        for i, chunk in ((i, flat[i : i + batch_size]) for i in range(0, len(flat), batch_size))
    ]


@torch.no_grad()
def check(
    reference: Callable, exported: Callable, inputs: list[tuple[str, torch.Tensor]], tolerance: Tolerance
) -> dict:
    """Run both on every input; the worst difference, the bound it is held to, and which input was worst."""
    checks, worst_abs, worst_rel, reference_max = [], 0.0, 0.0, 0.0
    outputs = []
    for label, x in inputs:
        ref = logits_of(reference(x)).detach().float().cpu()
        try:
            out, error = logits_of(exported(x)).detach().float().cpu(), None
        # an export that cannot take this input (a batch size baked in, say) fails it
        except Exception as exc:
            out, error = None, reason(exc)
        outputs.append((label, x, ref, out, error))
        reference_max = max(reference_max, _finite_max(ref.abs()))
    bound = tolerance.bound(reference_max)
    first_failed = None
    for label, x, ref, out, error in outputs:
        abs_diff, rel_diff = diff(ref, out) if out is not None else (math.inf, math.inf)
        entry = {
            "input": label,
            "batch": int(x.shape[0]),
            "max_abs_diff": abs_diff,
            "passed": abs_diff <= bound,
        }
        if error:
            entry["error"] = error
        elif ref.shape != out.shape:
            entry["shape"] = {"eager": list(ref.shape), "exported": list(out.shape)}
        checks.append(entry)
        worst_abs, worst_rel = max(worst_abs, abs_diff), max(worst_rel, rel_diff)
        if not entry["passed"] and first_failed is None:
            first_failed = x
    return {
        "max_abs_diff": worst_abs,
        "max_rel_diff": worst_rel,
        "tolerance": bound,
        "tolerance_rule": tolerance.rule,
        "passed": first_failed is None,
        "checks": checks,
        "failing_input": first_failed,
    }


def finite(value: float) -> float | None:
    """JSON has no infinity: a difference that is not finite (a NaN, a shape mismatch) is reported as None."""
    return value if math.isfinite(value) else None


def finish(result: dict, batches: list[int], samples: int, random_samples: int = 0) -> dict:
    """The parity part of the job's result (JSON-safe: infinities become None)."""
    out = {k: v for k, v in result.items() if k != "failing_input"}
    for key in ("max_abs_diff", "max_rel_diff"):
        out[key] = finite(out[key])
    for entry in out["checks"]:
        entry["max_abs_diff"] = finite(entry["max_abs_diff"])
    out.setdefault("first_divergent_layer", None)
    out.update(batches=batches, samples=samples)
    if random_samples:
        out["random_samples"] = random_samples
    return out


# --- where the outputs part ---------------------------------------------------------------------------------


@torch.no_grad()
def module_outputs(
    model: nn.Module, x: torch.Tensor, keep: Callable[[str], bool] = lambda name: True
) -> list[tuple[str, int, torch.Tensor]]:
    """(module name, call index, output) for every submodule call whose output is a tensor, in the order the
    calls finish (a module finishes before the module that contains it)."""
    records: list[tuple[str, int, torch.Tensor]] = []
    calls: dict[str, int] = {}
    handles = []

    def hook(name):
        def record(module, args, output):
            if isinstance(output, torch.Tensor) and output.is_floating_point():
                k = calls.get(name, 0)
                calls[name] = k + 1
                # clone: in-place ops come next
                records.append((name, k, output.detach().float().cpu().clone()))

        return record

    for name, module in model.named_modules():
        if name and keep(name):
            handles.append(module.register_forward_hook(hook(name)))
    first = next(iter(model.parameters()), None)
    try:
        model(x.to(first.device) if first is not None else x)
    finally:
        for handle in handles:
            handle.remove()
    return records


def _first_divergence(
    records: list[tuple[str, int, torch.Tensor]],
    found: dict[tuple[str, int], torch.Tensor],
    tolerance_for: Callable[[str], Tolerance | None],
    display: Callable[[str], str],
) -> dict:
    layers, first = [], None
    for name, k, ref in records:
        tolerance = tolerance_for(name)
        out = found.get((name, k))
        if tolerance is None or out is None or tuple(out.shape) != tuple(ref.shape):
            continue
        abs_diff, _ = diff(ref, out)
        bound = tolerance.bound(_finite_max(ref.abs()))
        label = display(name) + (
            f" (call {k + 1})" if any(r[0] == name and r[1] > 0 for r in records) else ""
        )
        layers.append(
            {"name": label, "max_abs_diff": abs_diff if math.isfinite(abs_diff) else None, "tolerance": bound}
        )
        if first is None and not abs_diff <= bound:
            first = label
    if not layers:
        return {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": "no module output of the export could be matched to PyTorch's",
        }
    if first is None:
        return {
            "first_divergent_layer": None,
            "layers": layers,
            "first_divergent_layer_reason": "every module's output agrees; the difference arises in "
            "operations of the model's own forward(), outside its submodules",
        }
    return {
        "first_divergent_layer": first,
        "layers": layers[: layers.index(next(e for e in layers if e["name"] == first)) + 1],
    }


def _onnx_scopes(node, modules: set[str]) -> list[tuple[str, int | None]]:
    """The modules a node belongs to, outermost first, each with its call index where the name says (None
    where it does not). The torch.export-based exporter records full module paths in node metadata; the
    TorchScript-based one names nodes /<parent>/<child>/<Op>, where a child of a Sequential reads
    `<parent>.<i>` and a module's second call gets a suffix `_1`."""
    meta = {p.key: p.value for p in node.metadata_props}
    raw = meta.get("pkg.torch.onnx.name_scopes")
    if raw:
        try:
            paths = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            paths = []
        return [(p, None) for p in paths[1:-1] if p in modules]
    scopes: list[tuple[str, int | None]] = []
    path = ""
    for segment in node.name.split("/")[1:-1]:
        suffix = re.fullmatch(r"(.+?)_(\d+)", segment)
        options = [(segment, 0)] + ([(suffix[1], int(suffix[2]))] if suffix else [])
        for option, call in options:
            candidates = [f"{path}.{option}" if path else option]
            if "." in option:
                candidates.append(f"{path}.{option.split('.', 1)[1]}" if path else option.split(".", 1)[1])
            match = next((c for c in candidates if c in modules), None)
            if match is not None:
                path = match
                scopes.append((path, call))
                break
        else:
            break
    return scopes


def locate_onnx(
    onnx_path: Path,
    model: nn.Module,
    x: torch.Tensor,
    tolerance_for: Callable[[str], Tolerance | None],
    *,
    display: Callable[[str], str] = lambda name: name,
    optimize: bool = True,
) -> dict:
    """Run the ONNX model with every node output exposed and PyTorch with hooks; the first module (in the
    order PyTorch finishes them) whose ONNX output is off by more than its tolerance."""
    import onnx
    import onnxruntime as ort

    records = module_outputs(model, x, lambda name: tolerance_for(name) is not None)
    if not records:
        return {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": "the model has no submodules to compare",
        }
    proto = onnx.load(str(onnx_path))
    if proto.ByteSize() > 1_900_000_000:
        return {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": "the ONNX model is over 2 GB; its intermediate outputs cannot be "
            "exposed in memory",
        }
    modules = {name for name, _ in model.named_modules() if name}
    # groups[module] = runs of consecutive nodes inside it: one run per call, in call order.
    groups: dict[str, list[list[str]]] = {}
    last_node: dict[str, int] = {}
    last_call: dict[str, int | None] = {}
    for index, node in enumerate(proto.graph.node):
        for module, call in _onnx_scopes(node, modules):
            runs = groups.setdefault(module, [])
            new_run = (
                not runs
                or last_node.get(module) != index - 1
                or (call is not None and call != last_call.get(module))
            )
            if new_run:
                runs.append([])
            runs[-1].extend(o for o in node.output if o)
            last_node[module], last_call[module] = index, call
    wanted = {o for runs in groups.values() for run in runs for o in run}
    existing = {o.name for o in proto.graph.output}
    for name in sorted(wanted - existing):
        proto.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        proto.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    values = dict(
        zip(names, session.run(None, {session.get_inputs()[0].name: x.detach().float().cpu().numpy()}))
    )
    calls: dict[str, int] = {}
    for name, k, _ in records:
        calls[name] = max(calls.get(name, 0), k + 1)
    found: dict[tuple[str, int], torch.Tensor] = {}
    for name, k, ref in records:
        runs = groups.get(name, [])
        if not runs:
            continue
        if len(runs) == calls[name]:
            run = runs[k]
        elif k == calls[name] - 1:
            run = runs[-1]  # calls and runs do not pair up: only the last call's output is certain
        else:
            continue
        for output in reversed(run):
            value = values.get(output)
            if value is not None and value.dtype.kind == "f" and tuple(value.shape) == tuple(ref.shape):
                found[(name, k)] = torch.from_numpy(value)
                break
    return _first_divergence(records, found, tolerance_for, display)


def locate_program(program, model: nn.Module, x: torch.Tensor, tolerance: Tolerance) -> dict:
    """The same search for an ExportedProgram: torch.export.unflatten gives it back the model's module tree,
    whose forward hooks fire like the eager model's."""
    try:
        unflattened = torch.export.unflatten(program)
        exported = module_outputs(unflattened, x)
    except Exception as exc:  # unflatten refuses some programs (preserved calling conventions, say)
        return {
            "first_divergent_layer": None,
            "first_divergent_layer_reason": f"torch.export.unflatten cannot rebuild the module tree ({exc})"[
                :300
            ],
        }
    found: dict[tuple[str, int], torch.Tensor] = {}
    counts: dict[str, int] = {}
    # unflatten may name a module's second call `name@1`: count calls by base name
    for name, _, out in exported:
        base = re.sub(r"@\d+$", "", name)
        found[(base, counts.get(base, 0))] = out
        counts[base] = counts.get(base, 0) + 1
    records = module_outputs(model, x)
    return _first_divergence(records, found, lambda name: tolerance, lambda name: name)
