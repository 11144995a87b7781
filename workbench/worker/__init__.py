"""The worker process: the only place torch lives. It must never import Qt (PySide6, pyqtgraph)."""
