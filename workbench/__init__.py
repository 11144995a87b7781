"""Torch Workbench: a desktop workbench for PyTorch (GUI, worker and command line share this package).

Importing the package itself loads nothing heavy: no torch, no Qt.
"""

__version__ = "0.1.0"
