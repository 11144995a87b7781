"""A LightningModule that detects: its test batches of (images, targets in torchvision's detection form) run
through its forward in eval mode (a list of {boxes, labels, scores} per image), scored by COCO mAP with
pycocotools and saved as the run's COCO files and evaluation.json, as the built-in detection route saves
them. Worker side; never imports Qt."""

from __future__ import annotations

import torch

from workbench.errors import JobError
from workbench.worker.checkpoints import load_state_dict
from workbench.worker.data.detection.records import Item
from workbench.worker.lightning import require_lightning
from workbench.worker.lightning.user_classes import overrides
from workbench.worker.source import first_checkpoint
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


COLLATE = "collate detection samples into lists, e.g. collate_fn=lambda b: tuple(zip(*b))"


def _kind(value) -> str:
    """A short description of what a batch part is: a Tensor with its shape, a list with its length."""
    if isinstance(value, torch.Tensor):
        return f"a Tensor of shape {list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)}"
    if isinstance(value, dict):
        return f"a dict of {', '.join(map(str, value)) or 'nothing'}"
    return f"a {type(value).__name__}"


def check_detection_batch(batch, where: str) -> None:
    """A JobError in one line naming what is wrong unless `batch` is (images, targets): a list of [C, H, W]
    images and one {"boxes": float [N, 4] x1, y1, x2, y2, "labels": integer [N], 1..K} dict per image."""
    prefix = f"task=detection: {where}"
    if not isinstance(batch, (list, tuple)) or len(batch) < 2:
        raise JobError(
            f"{prefix} is not (images, targets) but {_kind(batch)}; a detection batch is a list of [C, H, W] "
            f"images and a list of one {{boxes, labels}} dict per image: {COLLATE}"
        )
    images, targets = batch[0], batch[1]
    if not isinstance(targets, (list, tuple)) or not all(isinstance(t, dict) for t in targets):
        raise JobError(
            f"{prefix} is not (images, targets) with a list of one {{boxes, labels}} dict per image: its "
            f"targets are {_kind(targets)}; {COLLATE}"
        )
    if isinstance(images, torch.Tensor) and images.dim() == 4:
        images = list(images)
    if not isinstance(images, (list, tuple)) or not all(
        isinstance(image, torch.Tensor) and image.dim() == 3 for image in images
    ):
        shown = _kind(images[0]) if isinstance(images, (list, tuple)) and images else _kind(images)
        raise JobError(f"{prefix}: its images are not [C, H, W] tensors (the first is {shown}); {COLLATE}")
    if len(images) != len(targets):
        raise JobError(f"{prefix} has {len(images)} images but {len(targets)} targets; one target per image")
    for k, target in enumerate(targets):
        missing = [key for key in ("boxes", "labels") if key not in target]
        if missing:
            raise JobError(
                f"{prefix}: target {k} has no {' or '.join(repr(m) for m in missing)} (its keys: "
                f"{', '.join(map(str, target)) or 'none'}); each target is {{boxes, labels}}"
            )
        boxes, labels = target["boxes"], target["labels"]
        if not isinstance(boxes, torch.Tensor) or boxes.dim() != 2 or boxes.shape[-1] != 4:
            raise JobError(
                f"{prefix}: target {k}'s boxes are {_kind(boxes)}; each target's boxes are a float "
                "tensor [N, 4] of x1, y1, x2, y2 in pixels"
            )
        if not boxes.is_floating_point():
            raise JobError(
                f"{prefix}: target {k}'s boxes are {boxes.dtype}; they are a float tensor [N, 4] of x1, y1, "
                "x2, y2 in pixels"
            )
        count = boxes.shape[0]
        if (
            not isinstance(labels, torch.Tensor)
            or labels.dim() != 1
            or labels.shape[0] != count
            or labels.is_floating_point()
            or labels.dtype == torch.bool
        ):
            what = f"{_kind(labels)} of {labels.dtype}" if isinstance(labels, torch.Tensor) else _kind(labels)
            raise JobError(
                f"{prefix}: target {k}'s labels are {what} for {count} boxes; labels are an int64 tensor "
                "[N], one class 1..K per box"
            )
        if count and int(labels.min()) < 1:
            raise JobError(
                f"{prefix}: target {k} has label {int(labels.min())}; labels start at 1 (0 is the "
                "background in torchvision's detectors), so class k of K is label k"
            )
        bad = ~(torch.isfinite(boxes).all(1) & (boxes[:, 2] >= boxes[:, 0]) & (boxes[:, 3] >= boxes[:, 1]))
        if count and bool(bad.any()):
            j = int(bad.nonzero()[0, 0])
            raise JobError(
                f"{prefix}: target {k}'s box {j} is {[round(float(v), 2) for v in boxes[j]]}, not x1, y1, "
                "x2, y2 with x2 >= x1 and y2 >= y1; boxes are corners in pixels, not x, y, w, h"
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


def class_names(owners, count: int) -> list[str]:
    """The class names the first of `owners` (the DataModule, the module) gives as a `classes` list of at
    least `count` strings (label k names classes[k-1]), else "1".."K" for the highest label seen."""
    for owner in owners:
        names = getattr(owner, "classes", None)
        if (
            isinstance(names, (list, tuple))
            and len(names) >= count
            and all(isinstance(n, str) for n in names)
        ):
            return list(names)
    return [str(k) for k in range(1, count + 1)]


@torch.no_grad()
def evaluate_detection(ctx, parts) -> dict | None:
    """Test mAP of a detecting LightningModule on its test (else validation) batches, the COCO files and
    evaluation.json saved; {"metrics", "path", "split"}, or None where there are no batches to score."""
    loader, split = _loader(parts)
    if loader is None:
        ctx.log("no test mAP: the DataModule has no test_dataloader or val_dataloader", "warning")
        return None
    module = parts.module
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    # Scored with the weights the run's later jobs load (best.pt, else the final ones), as the built-in route
    # tests its kept checkpoint; the module's own weights are put back after.
    kept = first_checkpoint(ctx.run.dir)
    own = {k: v.detach().clone() for k, v in module.state_dict().items()} if kept is not None else None
    if kept is not None:
        module.load_state_dict(load_state_dict(kept))
    try:
        return _score(ctx, parts, module, device, loader, split, kept.name if kept else "the final weights")
    finally:
        if own is not None:
            module.load_state_dict(own)


def _score(ctx, parts, module, device, loader, split: str, weights: str) -> dict | None:
    module.eval()
    items, ids, outputs = [], [], []
    highest = 0
    ctx.progress(0, None, f"scoring the {split} batches by COCO mAP", force=True)
    for k, batch in enumerate(loader):
        ctx.check_stop()
        check_detection_batch(batch, f"{split} batch {k}")
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
            item = Item.of_sample(len(items) + 1, image, target)
            items.append(item)
            ids.append(item.image_id)
            outputs.append({key: value.detach().cpu() for key, value in found.items()})
            highest = max([highest, *item.labels, *(int(v) for v in found["labels"].tolist())])
    if not items:
        ctx.log(f"no test mAP: the {split} dataloader gave no batch", "warning")
        return None
    classes = class_names((parts.datamodule, parts.module), highest)
    saved = save_test_evaluation(
        ctx, items, ids, outputs, classes, list(range(1, len(classes) + 1)), f"{weights}, the {split} batches"
    )
    return {**saved, "split": split}
