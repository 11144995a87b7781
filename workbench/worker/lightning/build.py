"""`build_model` for a `lightning:<path.py>:<LightningModule>` name: the user's class, instantiated (it is an
nn.Module), with model.checkpoint and model.freeze applied, so graph, export and bench rebuild a Lightning run's
model from its spec and its plain state_dict. Worker side; never imports Qt.
"""

from __future__ import annotations

from torch import nn

from workbench.errors import JobError
from workbench.specs import ModelSpec
from workbench.worker.lightning.user_classes import load_module
from workbench.worker.models.surgery import freeze, load_checkpoint


def build_lightning_model(spec: ModelSpec, *, log=None, checkpoint: bool = True) -> nn.Module:
    """The module on the CPU, in train mode; its own forward is what export and bench call."""
    module = load_module(spec.name, log or (lambda text, level="info": None), args=spec.args)
    if spec.weights:
        raise JobError("model.weights: a lightning: model has no pretrained weights to download; pass a trained "
                       "state_dict as model.checkpoint instead")
    if spec.checkpoint and checkpoint:
        load_checkpoint(module, spec.checkpoint)
    if spec.freeze:
        freeze(module, spec.freeze)
    module.train()
    return module
