"""`graph.build`: a model's graph in Model Explorer's format, with parameter and FLOP counts and overlays
(the engine is workbench.worker.graph). torch loads inside the task, not at import. Never imports Qt.
"""

from __future__ import annotations

from workbench.specs import GraphSpec
from workbench.worker.registry import register_task


@register_task("graph.build", kind="job", spec=GraphSpec)
def graph_build(spec: GraphSpec, ctx):
    """Capture a model's graph, count its parameters and FLOPs, write graph JSON and overlays into the run."""
    from workbench.worker.graph.engine import build_graph

    return build_graph(spec, ctx)
