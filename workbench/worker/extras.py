"""The optional extras a model name needs (lightning, hf, timm): imported on demand, or a JobError that names
the pip command to install them. Worker side; never imports Qt.
"""

from __future__ import annotations

import importlib


def install_hint(extra: str) -> str:
    return f"pip install 'torch-workbench[{extra}]'"


def require_extra(module: str, extra: str, what: str):
    """`module` imported, or a JobError: "model.name: <what>, which is not installed here (...); install it
    with pip install 'torch-workbench[<extra>]'"."""
    from workbench.errors import JobError

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise JobError(
            f"model.name: {what}, which is not installed here ({exc}); install it with {install_hint(extra)}"
        ) from None
