"""A LightningModule that detects: its test batches of (images, targets in torchvision's detection form) run
through its forward in eval mode (a list of {boxes, labels, scores} per image), scored by COCO mAP with
pycocotools and saved as the run's COCO files and evaluation.json, as the built-in detection route saves
them. Worker side; never imports Qt."""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.worker.data.detection.records import Item
from workbench.worker.lightning import require_lightning
from workbench.worker.lightning.user_classes import overrides
from workbench.worker.training.detection import save_test_evaluation


def is_detection_batch(batch) -> bool:
    """Whether a batch is (images, targets) with each target a dict of boxes and labels."""
    if not isinstance(batch, (list, tuple)) or len(batch) < 2:
        return False
    targets = batch[1]
    return (
        isinstance(targets, (list, tuple))
        and len(targets) > 0
        and all(isinstance(t, dict) and "boxes" in t and "labels" in t for t in targets)
    )


def _loader(parts):
    """The test dataloader (the validation one where there is none) of the DataModule, else of the module;
    None when neither gives one."""
    lightning = require_lightning()
    for owner, base in (
        (parts.datamodule, lightning.LightningDataModule),
        (parts.module, lightning.LightningModule),
    ):
        if owner is None:
            continue
        for hook in ("test_dataloader", "val_dataloader"):
            if overrides(owner, hook, base):
                if owner is parts.datamodule and hasattr(owner, "setup"):
                    owner.setup("test" if hook == "test_dataloader" else "validate")
                return getattr(owner, hook)(), hook.removesuffix("_dataloader")
        if owner is parts.datamodule:
            break  # a DataModule's data is the run's: the module's own loaders are not asked
    return None, ""


def _classes(parts, count: int) -> list[str]:
    """The class names the DataModule or the module names (a `classes` list, label k naming classes[k-1]),
    else "1".."K" for the highest label seen."""
    for owner in (parts.datamodule, parts.module):
        names = getattr(owner, "classes", None)
        if (
            isinstance(names, (list, tuple))
            and len(names) >= count
            and all(isinstance(n, str) for n in names)
        ):
            return list(names)
    return [str(k) for k in range(1, count + 1)]


@torch.no_grad()
def evaluate_detection(spec, ctx, parts) -> dict | None:
    """Test mAP of a detecting LightningModule on its test (else validation) batches, the COCO files and
    evaluation.json saved; {"metrics", "path", "split"}, or None where there are no batches to score."""
    loader, split = _loader(parts)
    if loader is None:
        ctx.log("no test mAP: the DataModule has no test_dataloader or val_dataloader", "warning")
        return None
    module = parts.module
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    module.eval()
    items, ids, outputs = [], [], []
    highest = 0
    ctx.progress(0, None, f"scoring the {split} batches by COCO mAP", force=True)
    for k, batch in enumerate(loader):
        ctx.check_stop()
        if not is_detection_batch(batch):
            raise JobError(
                f"task=detection: {split} batch {k} is not (images, targets) with each target a dict of "
                f"boxes and labels (it is a {type(batch).__name__}); collate detection samples into lists, "
                "e.g. collate_fn=lambda b: tuple(zip(*b))"
            )
        images, targets = list(batch[0]), list(batch[1])
        try:
            out = module([image.to(device) for image in images])
        except Exception as exc:  # the user's forward: said with what it must return
            raise JobError(
                f"task=detection: {type(module).__name__}.forward(images) failed in eval mode "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}); it must take "
                "a list of [C, H, W] images and return one {boxes, labels, scores} dict per image"
            ) from None
        if (
            not isinstance(out, (list, tuple))
            or len(out) != len(images)
            or not all(isinstance(o, dict) and {"boxes", "labels", "scores"} <= set(o) for o in out)
        ):
            raise JobError(
                f"task=detection: {type(module).__name__}.forward(images) in eval mode must return one "
                f"{{boxes, labels, scores}} dict per image, as torchvision's detectors do; it returned "
                f"{type(out).__name__}"
            )
        for image, target, found in zip(images, targets, out):
            image_id = len(items) + 1
            labels = [int(v) for v in torch.as_tensor(target["labels"]).reshape(-1).tolist()]
            boxes = torch.as_tensor(target["boxes"], dtype=torch.float32).reshape(-1, 4).tolist()
            items.append(
                Item(image_id, Path(""), float(image.shape[-1]), float(image.shape[-2]), boxes, labels)
            )
            ids.append(image_id)
            outputs.append({key: value.detach().cpu() for key, value in found.items()})
            highest = max([highest, *labels, *(int(v) for v in found["labels"].tolist())])
    if not items:
        ctx.log(f"no test mAP: the {split} dataloader gave no batch", "warning")
        return None
    classes = _classes(parts, highest)
    saved = save_test_evaluation(
        ctx, items, ids, outputs, classes, list(range(1, len(classes) + 1)), f"the {split} batches"
    )
    return {**saved, "split": split}
