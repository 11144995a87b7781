"""Node overlays: per-module values (keyed by named_modules() names) painted onto a Model Explorer graph as
its own "node data" JSON. Any per-layer result (parameters, FLOPs, self-time, later quantization SQNR) goes
through `write_overlay` (`write_quant_overlays` for a quantize run's report). Plain JSON, no torch; worker
side, never Qt.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from workbench.runs import atomic_write_json

MODULE_ATTR = "module"  # the graph-node attribute that names the module a node belongs to
INDEX_NAME = "overlays.json"
OVERLAY_DIR = "overlays"
# Light to dark, so heavy layers stand out; reversed where a high value is good (SQNR).
PALETTE = ("#fff7bc", "#fee391", "#fec44f", "#fe9929", "#ec7014", "#cc4c02", "#8c2d04")
LOG_RANGE = 100.0  # a metric spanning more than this factor is coloured on a log scale
_METRIC = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class Overlay:
    metric: str
    label: str  # what the legend says, unit included: "FLOPs (M)"
    path: Path  # the Model Explorer node-data file
    minimum: float
    maximum: float
    scale: str  # "linear" or "log"
    colors: tuple[str, ...]
    nodes: int  # graph nodes painted
    info: dict = field(default_factory=dict)  # where the values came from: {"quant_run": id, "tensor": ...}

    def summary(self, relative_to: Path | None = None) -> dict:
        path = self.path.relative_to(relative_to) if relative_to is not None else self.path
        return {
            "label": self.label,
            "path": str(path),
            "nodes": self.nodes,
            "legend": {
                "min": self.minimum,
                "max": self.maximum,
                "scale": self.scale,
                "colors": list(self.colors),
            },
            **self.info,
        }


def _graph_nodes(graph: Mapping) -> list[dict]:
    graphs = graph.get("graphs") or [
        g for c in graph.get("graphCollections", []) for g in c.get("graphs", [])
    ]
    return list(graphs[0]["nodes"]) if graphs else []


def node_modules(graph: Mapping) -> list[tuple[str, str]]:
    """(node id, module name) of every graph node that names its module, in graph order."""
    found = []
    for node in _graph_nodes(graph):
        for attr in node.get("attrs", []):
            if attr.get("key") == MODULE_ATTR and isinstance(attr.get("value"), str):
                found.append((node["id"], attr["value"]))
                break
    return found


def _inside(module: str, parent: str) -> bool:
    return parent == "" or module == parent or module.startswith(parent + ".")


def _parent(module: str, names) -> str | None:
    """The nearest enclosing module among `names` ("" is the model), or None for the model itself."""
    while module:
        module = module.rpartition(".")[0]
        if module in names:
            return module
    return None


def _children(module: str, values: Mapping[str, float]) -> list[str]:
    return [m for m in values if m != module and _parent(m, values) == module]


def place(graph: Mapping, values: Mapping[str, float], *, additive: bool) -> dict[str, float]:
    """Node id -> value for per-module `values`.

    Additive values (parameters, FLOPs, time: a module's value includes its children's) are split into each
    module's own part, which goes on its first own node, so Model Explorer's layer sums add up to the module's
    value. Other values (SQNR of a layer's output) go on the module's last node, its output; deeper modules
    win.
    """
    pairs = node_modules(graph)
    placed: dict[str, float] = {}
    if additive:
        for module, value in values.items():
            own = float(value) - sum(float(values[c]) for c in _children(module, values))
            if abs(own) <= 1e-12 * max(1.0, abs(float(value))):
                continue
            node = next((n for n, m in pairs if m == module), None)
            if node is None:  # no op of its own (the work happened in functional code it ran): its last node
                node = next((n for n, m in reversed(pairs) if _inside(m, module)), None)
            if node is not None:
                placed[node] = placed.get(node, 0.0) + own
        return placed
    for module in sorted(values, key=lambda m: -m.count(".") - (m != "")):
        node = next((n for n, m in reversed(pairs) if _inside(m, module)), None)
        if node is not None and node not in placed:
            placed[node] = float(values[module])
    return placed


def _colour(t: float, colors: tuple[str, ...]) -> str:
    t = min(1.0, max(0.0, t))
    return colors[min(len(colors) - 1, int(round(t * (len(colors) - 1))))]


def node_data(
    graph: Mapping,
    values: Mapping[str, float],
    *,
    label: str,
    additive: bool,
    higher_is_better: bool = False,
    nodes: Mapping[str, float] | None = None,
) -> tuple[dict, dict]:
    """Model Explorer's GraphNodeData JSON for per-module `values` (and `nodes`: values for graph node ids
    directly, for what belongs to no module of its own, such as a concatenation), and its legend {min, max,
    scale, colors}."""
    placed = {**place(graph, values, additive=additive), **{n: float(v) for n, v in (nodes or {}).items()}}
    numbers = [v for v in placed.values() if math.isfinite(v)]
    low, high = (min(numbers), max(numbers)) if numbers else (0.0, 0.0)
    log = low >= 0 and high > 0 and high / max(low, high / 1e9, 1e-300) > LOG_RANGE
    results = {}
    for node, value in placed.items():
        if not math.isfinite(value):
            continue
        if high == low:
            t = 1.0
        elif log:  # four decades at most, so a zero or a tiny value does not squash the rest
            floor = max(low, high / 1e4)
            t = 0.0 if value <= floor else math.log(value / floor) / math.log(high / floor)
        else:
            t = (value - low) / (high - low)
        dark = 1 - t if higher_is_better else t  # darker is worse: costly, or (SQNR) low
        results[node] = {
            "value": value,
            "bgColor": _colour(dark, PALETTE),
            "textColor": "#ffffff" if dark > 0.6 else "#202124",
        }
    colors = tuple(reversed(PALETTE)) if higher_is_better else PALETTE  # the legend runs from min to max
    data = {"name": label, "results": results}
    legend = {"min": low, "max": high, "scale": "log" if log else "linear", "colors": list(colors)}
    return data, legend


def write_overlay(
    directory: str | Path,
    metric: str,
    values: Mapping[str, float],
    *,
    graph: Mapping | str | Path,
    label: str,
    additive: bool,
    higher_is_better: bool = False,
    info: Mapping[str, object] | None = None,
    nodes: Mapping[str, float] | None = None,
) -> Overlay:
    """Paint per-module `values` on `graph` (its JSON, or the path of graph.json) and write the result into
    `directory`: overlays/<metric>.json in Model Explorer's node-data format, and an entry of overlays.json
    (the index the Graph tab reads: label, legend and the per-module values themselves, plus `info`: where the
    values came from, such as the quantize run of an SQNR overlay)."""
    if not _METRIC.match(metric):
        raise ValueError(f"overlay metric {metric!r} must be letters, digits, '_', '.' or '-'")
    directory = Path(directory)
    if not isinstance(graph, Mapping):
        graph = json.loads(Path(graph).read_text(encoding="utf-8"))
    data, legend = node_data(
        graph, values, label=label, additive=additive, higher_is_better=higher_is_better, nodes=nodes
    )
    path = directory / OVERLAY_DIR / f"{metric}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, data)
    overlay = Overlay(
        metric,
        label,
        path,
        legend["min"],
        legend["max"],
        legend["scale"],
        tuple(legend["colors"]),
        len(data["results"]),
        dict(info or {}),
    )
    index_path = directory / INDEX_NAME
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        index = {}
    overlays = index.setdefault("overlays", {})
    overlays[metric] = {
        **overlay.summary(directory),
        "additive": additive,
        "higher_is_better": higher_is_better,
        "values": {name: float(v) for name, v in values.items()},
    }
    atomic_write_json(index_path, index)
    return overlay


# metric, the report's `tensor`, label: the two overlays of a quantize run's per-layer SQNR
QUANT_OVERLAYS = (
    ("quant_weight_sqnr", "weight", "Weight SQNR (dB)"),
    ("quant_activation_sqnr", "activation", "Activation SQNR (dB)"),
)


def quant_values(layers, tensor: str, names) -> dict[str, float]:
    """Module name -> sqnr_db of a quantize report's `layers` entries for `tensor` ("weight" or "activation"),
    keeping only names in `names` (the activation entry "input" is the model's input, not a module) and finite
    values (a layer whose SQNR could not be measured has none)."""
    values = {}
    for entry in layers or []:
        if not isinstance(entry, Mapping) or entry.get("tensor") != tensor:
            continue
        name, value = entry.get("name"), entry.get("sqnr_db")
        if not isinstance(name, str) or name not in names:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        values[name] = float(value)
    return values


# metric, label: a quantize run's doctor findings, each layer by the severity of its worst one
DOCTOR_OVERLAY = ("quant_doctor", "Doctor findings (severity)")


def doctor_values(doctor, names) -> dict[str, float]:
    """Module name -> the severity of its worst finding in a quantize report's `doctor` block, for names in
    `names`; a finding without a finite severity counts as 0 (it is still a finding, so its node is
    coloured)."""
    values: dict[str, float] = {}
    findings = doctor.get("findings") if isinstance(doctor, Mapping) else None
    for finding in findings or []:
        if not isinstance(finding, Mapping) or finding.get("layer") not in names:
            continue
        severity = finding.get("severity")
        ok = isinstance(severity, (int, float)) and not isinstance(severity, bool) and math.isfinite(severity)
        values[finding["layer"]] = max(values.get(finding["layer"], 0.0), float(severity) if ok else 0.0)
    return values


# The graph ops a concat or add finding names (its evidence's "op"), as torch.export's ATen nodes read.
FINDING_OPS = {
    "cat": ("aten.cat", "aten.concat", "aten.concatenate"),
    "add": ("aten.add", "aten.add_", "aten.add.Tensor"),
}
UPSTREAM_HOPS = 6  # how far back from an op's input to look for the module that produced it


def _producers(source: str, by_id: Mapping[str, dict], module_of: Mapping[str, str]) -> set[str]:
    """The modules that produced the value entering through node `source`: walking back through nodes of no
    module (a functional relu between the layer and the op) up to UPSTREAM_HOPS."""
    found, frontier = set(), [source]
    for _ in range(UPSTREAM_HOPS):
        following = []
        for node_id in frontier:
            module = module_of.get(node_id, "")
            if module:
                found.add(module)
                continue
            node = by_id.get(node_id) or {}
            following += [
                e.get("sourceNodeId") for e in node.get("incomingEdges", []) if e.get("sourceNodeId")
            ]
        frontier = following
        if not frontier:
            break
    return found


def finding_node(finding: Mapping, graph: Mapping) -> str | None:
    """The graph node of a finding about an op that is no module (a concatenation or an add the quantizer's
    trace names `cat`, `add_1`): the op of the finding's kind whose inputs come from the finding's input
    modules (`evidence.inputs`), the one with the finding's name first; else the node of that id; else None.
    """
    nodes = _graph_nodes(graph)
    by_id = {node["id"]: node for node in nodes}
    module_of = dict(node_modules(graph))
    evidence = finding.get("evidence") if isinstance(finding.get("evidence"), Mapping) else {}
    layer = str(finding.get("layer", ""))
    inputs = {str(i.get("name")) for i in evidence.get("inputs") or [] if isinstance(i, Mapping)}
    ops = FINDING_OPS.get(str(evidence.get("op", "")), FINDING_OPS["cat"] + FINDING_OPS["add"])
    matches = []
    for node in nodes:
        if node.get("label") not in ops or not inputs:
            continue
        sources = [e.get("sourceNodeId") for e in node.get("incomingEdges", []) if e.get("sourceNodeId")]
        made = set().union(*(_producers(s, by_id, module_of) for s in sources)) if sources else set()
        # an input named by a module inside it ("layer1.0.conv2" for "layer1.0") counts too
        if all(any(_inside(m, name) for m in made) for name in inputs):
            matches.append(node["id"])
    if matches:
        return layer if layer in matches else matches[0]
    return layer if layer in by_id else None


def doctor_nodes(doctor, graph: Mapping, names) -> dict[str, tuple[str, float]]:
    """Graph node id -> (finding layer, severity of its worst finding) for findings about no module in
    `names` (a concat, an add), placed on their op's node (finding_node)."""
    placed: dict[str, tuple[str, float]] = {}
    findings = doctor.get("findings") if isinstance(doctor, Mapping) else None
    for finding in findings or []:
        if not isinstance(finding, Mapping) or not finding.get("layer") or finding.get("layer") in names:
            continue
        node = finding_node(finding, graph)
        if node is None:
            continue
        severity = finding.get("severity")
        ok = isinstance(severity, (int, float)) and not isinstance(severity, bool) and math.isfinite(severity)
        value = float(severity) if ok else 0.0
        previous = placed.get(node, ("", -math.inf))[1]
        placed[node] = (str(finding["layer"]), max(previous, value))
    return placed


def write_quant_overlays(
    directory: str | Path, graph: Mapping, layers, *, quant_run: str, names=(), doctor=None
) -> dict[str, Overlay]:
    """The weight and activation SQNR overlays of a quantize run's report `layers` on `graph`: metric ->
    Overlay, leaving out a tensor with no value on this graph. Modules are those of `names` and the graph's
    own nodes; each index entry names `quant_run` (the run's id) and its `tensor`, so the Graph tab knows
    where it came from. With the report's `doctor` block, its findings too (DOCTOR_OVERLAY, darker is more
    severe, `doctor: true`)."""
    known = set(names) | {module for _, module in node_modules(graph)}
    written = {}
    for metric, tensor, label in QUANT_OVERLAYS:
        values = quant_values(layers, tensor, known)
        if values:
            written[metric] = write_overlay(
                directory,
                metric,
                values,
                graph=graph,
                label=label,
                additive=False,
                higher_is_better=True,
                info={"quant_run": quant_run, "tensor": tensor},
            )
    findings = doctor_values(doctor, known)
    on_nodes = doctor_nodes(doctor, graph, known)
    # beside the SQNR, never instead of it: a run whose layers match no module has none
    if (findings or on_nodes) and written:
        metric, label = DOCTOR_OVERLAY
        written[metric] = write_overlay(
            directory,
            metric,
            findings,
            graph=graph,
            label=label,
            additive=False,
            # node -> the finding's layer: a click on a concat's node opens its finding
            info={
                "quant_run": quant_run,
                "doctor": True,
                "node_findings": {node: layer for node, (layer, _) in on_nodes.items()},
            },
            nodes={node: value for node, (_, value) in on_nodes.items()},
        )
    return written
