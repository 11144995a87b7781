"""Torch Workbench: a desktop workbench for PyTorch (GUI, worker and command line share this package).

Importing the package itself loads nothing heavy: no torch, no Qt.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("torch-workbench")  # pyproject.toml's [project] version, as installed
except PackageNotFoundError:  # a source tree that was never pip-installed
    __version__ = "0+unknown"
del PackageNotFoundError, version
