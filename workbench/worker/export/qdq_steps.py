"""Step analysis of an ONNX QDQ model against the quantize run's simulation: every quantizer's integer codes
in onnxruntime beside the codes the simulation computes from the same input (teacher forcing), the output's
difference counted in quantization steps, and the output tolerance derived from the rounding flips measured.
Worker side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from workbench.worker.models import logits_of
from workbench.worker.quant.quantizer import dequantize, quantize

# A one-step difference is a rounding flip when the simulation's value before rounding lies within this much
# of a step from a half step: float32 kernels that sum in another order (or an int8 kernel that requantizes
# with its own float multiplier) move a value by far less. Averages of codes land on exact half steps often;
# those flip too.
TIE_WINDOW = 0.01
STEP_SLACK = 1e-3  # a difference of k steps, computed in float32, reads k (1 +- a few ulps)
TRIALS = 8  # seeded flip injections from which the output tolerance is derived
MARGIN = 2.0  # the tolerance is this many times the worst injected spread, plus one step
_QUANTIZER = re.compile(r"_quant_act_\d+")


@dataclass
class Exposed:
    """An onnxruntime session over the QDQ file with each activation QuantizeLinear's integer output
    exposed."""

    session: object
    codes: dict[str, str]  # quantizer module path -> the output name of its QuantizeLinear
    input_name: str
    output_name: str

    def run(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
        names = [self.output_name, *self.codes.values()]
        x = x.detach().cpu()
        feed = x.float() if x.is_floating_point() else x  # token ids stay integers, as the file takes them
        values = self.session.run(names, {self.input_name: feed.numpy()})
        return torch.from_numpy(values[0]), dict(zip(names[1:], values[1:]))


def _quantizer_of(node) -> str | None:
    """The quantizer module a QuantizeLinear node came from: its name scope (the torch.export-based exporter)
    or its node name /_quant_act_3/QuantizeLinear (the TorchScript-based one)."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            found = _QUANTIZER.findall(prop.value)
            if found:
                return found[-1]
    found = _QUANTIZER.findall(node.name)
    return found[-1] if found else None


