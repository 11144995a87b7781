"""Changes to a built network: load a checkpoint into it, replace its classifier head, freeze parameters.

Worker side; never imports Qt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.checkpoints import load_state_dict

SHOWN = 5  # mismatches named in a message; the rest are counted


def find_head(model: nn.Module) -> tuple[str, nn.Linear] | None:
    """The last nn.Linear in registration order: the classifier of every torchvision and built-in network."""
    found = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and name:
            found = (name, module)
    return found


def replace_head(model: nn.Module, num_classes: int) -> str:
    """Swap the last Linear for a fresh one with `num_classes` outputs; returns its module name."""
    head = find_head(model)
    if head is None:
        raise JobError(
            "model.replace_head: the model has no nn.Linear layer to replace; its classifier must end in "
            "a Linear layer (or turn replace_head off)"
        )
    name, old = head
    parent_name, _, leaf = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None)
    new.to(device=old.weight.device, dtype=old.weight.dtype)
    setattr(parent, leaf, new)
    return name


def _shape(t: torch.Tensor) -> str:
    return "x".join(map(str, t.shape)) or "scalar"


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def unwrap_state(obj: dict) -> dict:
    """A state_dict from a file: the file itself, or the `model` entry of a workbench last.pt."""
    if isinstance(obj.get("model"), dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj["model"]
    return obj


def load_checkpoint(model: nn.Module, path: str | Path, *, what: str = "model.checkpoint") -> None:
    """Load a state_dict file (weights_only) into `model`; any mismatch is a JobError naming the file and
    keys."""
    path = Path(path).expanduser()
    state = unwrap_state(load_state_dict(path))
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    wrong_keys = [
        k for k in own if k in state and isinstance(state[k], torch.Tensor) and state[k].shape != own[k].shape
    ]
    wrong = [f"{k} (file {_shape(state[k])}, model {_shape(own[k])})" for k in wrong_keys]
    not_tensors = [k for k in own if k in state and not isinstance(state[k], torch.Tensor)]
    if missing or unexpected or wrong or not_tensors:
        parts = []
        if wrong:
            parts.append(f"shape mismatches: {_listed(wrong)}")
        if missing:
            parts.append(f"missing keys: {_listed(missing)}")
        if unexpected:
            parts.append(f"unexpected keys: {_listed(unexpected)}")
        if not_tensors:
            parts.append(f"entries that are not tensors: {_listed(not_tensors)}")
        head = find_head(model)
        only_head = head is not None and wrong_keys and all(k.startswith(head[0] + ".") for k in wrong_keys)
        # The usual cause: weights trained for another class count. The new head must then be trained afresh.
        hint = (
            " Its classifier head has another class count: load it into the model it was trained as and set "
            "model.replace_head=true, or change model.num_classes"
            if only_head
            else ""
        )
        raise JobError(f"{what}: {path} does not fit this model: {'; '.join(parts)}.{hint}")
    model.load_state_dict(state)


def freeze(model: nn.Module, prefixes: Sequence[str]) -> list[str]:
    """Stop training parameters under the given module-name prefixes (`backbone` = all but the head).

    Returns the names of the frozen parameters; a prefix that matches nothing is a JobError listing the
    modules.
    """
    names = [name for name, _ in model.named_parameters()]
    chosen: set[str] = set()
    for prefix in prefixes:
        if prefix == "backbone":
            head = find_head(model)
            if head is None:
                raise JobError(
                    "model.freeze: 'backbone' means all but the last Linear layer, and the model has none"
                )
            matched = [n for n in names if not n.startswith(head[0] + ".")]
        else:
            clean = prefix.rstrip(".")
            matched = [n for n in names if n == clean or n.startswith(clean + ".")]
            if not matched:
                children = [n for n, _ in model.named_children()]
                raise JobError(
                    f"model.freeze: {prefix!r} names no parameters of this model; its modules are: "
                    f"{', '.join(children)} (or use 'backbone')"
                )
        chosen.update(matched)
    for name, param in model.named_parameters():
        if name in chosen:
            param.requires_grad_(False)
    return sorted(chosen)


def frozen_norm_layers(model: nn.Module) -> list[nn.Module]:
    """BatchNorm layers whose parameters are all frozen: training keeps them in eval mode, so their running
    statistics stay as loaded too (a frozen backbone stays exactly as it was)."""
    found = []
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            params = list(module.parameters(recurse=False))
            if params and not any(p.requires_grad for p in params):
                found.append(module)
    return found
