"""Node overlays: per-module values (keyed by named_modules() names) painted onto a Model Explorer graph as its own
"node data" JSON. Any per-layer result (parameters, FLOPs, self-time, later quantization SQNR) goes through
`write_overlay`. Plain JSON, no torch; worker side, never Qt.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
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

    def summary(self, relative_to: Path | None = None) -> dict:
        path = self.path.relative_to(relative_to) if relative_to is not None else self.path
        return {"label": self.label, "path": str(path), "nodes": self.nodes,
                "legend": {"min": self.minimum, "max": self.maximum, "scale": self.scale, "colors": list(self.colors)}}


def _graph_nodes(graph: Mapping) -> list[dict]:
    graphs = graph.get("graphs") or [g for c in graph.get("graphCollections", []) for g in c.get("graphs", [])]
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
    value. Other values (SQNR of a layer's output) go on the module's last node, its output; deeper modules win.
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


def node_data(graph: Mapping, values: Mapping[str, float], *, label: str, additive: bool,
              higher_is_better: bool = False) -> tuple[dict, dict]:
    """Model Explorer's GraphNodeData JSON for per-module `values`, and its legend {min, max, scale, colors}."""
    placed = place(graph, values, additive=additive)
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
        results[node] = {"value": value, "bgColor": _colour(dark, PALETTE),
                         "textColor": "#ffffff" if dark > 0.6 else "#202124"}
    colors = tuple(reversed(PALETTE)) if higher_is_better else PALETTE  # the legend runs from min to max
    data = {"name": label, "results": results}
    legend = {"min": low, "max": high, "scale": "log" if log else "linear", "colors": list(colors)}
    return data, legend


def write_overlay(directory: str | Path, metric: str, values: Mapping[str, float], *, graph: Mapping | str | Path,
                  label: str, additive: bool, higher_is_better: bool = False) -> Overlay:
    """Paint per-module `values` on `graph` (its JSON, or the path of graph.json) and write the result into
    `directory`: overlays/<metric>.json in Model Explorer's node-data format, and an entry of overlays.json (the
    index the Graph tab reads: label, legend and the per-module values themselves)."""
    if not _METRIC.match(metric):
        raise ValueError(f"overlay metric {metric!r} must be letters, digits, '_', '.' or '-'")
    directory = Path(directory)
    if not isinstance(graph, Mapping):
        graph = json.loads(Path(graph).read_text(encoding="utf-8"))
    data, legend = node_data(graph, values, label=label, additive=additive, higher_is_better=higher_is_better)
    path = directory / OVERLAY_DIR / f"{metric}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, data)
    overlay = Overlay(metric, label, path, legend["min"], legend["max"], legend["scale"], tuple(legend["colors"]),
                      len(data["results"]))
    index_path = directory / INDEX_NAME
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        index = {}
    overlays = index.setdefault("overlays", {})
    overlays[metric] = {**overlay.summary(directory), "additive": additive, "higher_is_better": higher_is_better,
                        "values": {name: float(v) for name, v in values.items()}}
    atomic_write_json(index_path, index)
    return overlay
