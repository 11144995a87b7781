"""LightningModules trained by Lightning's own Trainer inside the worker (`model.name = "lightning:<path.py>:<Class>"`,
optionally `dataset.name = "lightning:<path.py>:<DataModule>"`). Lightning is imported lazily, only on this route,
so the worker starts without it. Worker side; never imports Qt.
"""

from __future__ import annotations

PREFIX = "lightning:"
INSTALL_HINT = "pip install 'torch-workbench[lightning]'"


def is_lightning_name(name: str) -> bool:
    """Whether a model or dataset name is a `lightning:<path.py>:<Class>` name."""
    return name.startswith(PREFIX)


def require_lightning():
    """The `lightning` package, or a JobError saying how to install it."""
    from workbench.errors import JobError

    try:
        import lightning
    except ImportError as exc:
        raise JobError(f"model.name: a lightning: model is trained by PyTorch Lightning, which is not installed here "
                       f"({exc}); install it with {INSTALL_HINT}") from None
    return lightning


__all__ = ["INSTALL_HINT", "PREFIX", "is_lightning_name", "require_lightning"]
