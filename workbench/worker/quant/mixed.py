"""Sensitivity and mixed precision: accuracy with only one group quantized and with all but one quantized, and
a proposal of the groups to keep at a higher bit width (8, then 16) so that accuracy stays within a target
drop, with the accuracy and model size of every choice on the way. For a task other than classification
"accuracy" is the run's monitor metric; where lower is better (MAE), its "drop" is its rise. Worker side;
never imports Qt.
"""

from __future__ import annotations

from collections.abc import Callable

from workbench.worker.quant.data import evaluate
from workbench.worker.quant.sim import QuantSim

LEVELS = (8, 16)


def sensitivity(
    sim: QuantSim,
    batches,
    *,
    objective=None,
    check_stop: Callable[[], None] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    measure: Callable[[object], float] | None = None,
) -> list[dict]:
    """One {layer, only_this, all_but_this} (accuracies, or `objective`'s monitor values) per group, in graph
    order. `measure` (model -> value) replaces the measure on `batches`: a LightningModule's own monitor."""
    measure = measure or _measure_on(batches, check_stop, objective)
    rows = []
    groups = sim.groups
    with sim.keeping():
        for k, group in enumerate(groups):
            if progress is not None:
                progress(k, len(groups), f"sensitivity of {group}")
            sim.set_groups([group])
            only = measure(sim)
            sim.set_groups([g for g in groups if g != group])
            rest = measure(sim)
            rows.append({"layer": group, "only_this": only, "all_but_this": rest})
    return rows


def _measure_on(batches, check_stop, objective) -> Callable[[object], float]:
    return lambda model: evaluate(model, batches, check_stop, objective)["accuracy"]


def size_bytes(sim: QuantSim) -> int:
    """Weights at their bit widths plus int32 biases."""
    return sum(wq.size_bytes() for wq in sim.weights.values())


def fp32_size_bytes(sim: QuantSim) -> int:
    return sum(
        wq.w_fp.numel() * 4 + (0 if wq.b_fp is None else wq.b_fp.numel() * 4) for wq in sim.weights.values()
    )


def group_bits(sim: QuantSim, group: str) -> int:
    """The lower of a group's weight and activation bit widths."""
    bits = []
    if group in sim.weights:
        bits.append(sim.weights[group].grid.bits)
    if group in sim.points:
        bits.append(sim.points[group].grid.bits)
    return min(bits)


def set_group_bits(sim: QuantSim, group: str, bits: int) -> None:
    """Requantize a group's weights (range method, nearest rounding, FP32 bias) and its activation at
    `bits`."""
    if group in sim.weights:
        wq = sim.weights[group]
        wq.set_range(wq.grid.with_bits(bits))
    if group in sim.points:
        state = sim.points[group]
        state.bits = bits
        sim.set_point_range(state, bits)


def snapshot(sim: QuantSim) -> dict:
    return {
        "weights": {
            name: (wq.grid, wq.qp, wq.codes, wq.b_q, wq.rounding) for name, wq in sim.weights.items()
        },
        "points": {name: (s.bits, s.grid, s.method, s.module.qp) for name, s in sim.points.items()},
    }


def restore(sim: QuantSim, saved: dict) -> None:
    for name, (grid, qp, codes, b_q, rounding) in saved["weights"].items():
        wq = sim.weights[name]
        wq.grid, wq.qp, wq.codes, wq.b_q, wq.rounding = grid, qp, codes, b_q, rounding
    for name, (bits, grid, method, qp) in saved["points"].items():
        state = sim.points[name]
        state.bits, state.grid, state.method, state.module.qp = bits, grid, method, qp
    sim.refresh()


def propose(
    sim: QuantSim,
    rows: list[dict],
    *,
    fp32_accuracy: float,
    quantized_accuracy: float,
    target_drop: float,
    batches,
    objective=None,
    check_stop: Callable[[], None] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    measure: Callable[[object], float] | None = None,
) -> dict:
    """Raise groups to 8 bits, then 16, most helpful first (by how much accuracy quantizing all but that group
    recovers, then by how much quantizing only it costs), until accuracy is within `target_drop` of FP32.

    With a lower-is-better monitor (`objective.higher_is_better` false, e.g. MAE) every comparison turns
    round:
    the goal is at most FP32 + target_drop (a rise in the metric's own units), and a group helps by lowering
    it. The search itself runs on `better` (the value, negated where lower is better), so there is one search.
    `measure` (model -> value) replaces the measure on `batches`; `objective` then only says the direction."""
    measure = measure or _measure_on(batches, check_stop, objective)
    sign = 1.0 if objective is None or objective.higher_is_better else -1.0

    def better(value: float) -> float:
        return sign * value

    goal = better(fp32_accuracy) - target_drop
    order = sorted(
        rows,
        key=lambda r: (-(better(r["all_but_this"]) - better(quantized_accuracy)), better(r["only_this"])),
    )
    chosen: dict[str, int] = {}
    points = [{"layers": [], "accuracy": quantized_accuracy, "size_bytes": size_bytes(sim)}]
    saved = snapshot(sim)
    best = points[0]
    steps = [(level, row["layer"]) for level in LEVELS for row in order]
    try:
        for k, (level, group) in enumerate(steps):
            if better(best["accuracy"]) >= goal:
                break
            if group_bits(sim, group) >= level:
                continue
            if progress is not None:
                progress(k, len(steps), f"mixed precision: {group} at {level} bits")
            set_group_bits(sim, group, level)
            chosen[group] = level
            sim.all()
            accuracy = measure(sim)
            point = {
                "layers": [{"name": name, "bits": bits} for name, bits in chosen.items()],
                "accuracy": accuracy,
                "size_bytes": size_bytes(sim),
            }
            points.append(point)
            if better(accuracy) > better(best["accuracy"]) or better(accuracy) >= goal:
                best = point
    finally:
        restore(sim, saved)
    met = better(best["accuracy"]) >= goal
    proposal = next((p for p in points if better(p["accuracy"]) >= goal), best)
    return {
        "target_drop": target_drop,
        "layers": proposal["layers"],
        "accuracy": proposal["accuracy"],
        "size_bytes": proposal["size_bytes"],
        "met": met,
        "fp32_accuracy": fp32_accuracy,
        "fp32_size_bytes": fp32_size_bytes(sim),
        "points": points,
    }
