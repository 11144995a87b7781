"""`timm:<name>`: any model PyTorch Image Models (timm) can create, built untrained.

Nothing is downloaded: model.weights, when set, is a local state_dict file, loaded with weights_only=True. The
input channels come from the input shape; model.args go to timm.create_model (e.g. {img_size=32} for a vision
transformer). timm is an optional extra, imported only when a timm: model is built. Worker side; never imports
Qt.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from torch import nn

from workbench.errors import JobError
from workbench.results import dig
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.extras import install_hint, require_extra
from workbench.worker.models.registry import register_model
from workbench.worker.models.surgery import load_checkpoint, unwrap_state

INSTALL_HINT = install_hint("timm")
SET_HERE = {  # create_model arguments the workbench decides, and what to set instead
    "pretrained": "timm: models are built untrained; set model.weights to a local state_dict file",
    "num_classes": "set model.num_classes instead",
    "in_chans": "it is the first number of model.input_shape (or of the dataset's samples)",
    "checkpoint_path": "set model.weights (or model.checkpoint) instead",
    "pretrained_cfg_overlay": (
        "timm: models are built untrained; set model.weights to a local state_dict file"
    ),
}


def require_timm():
    """The `timm` package, or a JobError saying how to install it."""
    return require_extra("timm", "timm", "a timm: model is built by PyTorch Image Models (timm)")


def _check_name(timm, name: str) -> None:
    # is_model knows every architecture; a pretrained tag (resnet18.a1_in1k) is part of the name timm accepts.
    if timm.is_model(name.split(".", 1)[0]):
        return
    known = timm.list_models()
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    hint = (
        f"close names: {', '.join(close)}"
        if close
        else f"{len(known)} are known, e.g. {', '.join(known[:8])}"
    )
    raise JobError(f"model.name: timm has no model {name!r}; {hint}")


def _weights_classes(path: Path, classifier) -> int | None:
    """How many classes the head in the weights file has (None when the file has no such head)."""
    if not isinstance(classifier, str):
        return None
    weight = unwrap_state(load_state_dict(path)).get(f"{classifier}.weight")
    return int(weight.shape[0]) if weight is not None and weight.dim() >= 1 else None


def _create(timm, name: str, num_classes: int, input_shape: tuple[int, ...], args: dict) -> nn.Module:
    channels = {"in_chans": input_shape[0]} if len(input_shape) == 3 else {}
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes, **channels, **args)
    except TypeError as exc:
        raise JobError(f"model.args: timm cannot build {name} with these arguments: {exc}") from None
    except (RuntimeError, ValueError, AssertionError) as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        raise JobError(
            f"model.name: timm cannot build {name} with {num_classes} classes and input shape "
            f"{','.join(map(str, input_shape))}: {type(exc).__name__}: {first}"
        ) from None


@register_model(
    "timm",
    family=True,
    usage="timm:<name>",
    description="Any PyTorch Image Models (timm) model, e.g. timm:resnet18; untrained unless "
    "model.weights names a local state_dict file.",
)
def build_timm(
    name: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log, args: dict | None = None
) -> nn.Module:
    args = dict(args or {})
    for key, why in SET_HERE.items():
        if key in args:
            raise JobError(f"model.args: {key} is not passed to timm.create_model: {why}")
    timm = require_timm()
    _check_name(timm, name)
    model = _create(timm, name, num_classes, input_shape, args)
    if not weights:
        return model
    path = Path(weights).expanduser()
    if not path.is_file():
        raise JobError(
            f"model.weights: {weights!r} is not a file; a timm: model loads its weights from a local "
            "state_dict file (nothing is downloaded), or leave model.weights empty to start untrained"
        )
    classes = _weights_classes(path, dig(getattr(model, "pretrained_cfg", None), "classifier"))
    if classes is not None and classes != num_classes:
        # Built with the weights' own class count, as torchvision weights are; build_model swaps the head when
        # model.replace_head asks for it.
        model = _create(timm, name, classes, input_shape, args)
    log(f"loading weights for timm:{name} from {path}")
    load_checkpoint(model, path, what="model.weights")
    return model
