"""Model Explorer's graph JSON: from an ExportedProgram through Model Explorer's own adapter, or built from
the recorded module calls when nothing could be exported. Every op node gets a `module` attribute (its
named_modules() name) so overlays can find it. Worker side (model_explorer imports torch); never Qt.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from workbench.runs import atomic_write_text
from workbench.worker.graph.analyze import Analysis, clean_type
from workbench.worker.graph.overlays import MODULE_ATTR

GRAPH_ID = "graph"


def _adapter_output(convert, log=None) -> dict:
    """Run an adapter's convert(); it prints warnings to stdout, which must stay clean for `--json`."""
    from model_explorer.utils import convert_adapter_response

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        graphs = convert()
    if log is not None:
        for line in printed.getvalue().splitlines():
            if line.strip():
                log(f"model explorer: {line.strip()}", "debug")
    return graphs, convert_adapter_response


def module_of(fx_node) -> str | None:
    """The innermost module an exported op ran in ("" for the model's own code), from torch.export's
    metadata."""
    stack = fx_node.meta.get("nn_module_stack")
    if not stack:
        return None
    return list(stack.values())[-1][0]


def module_types(program) -> dict[str, str]:
    """named_modules() name -> qualified type name, from the metadata torch.export keeps on each op."""
    types: dict[str, str] = {}
    for node in program.graph.nodes:
        for name, kind in (node.meta.get("nn_module_stack") or {}).values():
            types.setdefault(
                name, clean_type(kind if isinstance(kind, str) else f"{kind.__module__}.{kind.__qualname__}")
            )
    return types


def graph_from_program(program, const_limit: int, log=None) -> dict:
    from model_explorer.graph_builder import KeyValue
    from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl

    adapter = PytorchExportedProgramAdapterImpl(program, {"const_element_count_limit": const_limit})
    graphs, to_json = _adapter_output(adapter.convert, log)
    modules = {node.name: module_of(node) for node in program.graph.nodes if node.op == "call_function"}
    for graph in graphs["graphs"]:
        for node in graph.nodes:
            node.namespace = clean_type(node.namespace)
            module = modules.get(node.id)
            if module is not None:
                node.attrs.append(KeyValue(key=MODULE_ATTR, value=module))
    return to_json(graphs)


def _shape_text(shape: list[int]) -> str:
    # the batch of one it was traced at, as the adapter writes shapes
    return f"float32{json.dumps([1, *shape])}"


def graph_from_modules(analysis: Analysis) -> dict:
    """A graph of leaf-module calls in Model Explorer's format: each call one node, in a namespace of its
    parent modules (as the adapter names them), edges from the call whose output each input was."""
    from model_explorer.graph_builder import Graph, GraphNode, IncomingEdge, KeyValue, MetadataItem
    from model_explorer.utils import convert_adapter_response

    types = {m.name: m.type for m in analysis.modules}

    def namespace(module: str) -> str:
        parts = module.split(".") if module else []
        segments = [types.get("", "model")]
        for depth in range(1, len(parts)):
            name = ".".join(parts[:depth])
            segments.append(f"{types.get(name, 'module')}_{parts[depth - 1]}")
        return "/".join(segments)

    def outputs(shapes: list[list[int]]) -> list:
        return [
            MetadataItem(id=str(i), attrs=[KeyValue(key="tensor_shape", value=_shape_text(s))])
            for i, s in enumerate(shapes)
        ]

    nodes = [
        GraphNode(
            id="input",
            label="input",
            namespace="inputs",
            outputsMetadata=outputs([list(analysis.input_shape)]),
        )
    ]
    for call in analysis.calls:
        node = GraphNode(
            id=call.node_id,
            label=call.type.rsplit(".", 1)[-1],
            namespace=namespace(call.module),
            attrs=[KeyValue(key=MODULE_ATTR, value=call.module), KeyValue(key="type", value=call.type)],
            outputsMetadata=outputs(call.output_shapes),
        )
        node.incomingEdges = [
            IncomingEdge(sourceNodeId=source, targetNodeInputId=str(i))
            for i, source in enumerate(call.sources)
        ]
        nodes.append(node)
    nodes.append(
        GraphNode(
            id="output",
            label="output",
            namespace="outputs",
            incomingEdges=[IncomingEdge(sourceNodeId=analysis.output_source)],
        )
    )
    return convert_adapter_response({"graphs": [Graph(id=GRAPH_ID, nodes=nodes)]})


def graph_from_onnx(path: Path, const_limit: int, log=None) -> dict:
    from model_explorer.graph_builder import KeyValue
    from model_explorer_onnx.main import ONNXAdapter

    graphs, to_json = _adapter_output(
        lambda: ONNXAdapter().convert(str(path), {"const_element_count_limit": const_limit}), log
    )
    # An ONNX node stands for a module here (onnx_stats rows are keyed by node name, the adapter's node id).
    for node in graphs["graphs"][0].nodes:
        node.attrs.append(KeyValue(key=MODULE_ATTR, value=node.id))
    return to_json(graphs)


def count_nodes(graph: dict) -> int:
    graphs = graph.get("graphs") or []
    return len(graphs[0]["nodes"]) if graphs else 0


# Pixels between ranks (Model Explorer's default 50). A network is mostly one tall chain, and the Graph tab is
# wider than high: at half the gap the chain fits the tab at about twice the zoom, where node labels can be
# read.
RANK_SEPARATION = 24


def write_graph(path: Path, graph: dict, label: str) -> None:
    """Write `graph` as one graph collection ({label, graphs}): the form Model Explorer's web app loads from a
    .json path (its JSON loader refuses an adapter's bare {graphs} response)."""
    for each in graph.get("graphs") or []:
        each["layoutConfigs"] = {**(each.get("layoutConfigs") or {}), "rankSep": RANK_SEPARATION}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"label": label, **graph}, separators=(",", ":")))
