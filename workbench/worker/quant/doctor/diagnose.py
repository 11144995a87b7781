"""The doctor's diagnosis: one function per cause, reading what the ladder and the analysis hold (channel
ranges, histograms, the clipping/rounding split, sensitivity) and returning Findings with their fixes to try,
in order."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.fx as fx

from workbench.worker.quant.channels import channel_dim
from workbench.worker.quant.doctor import remedies
from workbench.worker.quant.doctor.findings import Finding
from workbench.worker.quant.doctor.trial import METHOD_OF_FIX, Change, set_point_method, set_weight_method
from workbench.worker.quant.graph import cle_pairs, find_structure, is_add, is_pass, is_quantizer, module_of

OUTLIER_RATIO = 8.0  # widest channel over the median channel: the others keep under 1/8 of the codes
CONCAT_RATIO = 4.0  # widest input of a concat or add over its narrowest
WEIGHT_RATIO = 3.0  # max |w| over the 99.9th percentile of |w|
CLIP_SHARE = 0.5  # the clipping part of a tensor's error above this, and its SQNR below CLIP_SQNR
CLIP_SQNR = 30.0
SHIFT_STEPS = 0.5  # a channel's mean error above half a quantization step is a shift, not noise
MAX_LIST = 256  # evidence lists stay this short
SMOOTH_ALPHAS = (0.5, 0.8)
MAX_SHIFTS = 4  # bias_shift findings: one fix (bias correction) serves them all

# Other checks (the per-module onnxruntime comparison) add themselves here: job -> [Finding(cause=...)]
BACKEND_CHECKS: list[Callable] = []


def _short(values, cap: int = MAX_LIST) -> list[float]:
    return [float(v) for v in list(values)[:cap]]


def _keep(layer: str, fix: str = "keep_float") -> Change:
    if fix == "bits_16":
        return Change(
            "bits_16",
            layer,
            spec=lambda s: s.mixed_precision.layers.append({"name": layer, "bits": 16}),
            text=f"kept {layer} at 16 bits",
        )
    return Change("keep_float", layer, floating={layer}, text=f"left {layer} in float")


def _graph(fix: str, layer: str, fn: Callable, label: str = "") -> Change:
    return Change(fix, layer, graph=fn, label=label or fix)


def outlier_channels(job) -> list[Finding]:
    """A layer output whose channel ranges lie far apart under one per-tensor scale."""
    found = []
    for entry in job.layers:
        ratio = entry.get("channel_range_ratio")
        if entry["tensor"] != "activation" or ratio is None or ratio < OUTLIER_RATIO:
            continue
        name = entry["name"]
        observed = job.sim.points[name].observed
        spans = (observed.channel_hi - observed.channel_lo).float()
        widest = [int(i) for i in torch.argsort(spans, descending=True)[:8]]
        candidates = [
            _graph("cle", name, lambda gm, f, n=name: remedies.cle_pair(gm, f, n)),
            _graph("cle_fanout", name, lambda gm, f, n=name: remedies.cle_fanout(gm, f, n)),
        ]
        act = observed.channel_hi.abs().maximum(observed.channel_lo.abs())
        for alpha in SMOOTH_ALPHAS:
            candidates.append(
                _graph(
                    "smoothquant",
                    name,
                    lambda gm, f, n=name, a=alpha, r=act: remedies.smoothquant(gm, f, n, r, a),
                    f"smoothquant(alpha={alpha:g})",
                )
            )
        candidates += [_keep(name, "bits_16"), _keep(name)]
        found.append(
            Finding(
                name,
                "activation",
                "outlier_channels",
                f"{name}'s output channels span ranges {ratio:.0f}x apart (widest {widest[0]}): one "
                "scale for all leaves the others few codes",
                {"ratio": float(ratio), "channels": widest, "ranges": _short(spans), "axis": 1},
                [name],
                candidates,
            )
        )
    for name, wq in job.sim.weights.items():  # per-tensor weights with channels far apart
        if wq.per_channel or wq.w_fp.dim() < 2:
            continue
        rows = wq.w_fp.movedim(wq.axis, 0).reshape(wq.w_fp.shape[wq.axis], -1).abs().amax(dim=1)
        median = float(rows.median())
        ratio = float(rows.max()) / median if median > 0 else 0.0
        if ratio >= OUTLIER_RATIO:
            found.append(
                Finding(
                    name,
                    "weight",
                    "outlier_channels",
                    f"{name}'s weight channels span ranges {ratio:.0f}x apart on one per-tensor scale",
                    {
                        "ratio": ratio,
                        "channels": [int(i) for i in torch.argsort(rows, descending=True)[:8]],
                        "ranges": _short(rows),
                        "axis": wq.axis,
                    },
                    [name],
                    [
                        Change(
                            "per_channel",
                            name,
                            weights=lambda s, n=name: set_weight_method(s, n, per_channel=True),
                            text=f"quantized {name}'s weights per channel",
                        ),
                        _graph("cle", name, lambda gm, f, n=name: remedies.cle_pair(gm, f, n)),
                    ],
                )
            )
    return found


def outliers_cle_fixed(job, found: list[Finding]) -> list[Finding]:
    """Outlier channels the ladder's CLE already equalised (their ranges before CLE lie far apart): with CLE
    on they are gone before the other checks look, so they are found on the ranges kept from before it. A
    layer another finding already names is left to that one. Their gain is measured by the run (run.py)."""
    pre = job.pre_cle or {}
    named = {(f.layer, f.cause) for f in found}
    cle_fixed = []
    for first, second in pre.get("pairs", []):
        ranges = pre["ranges"].get(first)
        if ranges is None or (first, "outlier_channels") in named:
            continue
        spans = (ranges[:, 1] - ranges[:, 0]).abs().float()
        median = float(spans.median())
        ratio = float(spans.max()) / median if median > 0 else 0.0
        if ratio < OUTLIER_RATIO:
            continue
        widest = [int(i) for i in torch.argsort(spans, descending=True)[:8]]
        named.add((first, "outlier_channels"))
        cle_fixed.append(
            Finding(
                first,
                "weight",
                "outlier_channels",
                f"{first}'s output channels spanned ranges {ratio:.0f}x apart (widest {widest[0]}) before "
                f"cross-layer equalisation; this run's CLE already equalised it with {second}",
                {"ratio": ratio, "channels": widest, "ranges": _short(spans), "axis": 0, "fixed_by": "cle"},
                [],
                [],
                fix="cle",
            )
        )
    return cle_fixed


def _point_behind(gm: fx.GraphModule, node) -> str | None:
    """The activation point whose quantizer `node`'s value comes from (through pass-through ops)."""
    current = node
    while isinstance(current, fx.Node):
        if is_quantizer(gm, current):
            return module_of(gm, current).point
        if not is_pass(gm, current) or not current.args:
            return None
        current = current.args[0]
    return None


