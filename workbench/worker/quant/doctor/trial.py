"""Trying fixes: a Change applied to a float copy of the ladder's graph, quantized again by the pipeline's own
steps on the calibration batches already drawn, and measured by the job's `measure` (logit SQNR and the
monitor)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, fields

import torch
import torch.fx as fx

from workbench.worker.quant.graph import is_quantizer
from workbench.worker.quant.quantizer import qparams_from_range
from workbench.worker.quant.ranges import estimate

METHOD_OF_FIX = {"mse_range": "mse", "percentile_range": "percentile", "minmax_range": "minmax"}


@dataclass
class Change:
    """One fix for one layer, as the trial applies it: `graph` changes the float copy (returns what it did),
    `spec` the recipe's spec copy, `weights` the simulation before its weight ranges, `points` it after its
    activation ranges; `floating` groups stay float."""

    fix: str
    layer: str
    graph: Callable | None = None  # (gm, folded) -> sentence
    spec: Callable | None = None  # (QuantSpec) -> None
    weights: Callable | None = None  # (QuantSim) -> None
    points: Callable | None = None  # (QuantSim) -> None
    floating: set[str] = field(default_factory=set)
    text: str = ""  # what it changes, in words (a graph fix's own sentence replaces it)
    label: str = ""  # the fix with its parameter, e.g. smoothquant(alpha=0.5)

    @property
    def key(self) -> str:
        return f"{self.layer}:{self.fix}"


class Quiet:
    """The job's context with every event dropped: a trial sends no rungs, arrays or log lines; cancel
    works."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.run = getattr(ctx, "run", None)

    def check_stop(self) -> None:
        self._ctx.check_stop()

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


def float_graph(sim) -> fx.GraphModule:
    """A copy of the simulation's graph with its FP32 weights and biases and its quantizers taken out."""
    with sim.keeping():
        sim.fp32()
        gm = copy.deepcopy(sim.gm)
    for node in list(gm.graph.nodes):
        if is_quantizer(gm, node):
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            gm.delete_submodule(node.target)
    gm.graph.lint()
    gm.recompile()
    return gm


def set_point_method(sim, name: str, method: str) -> None:
    """Re-estimate activation point `name`'s range with `method` on what calibration saw."""
    state = sim.points[name]
    lo, hi = estimate(method, state.observed, state.grid, sim.act_spec.percentile)
    state.method = method
    state.module.qp = qparams_from_range(lo[0], hi[0], state.grid).to(sim.device)


def set_weight_method(sim, name: str, method: str | None = None, per_channel: bool | None = None) -> None:
    wq = sim.weights[name]
    if method is not None:
        wq.method = method
    if per_channel is not None:
        wq.per_channel = per_channel
    wq.ranges.clear()  # cached by (method, grid): a per-channel range is another estimate


def quantize(job, changes: list[Change], float_gm: fx.GraphModule) -> dict:
    """The ladder's recipe on a copy of `float_gm` with `changes`: {"sqnr_db", "monitor", "result", "sim",
    "changed": [sentences]}. AdaRound and QAT are left out (too slow to repeat per fix)."""
    from workbench.worker.quant.pipeline import Ladder, QuantJob, Stages, _logit_sqnr, plan, stage_names

    class TrialJob(QuantJob):
        def rung(self, step, model):  # the steps' own rungs are not measured: one measure at the end
            return {}

    gm, folded = copy.deepcopy(float_gm), copy.deepcopy(job.folded)
    spec = copy.deepcopy(job.spec)
    spec.adaround.enabled, spec.qat.epochs = False, 0
    changed = []
    for change in changes:
        if change.graph is not None:
            changed.append(change.graph(gm, folded))
        if change.spec is not None:
            change.spec(spec)
    quiet = Quiet(job.ctx)
    values = {f.name: getattr(job, f.name) for f in fields(job) if f.init}
    values.update(
        spec=spec,
        ctx=quiet,
        gm=gm,
        folded=folded,
        structure=None,
        modules={},
        sim=None,
        arrays={},
        stages=Stages(quiet, stage_names(spec, plan(spec))),
        ladder=Ladder(quiet, plan(spec), job.ladder.metric),
    )
    trial = TrialJob(**values)
    trial.find_layers()
    trial.build_sim()
    for change in changes:
        if change.weights is not None:
            change.weights(trial.sim)
    trial.set_weight_ranges()
    if spec.bias_correction != "none":
        trial.correct_biases()
    trial.set_activation_ranges()
    for change in changes:
        if change.points is not None:
            change.points(trial.sim)
    floating = set().union(*(c.floating for c in changes)) if changes else set()
    trial.sim.set_groups([g for g in trial.sim.groups if g not in floating])
    with torch.no_grad():
        result = job.measure(trial.sim)
    return {
        "sqnr_db": _logit_sqnr(job.fp32["logits"], result["logits"]),
        "monitor": float(result["accuracy"]),
        "result": result,
        "sim": trial.sim,
        "changed": changed,
    }
