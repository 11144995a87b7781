"""`hf:<folder or hub id>`: a Hugging Face transformers classifier, loaded through its Auto classes.

It works offline: from a local folder (one written by `save_pretrained`) or the local Hugging Face cache,
unless model.args.local_files_only=false lets transformers download. Remote code is never run
(trust_remote_code=False). The loaded model is wrapped so that its forward takes the tensors a dataset gives
(named as transformers names them, which also names the inputs of an ONNX export) and returns the logits
tensor, not a ModelOutput. Token classification gives (batch, sequence, labels) scores, which train with
task=custom (your own loss).

transformers is an optional extra, imported only when an hf: model is built. Worker side; never imports Qt.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.extras import install_hint, require_extra
from workbench.worker.models.registry import register_model

INSTALL_HINT = install_hint("hf")
# model.args.task -> the Auto class that loads it, and the suffix of the architectures a config names for it.
TASKS = {
    "sequence-classification": ("AutoModelForSequenceClassification", "ForSequenceClassification"),
    "token-classification": ("AutoModelForTokenClassification", "ForTokenClassification"),
    "image-classification": ("AutoModelForImageClassification", "ForImageClassification"),
}
DEFAULT_TASK = "sequence-classification"
OWN_ARGS = ("task", "local_files_only")  # read by the workbench; every other key goes to from_pretrained
# from_pretrained arguments that say where files are
WHERE_ARGS = ("revision", "cache_dir", "subfolder", "token")
SET_HERE = {  # from_pretrained arguments the workbench decides, and what to set instead
    "num_labels": "set model.num_classes instead",
    "ignore_mismatched_sizes": "it is set when model.num_classes differs from the checkpoint's labels",
    "return_dict": "the workbench always asks for the logits",
    "pretrained_model_name_or_path": "it is what follows hf: in model.name",
}


def require_transformers():
    """The `transformers` package, or a JobError saying how to install it."""
    return require_extra("transformers", "hf", "an hf: model is loaded by Hugging Face transformers")


class TextClassifier(nn.Module):
    """A transformers text model whose forward takes token tensors and returns its logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            return_dict=True,
        ).logits


class ImageClassifier(nn.Module):
    """A transformers image model whose forward takes a pixel tensor and returns its logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=pixel_values, return_dict=True).logits


def _source(arg: str) -> str:
    """A local folder as an absolute path (so the run does not depend on the working folder), else the hub
    id."""
    path = Path(arg).expanduser()
    return str(path.absolute()) if path.exists() else arg


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:300]


def _config(transformers, name: str, source: str, offline: bool, passed: dict):
    # the config comes from where the model does
    where = {key: passed[key] for key in WHERE_ARGS if key in passed}
    folder = Path(source) / where.get("subfolder", "")
    if folder.is_dir() and not (folder / "config.json").is_file():
        raise JobError(
            f"model.name: {name}: the folder {folder} holds no config.json, so it is not a saved "
            "transformers model; save one there with save_pretrained"
        )
    try:
        return transformers.AutoConfig.from_pretrained(
            source, local_files_only=offline, trust_remote_code=False, **where
        )
    except OSError as exc:
        if folder.is_dir():
            raise JobError(
                f"model.name: {name}: cannot read the model config in {folder}: {_first_line(exc)}"
            ) from None
        if offline:
            raise JobError(
                f"model.name: {name}: {source!r} is not a folder here, and not a model in the local "
                "Hugging Face cache; hf: works offline, from a local folder (e.g. one written by "
                "save_pretrained) or the cache; set model.args.local_files_only=false to let transformers "
                "download it"
            ) from None
        raise JobError(
            f"model.name: {name}: {source!r} is not a folder here, and transformers could not find or "
            f"download it: {_first_line(exc)}"
        ) from None
    except ValueError as exc:  # an unknown model_type, or one that needs its own remote code
        raise JobError(
            f"model.name: {name}: transformers cannot read its config: {_first_line(exc)} (remote code "
            "is never run)"
        ) from None


def _task(args: dict, config) -> str:
    """model.args.task, else the task of the architecture the config names, else sequence classification."""
    if "task" in args:
        task = args["task"]
        if task not in TASKS:
            raise JobError(f"model.args: task {task!r} is not one of: {', '.join(TASKS)}")
        return task
    for architecture in getattr(config, "architectures", None) or []:
        for task, (_, suffix) in TASKS.items():
            if str(architecture).endswith(suffix):
                return task
    return DEFAULT_TASK


def _check_args(args: dict) -> None:
    if "trust_remote_code" in args:
        raise JobError(
            "model.args: trust_remote_code is refused: an hf: model is loaded without running code from "
            "its folder or the hub; use a model transformers itself implements, or write a file: model "
            "that loads it"
        )
    for key, why in SET_HERE.items():
        if key in args:
            raise JobError(f"model.args: {key} is not passed to from_pretrained: {why}")
    offline = args.get("local_files_only", True)
    if not isinstance(offline, bool):
        raise JobError(f"model.args: local_files_only must be true or false, not {offline!r}")


@register_model(
    "hf",
    family=True,
    usage="hf:<folder or hub id>",
    description="A Hugging Face transformers classifier (text, token or image), from a local folder "
    "or the local cache.",
)
def build_hf(
    arg: str, *, num_classes: int, input_shape: tuple[int, ...], weights: str, log, args: dict | None = None
) -> nn.Module:
    name = f"hf:{arg}"
    args = dict(args or {})
    if weights:
        raise JobError(
            f"model.weights: {name} loads the weights saved with it; leave model.weights empty (or pass "
            "a trained state_dict as model.checkpoint)"
        )
    _check_args(args)
    transformers = require_transformers()
    offline = args.get("local_files_only", True)
    passed = {k: v for k, v in args.items() if k not in OWN_ARGS}
    source = _source(arg)
    config = _config(transformers, name, source, offline, passed)
    task = _task(args, config)
    auto_class = getattr(transformers, TASKS[task][0])
    labels = {}
    if num_classes and num_classes != config.num_labels:
        labels = {"num_labels": num_classes, "ignore_mismatched_sizes": True}
        log(
            f"{name}: model.num_classes is {num_classes} and the checkpoint has {config.num_labels} labels: "
            "its classifier head starts untrained"
        )
    log(f"loading {name} as {task} ({auto_class.__name__}), without remote code")
    try:
        model = auto_class.from_pretrained(
            source, local_files_only=offline, trust_remote_code=False, **labels, **passed
        )
    except ValueError as exc:  # e.g. a config this Auto class has no model for
        other = "" if "task" in args else f"; set model.args.task to one of: {', '.join(TASKS)}"
        raise JobError(f"model.name: {name} cannot be loaded for {task}: {_first_line(exc)}{other}") from None
    except TypeError as exc:
        raise JobError(f"model.args: {name} does not take these arguments: {_first_line(exc)}") from None
    except OSError as exc:
        raise JobError(f"model.name: {name}: cannot read its weights: {_first_line(exc)}") from None
    return ImageClassifier(model) if task == "image-classification" else TextClassifier(model)