def mixed_range_concat(job) -> list[Finding]:
    """A concatenation (or add) whose inputs' ranges lie far apart: one grid after it loses the narrow
    ones."""
    gm, sim, found = job.sim.gm, job.sim, []
    at = {p.node.name: name for name, p in sim.structure.points.items() if p.node is not None}
    for node in gm.graph.nodes:
        dim = remedies.cat_dim(node)
        if dim is not None and dim in (1, -3):
            op, inputs = "cat", list(node.args[0])
        elif is_add(node):
            op, inputs = "add", [a for a in node.args if isinstance(a, fx.Node)]
        else:
            continue
        points = [_point_behind(gm, value) for value in inputs]
        if None in points or len(points) < 2:
            continue
        rows = [
            {"name": p, "lo": float(sim.points[p].observed.lo), "hi": float(sim.points[p].observed.hi)}
            for p in points
        ]
        spans = [r["hi"] - r["lo"] for r in rows]
        if min(spans) <= 0 or max(spans) / min(spans) < CONCAT_RATIO:
            continue
        ratio = max(spans) / min(spans)
        lo, hi = min(r["lo"] for r in rows), max(r["hi"] for r in rows)
        lost = 1.0 - min(spans) / (hi - lo)
        point = at.get(node.name)  # the requantizing point after a concat (graph.py places it on the cat)
        candidates = []
        if op == "cat":
            candidates.append(
                _graph(
                    "concat_rescale",
                    node.name,
                    lambda g, f, n=node.name, s=spans: remedies.concat_rescale(g, f, n, s),
                )
            )
        if point is not None:
            candidates += [_keep(point, "bits_16"), _keep(point)]
        consumers = [n.target for n in node.users if n.op == "call_module" and n.target in sim.weights]
        groups = ([point] if point else []) + consumers
        found.append(
            Finding(
                node.name,
                "activation",
                "mixed_range_concat",
                f"the inputs of {node.name} span ranges {ratio:.0f}x apart: on one grid the narrowest "
                f"loses {lost:.0%} of its codes",
                {
                    "op": op,
                    "inputs": rows,
                    "range_ratio": ratio,
                    "lost_share": lost,
                    **({"point": point} if point else {}),
                },
                groups,
                candidates,
            )
        )
    return found


