"""Which task a dataset's samples are for, from one sample (task=auto), and whether a sample's target can
serve a task the spec names. Reads host values of one sample only; worker side, never imports Qt.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

from workbench.errors import JobError

TASKS = ("classification", "multilabel", "regression", "segmentation", "detection")


def is_detection_target(target) -> bool:
    """torchvision's detection target: a dict with "boxes" and "labels"."""
    return isinstance(target, dict) and "boxes" in target and "labels" in target


def _first_tensor(value):
    """The first array-like (anything with a shape) in a tensor, a tuple/list or a dict of them; None if
    none."""
    if hasattr(value, "shape") and not isinstance(value, (str, bytes)):
        return value
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _as_tensor(target) -> torch.Tensor | None:
    """The target as a host tensor (python and numpy numbers, numpy arrays, lists of numbers); None if it is
    none of those."""
    if isinstance(target, torch.Tensor):
        return target.detach().cpu()
    try:
        if isinstance(target, (bool, np.bool_)):
            return torch.tensor(bool(target))
        if isinstance(target, (numbers.Integral, np.integer)):
            return torch.tensor(int(target), dtype=torch.int64)
        if isinstance(target, (numbers.Real, np.floating)):
            return torch.tensor(float(target), dtype=torch.float32)
        if isinstance(target, np.ndarray):
            return torch.from_numpy(np.ascontiguousarray(target))
        if isinstance(target, (list, tuple)):
            return torch.as_tensor(target)
    except (TypeError, ValueError, RuntimeError):
        return None
    return None


def _kind(t: torch.Tensor) -> str:
    if t.dtype == torch.bool:
        return "bool"
    if t.dtype.is_floating_point:
        return "float"
    if t.dtype.is_complex:
        return "complex"
    return "int"


def describe_target(target) -> str:
    """How a message names a target: "an int64 scalar", "a float32 vector of 3 values", "a list of 3
    strings"."""
    t = _as_tensor(target)
    if t is None:
        size = f" of {len(target)}" if isinstance(target, (list, tuple, dict)) else ""
        return f"a {type(target).__name__}{size}"
    dtype = str(t.dtype).removeprefix("torch.")
    article = "an" if dtype[0] in "aeiou" else "a"
    if t.dim() == 0:
        return f"{article} {dtype} scalar"
    if t.dim() == 1:
        return f"{article} {dtype} vector of {t.shape[0]} value{'s' if t.shape[0] != 1 else ''}"
    return f"{article} {dtype} tensor of shape ({', '.join(map(str, t.shape))})"


def _binary(t: torch.Tensor) -> bool:
    if t.dtype == torch.bool:
        return True
    return bool(((t == 0) | (t == 1)).all())


def _spatial(input) -> tuple[int, ...] | None:
    first = _first_tensor(input)
    if first is None or len(first.shape) < 2:
        return None
    return tuple(int(d) for d in first.shape[-2:])


def _classify(input, target) -> tuple[str | None, str]:
    """(task, reason) per the rules of detect_task; (None, why not) when no rule fits."""
    t = _as_tensor(target)
    if t is None:
        return None, f"the target is {describe_target(target)}, not a number or an array of numbers"
    kind = _kind(t)
    if kind == "int" and t.dim() == 0:
        return "classification", "the target is an integer scalar (a class index)"
    if t.dim() == 1 and t.shape[0] >= 2 and kind in ("int", "bool", "float") and _binary(t):
        return "multilabel", f"the target is a vector of {t.shape[0]} values, all 0 or 1 (one per label)"
    spatial = _spatial(input)
    if kind == "int" and t.dim() >= 2:
        if spatial is not None and tuple(t.shape[-2:]) == spatial:
            return "segmentation", (
                f"the target is an {str(t.dtype).removeprefix('torch.')} map of "
                f"{spatial[0]}×{spatial[1]}, the input's spatial size"
            )
        size = "×".join(map(str, spatial)) if spatial else "unknown"
        return None, (
            f"the target is {describe_target(target)}, an integer map whose size is not the input's "
            f"spatial size ({size})"
        )
    if kind == "float":
        what = "scalar" if t.dim() == 0 else f"tensor of shape ({', '.join(map(str, t.shape))})"
        return "regression", f"the target is a float {what} (values to predict)"
    if kind == "int" and t.dim() == 1:
        if t.shape[0] == 1:
            return None, (
                f"the target is {describe_target(target)}: for classification return the class index "
                "as a scalar (target[0]), not a vector of one"
            )
        return None, f"the target is {describe_target(target)} with values other than 0 and 1"
    return None, f"the target is {describe_target(target)}"


def detect_task(input, target) -> tuple[str, str]:
    """(task, reason for people) from one sample: an integer scalar is classification, a 0/1 vector of 2 or
    more values multilabel, an integer map the size of the input segmentation, any float target regression,
    a dict of boxes and labels detection."""
    if is_detection_target(target):
        return "detection", "the target is a dict of boxes and labels (torchvision's detection target)"
    task, reason = _classify(input, target)
    if task is None:
        raise JobError(
            f"task=auto cannot tell the task from the dataset's samples: {reason}. Set task= to one of "
            f"{', '.join(TASKS)} (and make the targets fit it), or task=custom"
        )
    return task, reason


def _fits(task: str, input, target) -> bool:
    if task == "detection" or is_detection_target(target):
        return task == "detection" and is_detection_target(target)
    t = _as_tensor(target)
    if t is None:
        return False
    kind = _kind(t)
    if task == "classification":
        return kind == "int" and t.dim() == 0
    if task == "multilabel":
        return t.dim() == 1 and t.shape[0] >= 1 and kind in ("int", "bool", "float") and _binary(t)
    if task == "regression":
        return kind == "float"
    if task == "segmentation":
        spatial = _spatial(input)
        return kind == "int" and t.dim() >= 2 and spatial is not None and tuple(t.shape[-2:]) == spatial
    return True  # custom: its loss decides


_NEEDS = {
    "classification": "an integer class index (a scalar) per sample",
    "multilabel": "a vector of 0/1 per sample, one value per label",
    "regression": "float values per sample",
    "segmentation": "an integer class map per sample, of the input's height and width",
    "detection": (
        'a dict {"boxes": [N, 4] x1, y1, x2, y2 in pixels, "labels": [N]} per image (torchvision\'s)'
    ),
}


def check_target(task: str, input, target) -> None:
    """Raise JobError when one sample's target cannot serve `task`: name the task, the target's dtype and
    shape, and the task it looks like (if any)."""
    if task == "auto":
        detect_task(input, target)
        return
    if task not in _NEEDS or _fits(task, input, target):
        return
    if is_detection_target(target):
        raise JobError(
            f"task={task}, but the target is a dict of boxes and labels: set task=detection or task=auto"
        )
    found, reason = _classify(input, target)
    head = f"task={task}, but the target is {describe_target(target)}"
    if found is not None:
        raise JobError(f"{head}; it looks like {found} ({reason}): set task={found} or task=auto")
    raise JobError(
        f"{head}; {task} needs {_NEEDS[task]} ({reason}): change the dataset's targets or set task="
    )


def target_num_outputs(task: str, target) -> int:
    """Outputs per sample a target asks for: labels for multilabel (vector length), values for regression (1
    for a scalar, otherwise the target's element count), 0 (unknown: dataset-wide) for
    classification/segmentation."""
    if task not in ("multilabel", "regression"):
        return 0
    t = _as_tensor(target)
    if t is None:
        return 0
    if task == "multilabel":
        return int(t.shape[0]) if t.dim() >= 1 else 1
    return int(t.numel())
