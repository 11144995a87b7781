"""`build_model`: a ModelSpec to a ready network: build by name, pretrained weights, head, checkpoint,
freezing, and a dry forward pass that proves the network takes the input shape and gives num_classes outputs.

Worker side; never imports Qt.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Sequence

import torch
from torch import nn

from workbench.errors import JobError
from workbench.specs import ModelSpec
from workbench.worker.models.registry import find_model, get_model
from workbench.worker.models.surgery import find_head, freeze, load_checkpoint, replace_head


def logits_of(output) -> torch.Tensor:
    """The class scores of a forward pass: the tensor itself, `.logits` (torchvision's Inception/GoogLeNet
    outputs in train mode), or the first item of a tuple."""
    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits"):
        return output.logits
    if isinstance(output, dict) and isinstance(output.get("out"), torch.Tensor):
        return output["out"]  # torchvision's segmentation models: {"out": ..., "aux": ...}
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise JobError(f"the model returned a {type(output).__name__}; it must return a tensor of class scores")


def _shape_text(shape: Sequence[int]) -> str:
    return ",".join(map(str, shape))


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def _two_of(example):
    """A batch of two copies of one sample's input (a tensor, or a tuple or dict of them)."""
    if isinstance(example, dict):
        return {key: _two_of(value) for key, value in example.items()}
    if isinstance(example, (tuple, list)):
        return type(example)(_two_of(value) for value in example)
    return torch.stack([torch.as_tensor(example)] * 2)


def _tensors(x) -> list[torch.Tensor]:
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _tensors(v)]
    return [torch.as_tensor(x)]


def inputs_text(batch) -> str:
    """ "inputs of shape 1,28,28" for one float tensor; "inputs int64[32]" or "inputs ids int64[32], mask
    bool[32]" otherwise, so a dtype mismatch reads as one."""
    if isinstance(batch, torch.Tensor) and batch.is_floating_point():
        return f"inputs of shape {_shape_text(batch.shape[1:])}"
    named = batch.items() if isinstance(batch, dict) else [("", t) for t in _tensors(batch)]
    return "inputs " + ", ".join(
        f"{name + ' ' if name else ''}{str(t.dtype).removeprefix('torch.')}[{_shape_text(t.shape[1:])}]"
        for name, t in named
    )


def input_advice(exc: BaseException, batch) -> str:
    """What to check: the dtype the model expected where the failure says so, else the input's shape."""
    text = str(exc)
    floats = any(t.is_floating_point() for t in _tensors(batch))
    if floats and any(word in text for word in ("Long, Int", "indices", "scalar type Long")):
        return (
            "; the model expected integer inputs (int64 ids) but got float32: take the inputs from the run's "
            'dataset, or set model.input_spec with dtype = "int64"'
        )
    return "; check model.input_shape and dataset.image_size"


def call_model(model: nn.Module, x):
    """model(x), model(*x) for a tuple (or list) of inputs, model(**x) for a dict of them."""
    if isinstance(x, dict):
        return model(**x)
    if isinstance(x, (tuple, list)):
        return model(*x)
    return model(x)


def _output_fits(out: torch.Tensor, num_classes: int, task: str) -> tuple[bool, str]:
    """Whether a batch of two gives the outputs `task` needs, and what it needs, for the message."""
    if task == "custom":
        return True, "any output (the custom loss reads it)"
    if task == "segmentation":
        return out.dim() == 4 and out.shape[:2] == (
            2,
            num_classes,
        ), f"(batch, {num_classes}, height, width) scores"
    if task == "regression":
        fits = out.shape == (2, num_classes) or (num_classes == 1 and out.shape == (2,))
        return fits, f"(batch, {num_classes}) values"
    return out.dim() == 2 and out.shape == (2, num_classes), "(batch, num_classes) scores"


