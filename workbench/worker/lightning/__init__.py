"""LightningModules trained by Lightning's own Trainer inside the worker (`model.name =
"lightning:<path.py>:<Class>"`, optionally `dataset.name = "lightning:<path.py>:<DataModule>"`). Lightning is
imported lazily, only on this route, so the worker starts without it. Worker side; never imports Qt.
"""

from __future__ import annotations

from workbench.worker.extras import install_hint, require_extra

PREFIX = "lightning:"
INSTALL_HINT = install_hint("lightning")


def is_lightning_name(name: str) -> bool:
    """Whether a model or dataset name is a `lightning:<path.py>:<Class>` name."""
    return name.startswith(PREFIX)


def require_lightning():
    """The `lightning` package, or a JobError saying how to install it."""
    return require_extra("lightning", "lightning", "a lightning: model is trained by PyTorch Lightning")


__all__ = ["INSTALL_HINT", "PREFIX", "is_lightning_name", "require_lightning"]
