"""`torchvision:<arch>`: any torchvision classification network, with its pretrained weights by name.

Weights are fetched (or found in torch hub's cache) and proven loadable with weights_only=True before
torchvision loads them. Worker side; never imports Qt.
"""

from __future__ import annotations

import difflib
import pickle

from torch import nn

from workbench.errors import JobError
from workbench.worker.models.registry import register_model


def classification_models() -> list[str]:
    """Names torchvision builds as image classifiers (its `torchvision.models` namespace, not detection
    etc.)."""
    import torchvision.models as tvm  # 3 s to import: only when such a model is asked for

    return tvm.list_models(module=tvm)


def detection_models() -> list[str]:
    """Names torchvision builds as object detectors (torchvision.models.detection)."""
    import torchvision.models as tvm

    return tvm.list_models(module=tvm.detection)


def is_detector(name: str) -> bool:
    """Whether a model name (`torchvision:<arch>`) names one of torchvision's detectors."""
    from workbench.worker.models.registry import find_model

    found = find_model(name)
    return found is not None and found[0].name == "torchvision" and found[1] in detection_models()


def build_detector(arch: str, *, num_classes: int, weights: str, log, args: dict) -> nn.Module:
    """A torchvision detector with `num_classes` (background included) and model.args passed to its builder;
    no backbone weights unless args name them (weights_backbone), so nothing downloads unasked."""
    import torchvision.models as tvm

    kwargs = {"weights_backbone": None, **args}
    if weights:
        resolved = _resolve_weights(arch, weights)
        _fetch(resolved)
        log(f"loading pretrained weights {resolved} for {arch}")
        kwargs["weights"] = resolved
    else:
        kwargs["num_classes"] = num_classes
    try:
        return tvm.get_model(arch, **kwargs)
    except (TypeError, ValueError) as exc:
        raise JobError(f"model.args: torchvision cannot build {arch} with {kwargs}: {exc}") from None


def _resolve_weights(arch: str, weights: str):
    import torchvision.models as tvm

    try:
        enum = tvm.get_model_weights(arch)
    except (ValueError, KeyError):
        raise JobError(
            f"model.weights: torchvision has no pretrained weights for {arch}; leave model.weights empty, "
            "or pass a trained state_dict as model.checkpoint"
        ) from None
    try:
        return enum.verify(weights)
    except (KeyError, ValueError):
        names = ["DEFAULT", *(w.name for w in enum)]
        raise JobError(
            f"model.weights: {weights!r} is not a weight set of {arch}; choose one of: {', '.join(names)}"
        ) from None


def _fetch(weights) -> None:
    """Download into torch hub's cache (or find it there) and check the file holds nothing but weights."""
    import torch.hub

    try:
        torch.hub.load_state_dict_from_url(weights.url, progress=False, check_hash=True, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise JobError(
            f"model.weights: the downloaded file for {weights} holds more than plain weights, so it was "
            f"not loaded ({exc})"
        ) from None
    except Exception as exc:  # URLError, HTTPError, socket timeouts, a damaged cache file, ...
        cache = f"{torch.hub.get_dir()}/checkpoints"
        raise JobError(
            f"model.weights: cannot get {weights} from {weights.url} ({type(exc).__name__}: {exc}). "
            f"Pretrained weights cannot be downloaded offline: put that file into {cache}, or pass a "
            "state_dict file as model.checkpoint instead (and leave model.weights empty)"
        ) from None


@register_model(
    "torchvision",
    family=True,
    usage="torchvision:<arch>",
    description="Any torchvision classification model, e.g. torchvision:resnet18, or detector, e.g. "
    "torchvision:fasterrcnn_mobilenet_v3_large_320_fpn.",
)
def build_torchvision(
    arch: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log, args: dict | None = None
) -> nn.Module:
    import torchvision.models as tvm

    if arch in detection_models():
        return build_detector(arch, num_classes=num_classes, weights=weights, log=log, args=args or {})
    if args:
        raise JobError(
            f"model.args: {', '.join(sorted(args))}: torchvision's classification models take no arguments "
            "here (a detector's builder does, e.g. min_size)"
        )
    known = classification_models()
    if arch not in known:
        close = difflib.get_close_matches(arch, known, n=5, cutoff=0.5)
        hint = (
            f"close names: {', '.join(close)}"
            if close
            else f"{len(known)} are known, e.g. {', '.join(known[:8])}"
        )
        raise JobError(f"model.name: torchvision has no classification model {arch!r}; {hint}")
    if not weights:
        try:
            return tvm.get_model(arch, num_classes=num_classes)
        except (TypeError, ValueError) as exc:
            raise JobError(
                f"model.name: torchvision cannot build {arch} with {num_classes} classes: {exc}"
            ) from None
    resolved = _resolve_weights(arch, weights)
    _fetch(resolved)
    log(f"loading pretrained weights {resolved} for {arch}")
    # Built with the weights' own class count; build_model swaps the head when replace_head asks for it.
    return tvm.get_model(arch, weights=resolved)
