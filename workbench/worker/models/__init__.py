"""The model side of the worker: a registry of networks (`mlp`, `cnn`, `torchvision:<arch>`,
`file:<path>:<name>`) and `build_model(ModelSpec)`, which adds pretrained weights, a new head, a checkpoint
and freezing.

Imports torch (torchvision only when a torchvision model is asked for); never Qt.
"""

from workbench.worker.models.build import build_model, check_forward, count_parameters, logits_of
from workbench.worker.models.registry import (
    ModelEntry,
    get_model,
    get_model_builder,
    list_models,
    register_model,
)
from workbench.worker.models.surgery import (
    find_head,
    freeze,
    frozen_norm_layers,
    load_checkpoint,
    replace_head,
)

__all__ = [
    "ModelEntry",
    "build_model",
    "check_forward",
    "count_parameters",
    "find_head",
    "freeze",
    "frozen_norm_layers",
    "get_model",
    "get_model_builder",
    "list_models",
    "load_checkpoint",
    "logits_of",
    "register_model",
    "replace_head",
]