def expose(onnx_path: Path, *, optimize: bool) -> Exposed:
    """A session over the file with every activation quantizer's codes as extra outputs. onnxruntime's QDQ
    fusions still apply (an exposed QuantizeLinear output becomes the fused integer kernel's output)."""
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(onnx_path))
    codes: dict[str, str] = {}
    for node in proto.graph.node:
        if node.op_type == "QuantizeLinear":
            path = _quantizer_of(node)
            if path is not None and path not in codes:
                codes[path] = node.output[0]
    existing = {o.name for o in proto.graph.output}
    for name in codes.values():
        if name not in existing:
            proto.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    session = ort.InferenceSession(
        proto.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return Exposed(session, codes, session.get_inputs()[0].name, proto.graph.output[0].name)


def _codes(value: torch.Tensor, qp) -> torch.Tensor:
    """The integer codes of a value on qp's grid (the simulation's outputs are on it: exact)."""
    return quantize(value, qp).to(torch.int64)


def _dequantized(codes: torch.Tensor, qp, like: torch.Tensor) -> torch.Tensor:
    return dequantize(codes.to(torch.float32), qp).to(like.dtype)


@torch.no_grad()
def forced(
    sim,
    exposed: Exposed,
    x: torch.Tensor,
    simulated: Callable[[torch.Tensor], torch.Tensor] | None = None,
    worst: dict[str, int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, list[int]]]:
    """Run onnxruntime once, then the simulation with each quantizer's output replaced by onnxruntime's codes,
    so that every quantizer sees the input onnxruntime's saw: (onnxruntime's output, the simulation's free
    output, {point: [values equal, one step off at a rounding tie, one step off elsewhere, two or more off]}).
    `simulated(x)`, where given, is the free output already computed (the parity check's, shared); `worst`,
    where given, gets each point's largest code difference in steps (kept at its highest over calls)."""
    out, values = exposed.run(x)
    free = (simulated(x) if simulated is not None else logits_of(sim(x))).detach().float().cpu()
    modules = _quantizers_by_name(sim)
    counts: dict[str, list[int]] = {}
    handles = []

    def hook(path: str):
        module = modules[path]

        def replace(_, args, output):
            qp = module.qp
            theirs = values.get(exposed.codes[path])
            if (
                qp is None
                or not module.enabled
                or theirs is None
                or tuple(theirs.shape) != tuple(output.shape)
            ):
                return None
            theirs = torch.from_numpy(theirs.astype(np.int64)).to(output.device)
            gap = (_codes(output, qp) - theirs).abs()
            # How far the value before rounding lay from a half step, in steps (QuantizeLinear divides by s).
            before = args[0].detach().float() / qp.scale
            near_tie = ((before - torch.floor(before)) - 0.5).abs() <= TIE_WINDOW
            one = gap == 1
            tally = counts.setdefault(module.point, [0, 0, 0, 0])
            tally[0] += int((gap == 0).sum())
            tally[1] += int((one & near_tie).sum())
            tally[2] += int((one & ~near_tie).sum())
            tally[3] += int((gap >= 2).sum())
            if worst is not None and gap.numel():
                worst[module.point] = max(worst.get(module.point, 0), int(gap.max()))
            return _dequantized(theirs, qp, output)

        return replace

    for path in exposed.codes:
        if path in modules:
            handles.append(modules[path].register_forward_hook(hook(path)))
    try:
        sim(x)
    finally:
        for handle in handles:
            handle.remove()
    return out.float(), free, counts


def _flipper(module, rate: float, generator: torch.Generator):
    """A forward hook that moves a quantizer's codes one step up or down at `rate`, within its grid."""

    def flip(_, __, output):
        qp = module.qp
        if rate <= 0 or qp is None or not module.enabled:
            return None
        # Each value flips on its own draw; flips are rare (about 1 in 10^5), so draw how many there are and
        # where, and requantize only those values rather than drawing for and re-rounding every value.
        count = int(
            torch.binomial(
                torch.tensor(float(output.numel())), torch.tensor(float(rate)), generator=generator
            )
        )
        if count == 0:
            return None
        where = torch.randint(0, output.numel(), (count,), generator=generator).to(output.device)
        sign = (torch.randint(0, 2, (count,), generator=generator) * 2 - 1).to(output.device)
        flat = output.reshape(-1).clone()
        codes = _codes(flat[where], qp) + sign
        flat[where] = _dequantized(codes.clamp(qp.grid.qmin, qp.grid.qmax), qp, flat)
        return flat.view_as(output)

    return flip


@torch.no_grad()
def injected_spread(
    sim,
    x: torch.Tensor,
    rates: dict[str, float],
    step: float,
    *,
    trials: int = TRIALS,
    seed: int = 0,
    baseline: torch.Tensor | None = None,
) -> list[float]:
    """The output's largest move, in steps, when each quantizer's codes flip by one step (up or down) at its
    measured rate: what rounding flips alone do to the output once the layers after them have carried them
    along. The trials run as one batch of `trials` copies of `x` (each value flips on its own draw, so a copy
    is a trial): one forward pass of the simulation, not `trials` of them. `baseline` is the simulation's
    output for `x`, where known."""
    if baseline is None:
        baseline = logits_of(sim(x))
    baseline = baseline.detach().float().cpu()
    modules = list(_quantizers_by_name(sim).values())
    if isinstance(x, torch.Tensor) and x.dim() and trials > 1:
        generator = torch.Generator().manual_seed(seed)
        handles = [m.register_forward_hook(_flipper(m, rates.get(m.point, 0.0), generator)) for m in modules]
        try:
            moved = logits_of(sim(x.repeat(trials, *[1] * (x.dim() - 1)))).detach().float().cpu()
        finally:
            for handle in handles:
                handle.remove()
        if baseline.dim() and moved.shape == (trials * baseline.shape[0], *baseline.shape[1:]):
            moved = moved.reshape(trials, *baseline.shape)
            return [float((m - baseline).abs().max()) / step if step > 0 else 0.0 for m in moved]
    spreads = []  # an output not batched along its first dimension, or several inputs: one trial at a time
    for trial in range(trials):
        generator = torch.Generator().manual_seed(seed + trial)
        handles = [m.register_forward_hook(_flipper(m, rates.get(m.point, 0.0), generator)) for m in modules]
        try:
            moved = logits_of(sim(x)).detach().float().cpu()
        finally:
            for handle in handles:
                handle.remove()
        spreads.append(float((moved - baseline).abs().max()) / step if step > 0 else 0.0)
    return spreads


def output_steps(reference: torch.Tensor, exported: torch.Tensor, step: float) -> dict[str, int]:
    """How many output values differ by 0, 1, 2 and 3 or more steps of the output quantizer."""
    gap = torch.round((exported.float() - reference.float()).abs() / step).to(torch.int64)
    return {
        "0": int((gap == 0).sum()),
        "1": int((gap == 1).sum()),
        "2": int((gap == 2).sum()),
        "3+": int((gap >= 3).sum()),
    }


@dataclass
class Measured:
    """One onnxruntime configuration's codes against the simulation's, quantizer by quantizer, over the
    inputs."""

    optimize: bool
    exposed: Exposed
    per_point: dict[str, list[int]]  # point: [equal, one step at a tie, one step elsewhere, two or more]
    # (input, onnxruntime's output, the simulation's)
    outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    worst: dict[str, int] = field(default_factory=dict)  # point: its largest code difference, in steps

    @property
    def rates(self) -> dict[str, float]:
        # One flip more than seen at each quantizer: one that flipped nowhere on these inputs may flip on
        # others.
        return {p: (t[1] + t[2] + 1) / max(sum(t), 1) for p, t in self.per_point.items()}


def measure(
    sim,
    onnx_path: Path,
    inputs: list[tuple[str, torch.Tensor]],
    *,
    optimize: bool,
    simulated: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> Measured:
    """Run one configuration of onnxruntime over the inputs, each quantizer of the simulation fed what
    onnxruntime's saw. `simulated(x)` gives the simulation's output for an input (a cache the parity check
    shares)."""
    exposed = expose(onnx_path, optimize=optimize)
    per_point: dict[str, list[int]] = {}
    worst: dict[str, int] = {}
    outputs = []
    for _, x in inputs:
        out, free, counts = forced(sim, exposed, x, simulated, worst)
        outputs.append((x, out, free))
        for point, tally in counts.items():
            total = per_point.setdefault(point, [0, 0, 0, 0])
            for i in range(4):
                total[i] += tally[i]
    return Measured(optimize, exposed, per_point, outputs, worst)


def spread_of(sim, measured: list[Measured], step: float) -> float:
    """The output's largest move under injected rounding flips, in steps, injected once for every
    configuration measured: at each quantizer the highest rate any of them showed (a tolerance no tighter than
    each one's own), on the first input whose outputs the simulation's match in shape."""
    rates: dict[str, float] = {}
    for m in measured:
        for point, rate in m.rates.items():
            rates[point] = max(rates.get(point, 0.0), rate)
    for x, out, free in measured[0].outputs:
        # the first (largest) random input: the injection runs TRIALS copies of it
        if out.shape == free.shape:
            return max(injected_spread(sim, x, rates, step, baseline=free), default=0.0)
    return 0.0


def conclude(sim, measured: Measured, step: float, spread: float) -> dict:
    """The step analysis of one configuration: per quantizer and in all, how many codes differ from the
    simulation's (same input), the output's step histogram against the free simulation, the tolerance that the
    injected flips explain (`spread`), and whether the file computes what the simulation does."""
    per_point = measured.per_point
    values = sum(sum(t) for t in per_point.values())
    ties = sum(t[1] for t in per_point.values())
    elsewhere = sum(t[2] for t in per_point.values())
    more = sum(t[3] for t in per_point.values())
    order = {name: i for i, name in enumerate(sim.points)}
    off_points = sorted(
        (p for p, t in per_point.items() if t[2] or t[3]),
        # in graph order: the first is where it starts
        key=lambda p: order.get(p, len(order)),
    )
    histogram = {"0": 0, "1": 0, "2": 0, "3+": 0}
    worst_steps = 0.0
    for _, out, free in measured.outputs:
        if out.shape != free.shape:
            worst_steps = math.inf
            continue
        for key, count in output_steps(free, out, step).items():
            histogram[key] += count
        worst_steps = max(worst_steps, float((out - free).abs().max()) / step)
    tolerance_steps = math.ceil(MARGIN * spread) + 1
    local_ok = not off_points and bool(per_point)
    return {
        "optimized": measured.optimize,
        "quantizers": {
            "checked": len(per_point),
            "not_found": sorted(_missing(sim, measured.exposed)),
            "values": values,
            "one_step": ties + elsewhere,
            "one_step_at_a_tie": ties,
            "one_step_elsewhere": elsewhere,
            "two_or_more": more,
            "off": [
                {
                    "point": p,
                    "values": sum(per_point[p]),
                    "one_step_elsewhere": per_point[p][2],
                    "two_or_more": per_point[p][3],
                }
                for p in off_points[:10]
            ],
        },
        "output_steps": histogram,
        "max_steps": round(worst_steps, 4) if math.isfinite(worst_steps) else None,
        "injected_spread_steps": round(spread, 3),
        "tolerance_steps": tolerance_steps,
        "tolerance": tolerance_steps * step,
        "local_passed": local_ok,
        "passed": local_ok and worst_steps <= tolerance_steps + STEP_SLACK,
    }


def analyse(
    sim,
    onnx_path: Path,
    inputs: list[tuple[str, torch.Tensor]],
    step: float,
    *,
    optimize: bool,
    simulated: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> dict:
    """The step analysis of one onnxruntime configuration on its own (measure, its own injection,
    conclude)."""
    measured = measure(sim, onnx_path, inputs, optimize=optimize, simulated=simulated)
    return conclude(sim, measured, step, spread_of(sim, [measured], step))


def _missing(sim, exposed: Exposed) -> list[str]:
    """The quantizers the simulation applies that have no QuantizeLinear in the file (kept float, or
    dropped)."""
    return [
        m.point
        for name, m in _quantizers_by_name(sim).items()
        if m.enabled and m.qp is not None and name not in exposed.codes
    ]


def _quantizers_by_name(sim) -> dict:
    """{_quant_act_<k>: the quantizer}: a traced simulation holds them at its top level, a module-level one
    (quant/module_level.py) inside the layers whose outputs they quantize; the ONNX nodes carry the last
    name."""
    return {
        path.rpartition(".")[2]: m for path, m in sim.gm.named_modules() if getattr(m, "is_quantizer", False)
    }


def explain(analysis: dict, step: float) -> str:
    """One paragraph: what differs, by how much, and why."""
    q = analysis["quantizers"]
    where = (
        "with onnxruntime's graph optimizations (its fused int8 kernels, as deployed)"
        if analysis["optimized"]
        else (
            "as written (onnxruntime's graph optimizations off: QuantizeLinear, float kernels, "
            "DequantizeLinear)"
        )
    )
    if not q["checked"]:
        return f"{where}: no quantizer of the file could be matched to the simulation's"
    text = (
        f"{where}: fed the same input, {q['checked']} quantizers gave the simulation's codes on "
        f"{q['values'] - q['one_step'] - q['two_or_more']:,} of {q['values']:,} values; "
        f"{q['one_step_at_a_tie']:,} were one step off where the value lay within {TIE_WINDOW:g} step of a "
        f"half step (a rounding flip), {q['one_step_elsewhere']:,} one step off elsewhere and "
        f"{q['two_or_more']:,} two or more. "
    )
    if q["off"]:
        first = q["off"][0]
        return text + (
            f"That is not rounding: {first['point']} (the first such quantizer) differs on "
            f"{first['one_step_elsewhere'] + first['two_or_more']:,} of {first['values']:,} values away "
            "from a half step, so the file does not compute what the simulation does there"
        )
    max_steps = analysis["max_steps"]
    if max_steps is None:
        return text + "The output's shape differs from the simulation's"
    if max_steps < 0.5:
        return text + "The output equals the simulation's"
    return text + (
        f"One-step flips come from float sums taken in another order that land a value on the other side "
        f"of a half step; the layers after them carry each flip along, which moved the output by up to "
        f"{max_steps:.0f} step(s) ({max_steps * step:.3g}). Injecting "
        f"flips at the measured rates (and one more per quantizer) into the simulation moved it by up to "
        f"{analysis['injected_spread_steps']:.1f} step(s), so the tolerance is "
        f"{MARGIN:g} x that + 1 = {analysis['tolerance_steps']} step(s)"
    )
