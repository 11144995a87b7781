"""Detection batches as torchvision's detectors take them: a list of images (sizes may differ) and a list of
target dicts, never stacked."""

from __future__ import annotations


def detection_collate(batch):
    """[(image, target), ...] -> (list of images, list of targets)."""
    images, targets = zip(*batch) if batch else ((), ())
    return list(images), list(targets)
