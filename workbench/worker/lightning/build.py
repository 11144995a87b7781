"""The `lightning:<path.py>:<LightningModule>` model family: the user's class, instantiated (it is an
nn.Module) with model.args. build_model applies model.checkpoint and model.freeze and nothing else, so graph,
export and bench rebuild a Lightning run's model from its spec and its plain state_dict. Never imports Qt.
"""

from __future__ import annotations

from torch import nn

from workbench.errors import JobError
from workbench.worker.lightning import PREFIX
from workbench.worker.lightning.user_classes import load_module
from workbench.worker.models.registry import LIGHTNING, register_model


@register_model(
    "lightning",
    family=True,
    usage="lightning:<path.py>:<LightningModule>",
    trainer=LIGHTNING,
    owns_outputs=True,
    user_code=True,
    description="A LightningModule from your own Python file, trained by Lightning's Trainer.",
)
def build_from_lightning_file(
    arg: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log, args: dict | None = None
) -> nn.Module:
    """The user's LightningModule called with model.args; its own class decides its outputs, so num_classes
    and input_shape are not passed."""
    module = load_module(PREFIX + arg, log, args=args)
    if weights:
        raise JobError(
            "model.weights: a lightning: model has no pretrained weights to download; pass a trained "
            "state_dict as model.checkpoint instead"
        )
    return module