def weight_outliers(job) -> list[Finding]:
    """A weight tensor whose largest value sits far above the 99.9th percentile."""
    found = []
    for name, wq in job.sim.weights.items():
        values = wq.w_fp.detach().abs().reshape(-1).float()
        if values.numel() < 1000:
            continue
        top, p999 = float(values.max()), float(torch.quantile(values[: 2**24], 0.999))
        if p999 <= 0 or top / p999 < WEIGHT_RATIO:
            continue
        candidates = [
            Change(
                fix,
                name,
                weights=lambda s, n=name, m=METHOD_OF_FIX[fix]: set_weight_method(s, n, m),
                text=f"{name}'s weights: {METHOD_OF_FIX[fix]} range",
            )
            for fix in ("mse_range", "percentile_range")
            if METHOD_OF_FIX[fix] != wq.method
        ]
        if not wq.per_channel:
            candidates.append(
                Change(
                    "per_channel",
                    name,
                    weights=lambda s, n=name: set_weight_method(s, n, per_channel=True),
                    text=f"quantized {name}'s weights per channel",
                )
            )
        found.append(
            Finding(
                name,
                "weight",
                "weight_outliers",
                f"{name}'s largest weight is {top / p999:.1f}x its 99.9th percentile",
                {"max": top, "p999": p999, "ratio": top / p999},
                [name],
                candidates,
            )
        )
    return found


def _histogram(job, key: str) -> dict:
    counts, edges = job.arrays.get(f"{key}:counts"), job.arrays.get(f"{key}:edges")
    if counts is None or edges is None:
        return {"edges": [], "counts": []}
    counts, edges = np.asarray(counts[0], dtype=np.float64), np.asarray(edges[0], dtype=np.float64)
    step = max(1, int(np.ceil(len(counts) / (MAX_LIST - 1))))
    starts = np.arange(0, len(counts), step)
    merged = np.add.reduceat(counts, starts)
    bounds = np.append(starts, len(counts))  # one edge more than merged bins, the last edge once
    return {"edges": _short(edges[bounds].tolist(), MAX_LIST + 1), "counts": _short(merged)}


def clipping(job) -> list[Finding]:
    """A tensor whose error is mostly the values its range clips."""
    found = []
    for entry in job.layers:
        mse, clip = entry.get("mse") or 0.0, entry.get("clipping_mse") or 0.0
        sqnr = entry.get("sqnr_db")
        if mse <= 0 or clip / mse < CLIP_SHARE or (sqnr is not None and sqnr > CLIP_SQNR):
            continue
        name, tensor = entry["name"], entry["tensor"]
        methods = [
            f
            for f in ("minmax_range", "percentile_range", "mse_range")
            if METHOD_OF_FIX[f] != entry["range_method"]
        ]
        if tensor == "activation":
            candidates = [
                Change(
                    f,
                    name,
                    points=lambda s, n=name, m=METHOD_OF_FIX[f]: set_point_method(s, n, m),
                    text=f"{name}'s output: {METHOD_OF_FIX[f]} range",
                )
                for f in methods
            ]
        else:
            candidates = [
                Change(
                    f,
                    name,
                    weights=lambda s, n=name, m=METHOD_OF_FIX[f]: set_weight_method(s, n, m),
                    text=f"{name}'s weights: {METHOD_OF_FIX[f]} range",
                )
                for f in methods
            ]
        low, high = min(_listed(entry["min"])), max(_listed(entry["max"]))
        found.append(
            Finding(
                name,
                tensor,
                "clipping",
                f"{clip / mse:.0%} of {name}'s {tensor} error is clipping: its range cuts values off",
                {
                    "clip_share": clip / mse,
                    "round_share": (entry.get("rounding_mse") or 0.0) / mse,
                    "lo": low,
                    "hi": high,
                    "histogram": _histogram(job, f"{name}:{tensor}"),
                },
                [name] if name in job.sim.groups else [],
                candidates,
            )
        )
    return found


def _listed(value) -> list[float]:
    return value if isinstance(value, list) else [value]


@torch.no_grad()
def _channel_means(sim, batches, quantized: bool, check_stop) -> dict[str, torch.Tensor]:
    """Each layer output's per-channel mean over `batches`, with everything quantized or nothing."""
    from workbench.worker.models.build import call_model

    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, int] = {}
    dims = {
        name: channel_dim(sim.structure.layers[name].module) for name in sim.weights if name in sim.points
    }

    def tap(name, value):
        dim = dims.get(name)
        if dim is None or value.dim() < 2:
            return
        moved = value.movedim(dim, 0).reshape(value.shape[dim], -1).double()
        sums[name] = sums.get(name, 0) + moved.sum(dim=1)
        counts[name] = counts.get(name, 0) + moved.shape[1]

    with sim.keeping():
        sim.all() if quantized else sim.fp32()
        for state in sim.points.values():
            state.module.tap = tap
        try:
            for x, _ in batches:
                check_stop()
                call_model(sim.gm, x)
        finally:
            for state in sim.points.values():
                state.module.tap = None
    return {name: sums[name] / counts[name] for name in sums}


