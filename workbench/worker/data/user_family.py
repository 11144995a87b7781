"""The `file:<path.py>:<Name>` dataset family in the registry: the user's own torch Dataset, opened by
user.py.

Kept apart from user.py, which is imported only when a job opens such a dataset.
"""

from __future__ import annotations

from pathlib import Path

from workbench.specs import DataSpec
from workbench.worker.data.registry import register_dataset_family


@register_dataset_family(
    "file",
    usage="file:<path.py>:<Name>",
    user_code=True,
    description="Your own torch Dataset class, or a function returning one.",
)
def open_user_dataset(spec: DataSpec, workspace: Path, ctx=None):
    """Imported afresh for every job (the user's file may have changed), never cached."""
    from workbench.worker.data.user import load_user_dataset

    return load_user_dataset(spec, workspace, ctx)
