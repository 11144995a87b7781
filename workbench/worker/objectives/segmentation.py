"""Segmentation: scores (N, C, H, W), targets int64 (N, H, W) with one class per pixel (uint8 or (N, 1, H, W)
masks are accepted and converted). Pixels labelled 255 (IGNORE_INDEX) are left out of the loss and every
statistic. Per-pixel cross-entropy; mean IoU as the monitor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from workbench.worker.objectives import thumbnails
from workbench.worker.objectives.base import Objective, TestEvaluator, as_floats, count_bins, json_safe, ratio

LOSSES = ("auto", "cross_entropy")
IGNORE_INDEX = 255
WORST_COUNT = 16
MASK_PIXELS = 128 * 128  # the worst images carry their predicted mask up to this size
THUMBNAIL_COUNT = 8  # the worst images that carry a thumbnail (image, true and predicted mask) for the view


def class_map(target: torch.Tensor) -> torch.Tensor:
    """Targets as int64 (N, H, W): a channel dimension of 1 is dropped, uint8 masks are widened."""
    if target.dim() == 4 and target.shape[1] == 1:
        target = target[:, 0]
    return target.long()


def iou_metrics(confusion: torch.Tensor) -> tuple[dict[str, float], list[float]]:
    """(miou and pixel_acc, per-class IoU) from a C×C confusion matrix (rows: true class). mIoU averages the
    classes present in the targets or the predictions; a class in neither has IoU NaN."""
    m = confusion.double()
    inter = m.diagonal()
    union = m.sum(dim=1) + m.sum(dim=0) - inter
    ious = [float(i) / float(u) if u > 0 else math.nan for i, u in zip(inter.tolist(), union.tolist())]
    present = [v for v in ious if not math.isnan(v)]
    return (
        {
            "miou": sum(present) / len(present) if present else math.nan,
            "pixel_acc": ratio(float(inter.sum()), float(m.sum())),
        },
        ious,
    )


class SegmentationObjective(Objective):
    task = "segmentation"
    monitor = "miou"
    monitor_label = "mIoU"
    higher_is_better = True

    def __init__(self, *, loss_name: str = "auto", num_outputs: int = 0, label_smoothing: float = 0.0):
        super().__init__(loss_name="cross_entropy", num_outputs=num_outputs, label_smoothing=label_smoothing)

    def stat_count(self) -> int:
        return self.num_outputs * self.num_outputs

    def loss(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            scores.float(), class_map(target), ignore_index=IGNORE_INDEX, label_smoothing=self.label_smoothing
        )

    def cells(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Each pixel's confusion cell true*C + predicted; ignored or out-of-range labels go to cell C*C."""
        c = self.num_outputs
        target = class_map(target)
        cell = target * c + scores.argmax(dim=1)
        # torch.where, not a boolean mask: a mask index would read the pixel count back to the host.
        return torch.where((target >= 0) & (target < c), cell, torch.full_like(cell, c * c))

    def batch_stats(self, scores: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        c = self.num_outputs
        return count_bins(self.cells(scores, target), c * c + 1)[: c * c].double()

    def metrics(self, stats: Sequence[float], samples: float) -> dict[str, float]:
        c = self.num_outputs
        return iou_metrics(torch.tensor(as_floats(stats), dtype=torch.float64).view(c, c))[0]

    def check_output(self, scores: torch.Tensor, target: torch.Tensor, where: str = "training") -> None:
        if target.dtype.is_floating_point or target.dtype.is_complex or target.dtype == torch.bool:
            self.fail(
                where,
                scores,
                target,
                "the targets are not integer class maps",
                "return an integer class index per pixel (int64, 255 for pixels to ignore)",
            )
        target = class_map(target)
        if target.dim() != 3:
            self.fail(
                where,
                scores,
                target,
                "the targets must be one class map per sample, (batch, height, width)",
                "return a (height, width) map of class indices per sample",
            )
        n, h, w = (int(d) for d in target.shape)
        if scores.dim() != 4 or int(scores.shape[0]) != n or tuple(scores.shape[2:]) != (h, w):
            self.fail(
                where,
                scores,
                target,
                f"the model must give per-pixel class scores of shape (batch, classes, {h}, {w})",
                "make forward() return (batch, classes, height, width) at the target's size "
                "(upsample the output, e.g. F.interpolate, if the network downsamples)",
            )
        if self.num_outputs and int(scores.shape[1]) != self.num_outputs:
            self.fail(
                where,
                scores,
                target,
                f"the model gives {int(scores.shape[1])} scores per pixel but there are "
                f"{self.num_outputs} classes",
                f"set model.num_classes={self.num_outputs}",
            )

    def test_evaluator(self, split_name: str, classes: list[str]) -> SegmentationEvaluator:
        return SegmentationEvaluator(self, split_name, classes)


class SegmentationEvaluator(TestEvaluator):
    """The whole split's confusion matrix (per-class IoU and pixel counts), and the WORST_COUNT images with
    the lowest mIoU of their own, kept as a running selection on the device so no batch waits on the host.

    The first THUMBNAIL_COUNT of them carry "thumbnail": {height, width, channels, image, true_mask,
    predicted_mask}, each picture base64 of raw uint8 bytes at most thumbnails.SIDE pixels a side (image:
    h*w*channels, absent with channels 0 when the inputs are not images of the masks' size; masks: h*w class
    indices, 255 where the target is ignored)."""

    def __init__(self, objective: SegmentationObjective, split_name: str, classes: list[str]):
        super().__init__(objective, split_name, classes)
        self.confusion: torch.Tensor | None = None
        self.worst: tuple[torch.Tensor, ...] | None = None  # (miou, pixel_acc, position, masks or None)
        self.seen = 0
        self.index_parts: list[torch.Tensor] = []
        self.inputs = None

    def add_inputs(self, inputs) -> None:
        self.inputs = inputs

    def add(self, indices: torch.Tensor, scores: torch.Tensor, target: torch.Tensor) -> None:
        objective: SegmentationObjective = self.objective
        c = objective.num_outputs
        n = int(scores.shape[0])
        counts = count_bins(objective.cells(scores, target), c * c + 1)[: c * c]
        self.confusion = counts if self.confusion is None else self.confusion + counts
        # Per image and class: intersection, target area and predicted area, each one count over pixels whose
        # bin is image*C + class (ignored pixels: the dropped bin n*C).
        target = class_map(target)
        pred = scores.argmax(dim=1)
        valid = (target >= 0) & (target < c)
        base = (torch.arange(n, device=scores.device) * c).view(n, 1, 1)
        drop = torch.full_like(target, n * c)

        def per_image(mask: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
            return count_bins(torch.where(mask, base + cls, drop), n * c + 1)[: n * c].view(n, c).double()

        inter = per_image(valid & (pred == target), target)
        area_true = per_image(valid, target)
        area_pred = per_image(valid, pred)
        union = area_true + area_pred - inter
        present = union > 0
        iou = torch.where(present, inter / union.clamp(min=1), torch.zeros_like(inter))
        # An image with every pixel ignored has no IoU: NaN, sorted after every real value.
        miou = iou.sum(dim=1) / present.sum(dim=1)
        pixel_acc = inter.sum(dim=1) / area_true.sum(dim=1)
        # Positions in the order of add() stand in for the indices on the device: copying the host indices
        # there would wait for the device; the host indices are looked up by position at the end.
        position = torch.arange(self.seen, self.seen + n, device=scores.device)
        self.seen += n
        self.index_parts.append(indices.reshape(-1).long())
        keep_masks = int(scores.shape[2]) * int(scores.shape[3]) <= MASK_PIXELS
        masks = pred.to(torch.uint8 if c <= 256 else torch.int32) if keep_masks else None
        parts = (miou, pixel_acc, position, masks, *self._thumbnails(target, pred, valid))
        if self.worst is not None:
            parts = tuple(
                torch.cat([a, b]) if a is not None and b is not None and a.shape[1:] == b.shape[1:] else None
                for a, b in zip(self.worst, parts)
            )
        # Stable: among equal mIoU the earlier image (kept from before, or first in the batch) stays first.
        order = parts[0].argsort(stable=True)[:WORST_COUNT]
        self.worst = tuple(p[order] if p is not None else None for p in parts)

    def _thumbnails(self, target: torch.Tensor, pred: torch.Tensor, valid: torch.Tensor) -> tuple:
        """(images or None, true masks, predicted masks) at thumbnail size for this batch, on the device; all
        None with more classes than a uint8 mask holds beside the ignore value."""
        inputs, self.inputs = self.inputs, None
        if self.objective.num_outputs >= IGNORE_INDEX:
            return None, None, None
        h, w = int(target.shape[1]), int(target.shape[2])
        true = torch.where(valid, target, torch.full_like(target, IGNORE_INDEX))
        return (
            thumbnails.image_thumbnails(inputs, h, w),
            thumbnails.mask_thumbnails(true),
            thumbnails.mask_thumbnails(pred),
        )

    def name(self, k: int) -> str:
        return self.classes[k] if k < len(self.classes) else str(k)

    def result(self) -> dict:
        c = self.objective.num_outputs
        confusion = (
            self.confusion.cpu() if self.confusion is not None else torch.zeros(c * c, dtype=torch.int64)
        )
        matrix = confusion.view(c, c)
        metrics, ious = iou_metrics(matrix)
        pixels = matrix.sum(dim=1).tolist()
        per_class = [{"class": self.name(k), "iou": ious[k], "pixels": int(pixels[k])} for k in range(c)]
        worst = []
        if self.worst is not None:
            miou, pixel_acc, position, masks, images, true_thumbs, pred_thumbs = (
                p.cpu() if p is not None else None for p in self.worst
            )
            index = torch.cat(self.index_parts)[position]
            for i in range(int(miou.shape[0])):
                row = {
                    "split": self.split_name,
                    "index": int(index[i]),
                    "miou": float(miou[i]),
                    "pixel_acc": float(pixel_acc[i]),
                }
                if masks is not None:
                    row["predicted_mask"] = masks[i].tolist()
                if i < THUMBNAIL_COUNT and true_thumbs is not None:
                    row["thumbnail"] = _thumbnail(
                        None if images is None else images[i], true_thumbs[i], pred_thumbs[i]
                    )
                worst.append(row)
        out = self.common(metrics)
        out.update({"classes": [self.name(k) for k in range(c)], "per_class": per_class, "worst": worst})
        return json_safe(out)


def _thumbnail(image: torch.Tensor | None, true: torch.Tensor, predicted: torch.Tensor) -> dict:
    h, w = int(true.shape[0]), int(true.shape[1])
    out = {"height": h, "width": w, "channels": int(image.shape[2]) if image is not None else 0}
    if image is not None:
        out["image"] = thumbnails.encode(image)
    out.update({"true_mask": thumbnails.encode(true), "predicted_mask": thumbnails.encode(predicted)})
    return out
