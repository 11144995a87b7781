"""The Graph tab: Model Explorer embedded (served by workbench.graph_server), a native module table beside it,
overlays with a legend, and exports. GUI side: never imports torch or model_explorer.
"""
