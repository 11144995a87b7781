"""The graph engine: capture a model's graph (torch.export, else its module hierarchy), count its parameters
and FLOPs, and write Model Explorer's graph JSON and node-data overlays into the run. Worker side; never Qt.

`engine.build_graph` (torch) is imported where it runs; `overlays` (plain JSON) is importable without torch.
"""

from workbench.worker.graph.overlays import Overlay, node_data, write_overlay

__all__ = ["Overlay", "node_data", "write_overlay"]
