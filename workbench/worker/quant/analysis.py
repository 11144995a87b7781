"""Per-quantizer analysis: the report's layer entries, the histogram of each tensor with the range every
estimator would choose (and its SQNR, clipping and rounding error), and each layer's output error both
accumulated through the quantized network and with only that layer quantized. Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.func import functional_call

from workbench.worker.models.build import call_model
from workbench.worker.quant import module_level
from workbench.worker.quant.channels import range_ratio
from workbench.worker.quant.measure import (
    ErrorSums,
    error_by_bin,
    histogram,
    histogram_edges,
    tensor_error,
)
from workbench.worker.quant.quantizer import QParams, fake_quant, qparams_from_range
from workbench.worker.quant.ranges import list_range_estimators
from workbench.worker.quant.sim import PointState, QuantSim, WeightQuant
from workbench.worker.quant.taps import tail_function

RANGE_COLUMNS = ["lo", "hi", "sqnr_db", "clipping_mse", "rounding_mse"]
ANALYSIS_BATCH = 32  # samples per forward pass while every activation of a batch is held for comparison


def _listed(t: torch.Tensor, per_channel: bool, kind=float):
    values = t.detach().cpu().reshape(-1).tolist()
    values = [kind(v) for v in values]
    return values if per_channel else values[0]


def _nan(value):
    return np.nan if value is None else value


def _entry(
    name: str, tensor: str, qp: QParams, method: str, per_channel: bool, metrics: dict, data_min, data_max
) -> dict:
    low, high = qp.extent()
    return {
        "name": name,
        "tensor": tensor,
        "bits": qp.grid.bits,
        "granularity": "per_channel" if per_channel else "per_tensor",
        "symmetric": qp.grid.symmetric,
        "range_method": method,
        "qmin": qp.grid.qmin,
        "qmax": qp.grid.qmax,
        "scale": _listed(qp.scale, per_channel),
        "zero_point": _listed(qp.zero_point, per_channel, int),
        "min": _listed(low, per_channel),
        "max": _listed(high, per_channel),
        "sqnr_db": metrics["sqnr_db"],
        "mse": metrics["mse"],
        "clipping_mse": metrics["clipping_mse"],
        "rounding_mse": metrics["rounding_mse"],
        "cosine": metrics["cosine"],
        "data_min": data_min,
        "data_max": data_max,
    }


def weight_entry(wq: WeightQuant) -> dict:
    metrics = tensor_error(wq.w_fp, wq.qp, wq.w_q)
    entry = _entry(
        wq.layer,
        "weight",
        wq.qp,
        wq.method,
        wq.per_channel,
        metrics,
        float(wq.w_fp.min()),
        float(wq.w_fp.max()),
    )
    entry.update(layer=wq.layer, rounding=wq.rounding, shape=list(wq.w_fp.shape))
    return entry


def activation_entry(sim: QuantSim, state: PointState) -> dict:
    obs = state.observed
    metrics = tensor_error(obs.values, state.module.qp.to("cpu"))
    point = sim.structure.points[state.name]
    entry = _entry(
        state.name, "activation", state.module.qp, state.method, False, metrics, float(obs.lo), float(obs.hi)
    )
    entry.update(
        layer=state.name,
        kind=point.kind,
        node=point.node.name if point.node is not None else state.name,
        samples=int(obs.values.numel()),
    )
    if obs.channel_lo is not None:  # a layer's output: how unevenly its channels spread over the one scale
        ratio, widest = range_ratio(obs.channel_lo, obs.channel_hi)
        entry.update(channel_range_ratio=ratio, outlier_channels=widest)
    return entry


def alternatives(
    tensor: str,
    observed,
    grid,
    percentile: float,
    chosen: QParams,
    quantized: torch.Tensor | None,
    values: torch.Tensor,
    known: dict | None = None,
    metrics: dict | None = None,
) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """Every applicable estimator's range on this tensor (the first row: the one in use, as quantized, whose
    `metrics` may be given) with its SQNR and error split: names, (E, 5) rows of RANGE_COLUMNS, and (E, C, 2)
    per-channel ranges or None."""
    per_channel = chosen.axis is not None
    names, rows, channels = ["chosen"], [], []
    low, high = chosen.extent()
    metrics = metrics or tensor_error(values, chosen, quantized)
    rows.append(
        [
            float(low.min()),
            float(high.max()),
            _nan(metrics["sqnr_db"]),
            metrics["clipping_mse"],
            metrics["rounding_mse"],
        ]
    )
    channels.append(torch.stack([low, high], dim=-1).reshape(-1, 2))
    for estimator in list_range_estimators(tensor):
        if not estimator.applies(observed):
            continue
        key = (estimator.name, grid)
        if known is not None and key in known:
            lo, hi = known[key]
        else:
            lo, hi = estimator.fn(observed, grid, percentile)
        lo, hi = lo.cpu(), hi.cpu()
        qp = qparams_from_range(lo if per_channel else lo[0], hi if per_channel else hi[0], grid, chosen.axis)
        metrics = tensor_error(values, qp)
        names.append(estimator.name)
        rows.append(
            [
                float(lo.min()),
                float(hi.max()),
                _nan(metrics["sqnr_db"]),
                metrics["clipping_mse"],
                metrics["rounding_mse"],
            ]
        )
        channels.append(torch.stack([lo.reshape(-1), hi.reshape(-1)], dim=-1))
    per_channel_ranges = torch.stack(channels).numpy().astype(np.float64) if per_channel else None
    return names, np.asarray(rows, dtype=np.float64), per_channel_ranges


def tensor_arrays(sim: QuantSim, entry: dict) -> dict[str, tuple[np.ndarray, dict]]:
    """The arrays of one quantizer, named <name>:<tensor>:<part>: counts, edges, ranges, error (and
    channel_ranges for per-channel weights), each with the metadata that says what it holds."""
    name, tensor = entry["name"], entry["tensor"]
    if tensor == "weight":
        wq = sim.weights[name]
        values, qp, quantized = wq.w_fp.detach().cpu(), wq.qp.to("cpu"), wq.w_q.detach().cpu()
        observed, grid, percentile, known = wq.observed(), wq.grid, wq.percentile, wq.ranges
        observed = type(observed)(observed.values.cpu(), observed.lo.cpu(), observed.hi.cpu())
    else:
        state = sim.points[name]
        values, qp, quantized = state.observed.values, state.module.qp.to("cpu"), None
        observed, grid, percentile, known = state.observed, state.grid, sim.act_spec.percentile, state.ranges
    names, ranges, channel_ranges = alternatives(
        tensor, observed, grid, percentile, qp, quantized, values, known, metrics=entry
    )
    low, high = qp.extent()
    edges = histogram_edges(values, [(float(low.min()), float(high.max()))])
    counts = histogram(values, edges)
    errors = error_by_bin(values, qp, edges, quantized)
    meta = {
        "layer": name,
        "tensor": tensor,
        "chosen": entry["range_method"],
        "sampled": tensor == "activation",
        "values": int(values.numel()),
        "rounding": entry.get("rounding", "nearest"),
    }
    key = f"{name}:{tensor}"
    arrays = {
        f"{key}:counts": (counts.numpy().astype(np.int64), meta),
        f"{key}:edges": (edges.numpy(), meta),
        f"{key}:ranges": (ranges, {**meta, "estimators": names, "columns": RANGE_COLUMNS}),
        f"{key}:error": (errors.numpy(), {**meta, "rows": ["clipping", "rounding"]}),
    }
    if channel_ranges is not None:
        arrays[f"{key}:channel_ranges"] = (
            channel_ranges,
            {**meta, "estimators": names, "columns": ["lo", "hi"]},
        )
    return arrays


@torch.no_grad()
def layer_errors(sim: QuantSim, batches, check_stop: Callable[[], None] | None = None) -> dict[str, dict]:
    """Per activation point: the error of its values in the quantized network against FP32 (accumulated), and
    with only its own group quantized (only_this), as {sqnr_db, mse, cosine}."""
    accumulated = {name: ErrorSums() for name in sim.points}
    only = {name: ErrorSums() for name in sim.points}
    tails = {name: tail_function(sim.gm, layer) for name, layer in sim.structure.layers.items()}
    inputs: dict[str, torch.Tensor] = {}
    reference: dict[str, torch.Tensor] = {}

    def fp_tap(name: str, value: torch.Tensor) -> None:
        reference[name] = value.clone()  # clone: an in-place add later in the graph would change it
        state = sim.points[name]
        wq = sim.weights.get(name)
        if wq is not None and name in inputs:
            params = {"weight": wq.w_q}
            if wq.b_fp is not None:
                params["bias"] = sim.bias_in_use(name)
            with module_level.layer_alone():
                value_q = tails[name](functional_call(wq.module, params, (inputs.pop(name),)))
        else:
            value_q = value
        only[name].add(value, fake_quant(value_q, state.module.qp))

    def quant_tap(name: str, value: torch.Tensor) -> None:
        accumulated[name].add(reference[name], value)

    floating = [False]  # layer inputs are kept only in the FP32 pass, for the only-this outputs

    def keep_input(name: str, value: torch.Tensor) -> None:
        if floating[0]:
            inputs[name] = value.clone()

    hooks = [
        wq.module.register_forward_pre_hook(lambda mod, args, name=name: keep_input(name, args[0]))
        for name, wq in sim.weights.items()
    ]
    try:
        with sim.keeping():
            for x, _ in batches:
                for start in range(0, _batch_size(x), ANALYSIS_BATCH):
                    if check_stop is not None:
                        check_stop()
                    part = _rows(x, start, start + ANALYSIS_BATCH)
                    floating[0] = True
                    sim.fp32()
                    _taps(sim, fp_tap)
                    call_model(sim, part)
                    floating[0] = False
                    sim.all()
                    _taps(sim, quant_tap)
                    call_model(sim, part)
                    reference.clear()
                    inputs.clear()
    finally:
        for hook in hooks:
            hook.remove()
        _taps(sim, None)
    return {
        name: {"accumulated": accumulated[name].result(), "only_this": only[name].result()}
        for name in sim.points
    }


def _batch_size(x) -> int:
    """The samples in a batch whose inputs are a tensor, or a tuple or dict of them (a model with several
    inputs)."""
    first = next(iter(x.values())) if isinstance(x, dict) else x[0] if isinstance(x, (tuple, list)) else x
    return int(first.shape[0])


def _rows(x, start: int, stop: int):
    """Samples start:stop of every input of a batch, keeping its tuple or dict form."""
    if isinstance(x, dict):
        return {key: value[start:stop] for key, value in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(value[start:stop] for value in x)
    return x[start:stop]


def _taps(sim: QuantSim, tap) -> None:
    for state in sim.points.values():
        state.module.tap = tap