def check_forward(
    model: nn.Module,
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    hint: str = "",
    *,
    task: str = "classification",
    example=None,
) -> None:
    """Run two zero samples (or two copies of `example`, a user dataset's first input) through the model in
    eval mode; a failure or an output shape the task cannot use is a JobError."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            batch = _two_of(example) if example is not None else torch.zeros(2, *input_shape)
            out = logits_of(call_model(model, batch))
    except JobError:
        raise
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:300]
        raise JobError(
            f"model {name} cannot take {inputs_text(batch)}: {type(exc).__name__}: {first}{_where(exc)}"
            f"{input_advice(exc, batch)}"
        ) from None
    finally:
        model.train(was_training)
    fits, needed = _output_fits(out, num_classes, task)
    if not fits:
        raise JobError(
            f"model {name} gives outputs of shape {_shape_text(out.shape[1:])} per sample, but "
            f"model.num_classes is {num_classes}; for task {task} the model must return {needed}{hint}"
        )


# model.num_classes = 0 (auto) with no dataset at hand to count (a graph of model.* alone)
FALLBACK_CLASSES = 10


def resolve_num_classes(
    spec: ModelSpec,
    classes: int | None,
    log: Callable[[str], None] | None = None,
    source: str = "the dataset's classes",
) -> ModelSpec:
    """`spec` with num_classes 0 (auto) replaced by the dataset's class count `classes` (or the fallback when
    no dataset is at hand); an explicit count is kept, and checked against the dataset by the job that trains.
    `source` says where `classes` came from, for the log."""
    if spec.num_classes:
        return spec
    count = int(classes) if classes else FALLBACK_CLASSES
    if log is not None:
        log(
            f"model.num_classes: auto, {count} "
            + (f"({source})" if classes else "(no dataset to count: the default)")
        )
    return dataclasses.replace(spec, num_classes=count)


def model_class_count(spec: ModelSpec, input_shape: Sequence[int], example=None) -> tuple[int | None, str]:
    """For model.num_classes = 0 (auto) when the data names no classes (a segmentation Dataset without
    `classes`): (the count the model itself decides, where it came from), or (None, why not). A file: model
    says it by its num_classes default, or, when it takes no num_classes, by its output channels on the trial
    batch."""
    args = spec.args or {}
    if isinstance(args.get("num_classes"), int) and args["num_classes"] > 0:
        return int(args["num_classes"]), "model.args.num_classes"
    if not spec.name.startswith("file:"):
        return None, f"{spec.name} takes num_classes from the spec"
    from workbench.worker.models.user_code import num_classes_parameter

    takes, default, attr = num_classes_parameter(spec.name[len("file:") :])
    if default is not None:
        return default, f"the num_classes default of {attr}"
    if takes:
        return None, f"{attr} takes num_classes with no default"
    return _output_channels(spec, input_shape, example), f"the output channels of {attr} on the trial batch"


def _output_channels(spec: ModelSpec, input_shape: Sequence[int], example) -> int | None:
    """Dim 1 of the model's (batch, classes, height, width) scores on two copies of the first sample (or
    zeros); None when the output is not such scores. The count passed is unused: the model takes no
    num_classes."""
    shape = tuple(spec.input_shape) or tuple(input_shape)
    try:
        model = get_model(spec.name, num_classes=1, input_shape=shape, args=spec.args, log=lambda *_: None)
        model.eval()
        with torch.no_grad():
            batch = _two_of(example) if example is not None else torch.zeros(2, *shape)
            out = logits_of(call_model(model, batch))
    except Exception:  # the user's code: the build that follows words its failure with the file and line
        return None
    return int(out.shape[1]) if out.dim() == 4 else None


def _build_as_declared(spec: ModelSpec, *, log, checkpoint: bool) -> nn.Module:
    """A model that decides its own outputs, built from model.args alone (no num_classes, head or trial pass),
    then model.checkpoint and model.freeze. model.weights reach its builder even when `pretrained` is off, so
    a family that has none refuses them in every job."""
    model = get_model(
        spec.name,
        num_classes=spec.num_classes,
        input_shape=tuple(spec.input_shape),
        weights=spec.weights,
        log=log,
        args=spec.args,
    )
    if spec.checkpoint and checkpoint:
        load_checkpoint(model, spec.checkpoint)
    if spec.freeze:
        freeze(model, spec.freeze)
    model.train()
    return model


def build_model(
    spec: ModelSpec,
    *,
    input_shape: Sequence[int] = (),
    log: Callable[[str], None] | None = None,
    pretrained: bool = True,
    checkpoint: bool = True,
    classes: int | None = None,
    task: str = "classification",
    example=None,
    check: bool = True,
) -> nn.Module:
    """Build the network `spec` describes, on the CPU, in train mode.

    `input_shape` is used when spec.input_shape is empty (the dataset's sample shape), `classes` (the
    dataset's class count) when spec.num_classes is 0 (auto). `pretrained=False` and `checkpoint=False` skip
    spec.weights and spec.checkpoint (a resumed run loads its own last.pt instead). `task` decides what
    outputs are right ("auto" counts as classification); `example` is a user dataset's first input, for the
    trial forward pass. `check=False` skips that pass, for a caller that runs the model at once and words its
    own failure (graph).
    """
    found = find_model(spec.name)
    if found is not None and found[0].owns_outputs:  # e.g. a LightningModule: its class decides its outputs
        return _build_as_declared(spec, log=log, checkpoint=checkpoint)
    spec = resolve_num_classes(spec, classes, log)
    shape = tuple(spec.input_shape) or tuple(input_shape)
    if not shape:
        raise JobError("model.input_shape: empty, and there is no dataset to take it from; set e.g. 1,28,28")
    weights = spec.weights if pretrained else ""
    model = get_model(
        spec.name, num_classes=spec.num_classes, input_shape=shape, weights=weights, log=log, args=spec.args
    )
    if spec.replace_head:
        replace_head(model, spec.num_classes)
    hint = ""
    if spec.weights and not spec.replace_head:
        hint = (
            "; pretrained weights keep their own classes, so set model.replace_head=true to train a new head"
        )
    if check:
        check_forward(
            model,
            spec.name,
            shape,
            spec.num_classes,
            hint,
            task="classification" if task == "auto" else task,
            example=example,
        )
    if spec.checkpoint and checkpoint:
        load_checkpoint(model, spec.checkpoint)
    if spec.freeze:
        freeze(model, spec.freeze)
        if not any(p.requires_grad for p in model.parameters()):
            raise JobError(
                f"model.freeze: {', '.join(spec.freeze)} freezes every parameter, so nothing would train"
            )
    model.train()
    return model


def count_parameters(model: nn.Module) -> dict:
    return {
        "total": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
    }


__all__ = ["build_model", "check_forward", "count_parameters", "find_head", "logits_of"]