def bias_shift(job) -> list[Finding]:
    """A layer whose quantized output is shifted from the float one, channel by channel, beyond half a step.
    None where the recipe already corrects biases empirically: its fix would be the recipe itself."""
    if job.spec.bias_correction == "empirical":
        return []
    sim, check_stop = job.sim, job.ctx.check_stop
    batches = job.calibration.head(min(job.calibration.samples, 256))
    floats = _channel_means(sim, batches, False, check_stop)
    quants = _channel_means(sim, batches, True, check_stop)
    found = []
    for name in sim.weights:
        if len(found) >= MAX_SHIFTS:
            break
        if name not in floats or name not in quants or sim.points[name].module.qp is None:
            continue
        error = (quants[name] - floats[name]).float().cpu()
        step = float(sim.points[name].module.qp.scale)
        worst = int(error.abs().argmax())
        if abs(float(error[worst])) < SHIFT_STEPS * step:
            continue
        found.append(
            Finding(
                name,
                "activation",
                "bias_shift",
                f"{name}'s quantized output is shifted by {float(error[worst]):.3g} in channel {worst} "
                f"({abs(float(error[worst])) / step:.1f} quantization steps)",
                {"mean_error": _short(error), "worst_channel": worst, "worst": float(error[worst])},
                [name],
                [
                    Change(
                        "bias_correction",
                        name,
                        spec=_empirical,
                        text="corrected every layer's bias for its mean shift (empirical)",
                    )
                ],
            )
        )
    return found


def _empirical(spec) -> None:
    spec.bias_correction = "empirical"


def low_bits_sensitive(job, costs: dict[str, float], taken: set[str]) -> list[Finding]:
    """The group whose quantization costs the most (leaving it float gains the most), when no other cause
    explains it."""
    rows = job.sensitivity_rows
    if rows:
        higher = job.ladder.metric is None or job.ladder.metric["higher_is_better"]
        base = job.fp32["accuracy"]
        drops = {r["layer"]: (base - r["only_this"]) * (1 if higher else -1) for r in rows}
        ranked = sorted(drops, key=drops.get, reverse=True)
        evidence = {name: {"drop": float(drops[name])} for name in ranked}
    else:
        ranked = sorted(costs, key=costs.get, reverse=True)
        evidence = {name: {"sensitivity_db": float(costs[name])} for name in ranked}
    found = []
    for rank, name in enumerate(ranked[:3]):
        if name in taken or costs.get(name, 0.0) < 1.0:
            continue
        tensor = "weight" if name in job.sim.weights else "activation"
        found.append(
            Finding(
                name,
                tensor,
                "low_bits_sensitive",
                f"quantizing {name} costs the most: left float, the logits gain "
                f"{costs.get(name, 0.0):.1f} dB",
                {**evidence[name], "rank": rank},
                [name],
                [_keep(name, "bits_16"), _keep(name)],
            )
        )
    return found


def relu6_blocks_cle(job, gm: fx.GraphModule) -> list[Finding]:
    """Layer pairs CLE cannot rescale because a ReLU6 (or Hardtanh) joins them (in `gm`, the float graph)."""
    clipped: list = []
    cle_pairs(gm, find_structure(gm), clipped)
    found = []
    for first, second, op in clipped:
        found.append(
            Finding(
                first,
                "weight",
                "relu6_blocks_cle",
                f"{op} between {first} and {second} keeps cross-layer equalisation from rescaling them",
                {"pairs": [[first, second]], "op": op},
                [first],
                [
                    _graph(
                        "relu6_to_relu",
                        first,
                        lambda g, f, a=first, b=second: remedies.relu6_to_relu(g, f, a, b),
                    )
                ],
            )
        )
    return found


def diagnose(job, float_gm: fx.GraphModule) -> list[Finding]:
    """Every cause's findings on the ladder's quantized model (low_bits_sensitive is added once costs are
    known)."""
    found = outlier_channels(job) + mixed_range_concat(job) + weight_outliers(job) + clipping(job)
    found += bias_shift(job) + relu6_blocks_cle(job, float_gm)
    found += outliers_cle_fixed(job, found)
    for check in BACKEND_CHECKS:
        found += check(job)
    return found
