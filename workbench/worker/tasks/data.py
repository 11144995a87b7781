"""Dataset queries for the GUI and `workbench data info`: `data.info`, `data.page` (thumbnails) and
`data.sample`.

The result shapes are a contract with the GUI's dataset panel. torch loads inside the tasks, not at import,
so listing the worker's tasks stays cheap.
"""

from __future__ import annotations

from workbench.errors import JobError
from workbench.specs import DataInfoSpec, DataSpec
from workbench.worker.registry import register_task

SPLIT_NAMES = ("train", "val", "test")
MAX_PAGE = 2000  # thumbnails in one reply: a few MB at most
MAX_THUMB = 1024


def _check_keys(spec: dict, allowed: tuple[str, ...]) -> None:
    if not isinstance(spec, dict):
        raise JobError(f"the request must be a table of fields ({', '.join(allowed)}), not {spec!r}")
    for key in spec:
        if key not in allowed:
            raise JobError(f"{key}: unknown field; allowed fields: {', '.join(allowed)}")


def _int_field(spec: dict, key: str, default: int, low: int | None = None, high: int | None = None) -> int:
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise JobError(f"{key}: {value!r} is not an integer")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = " and ".join(
            b for b in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "") if b
        )
        raise JobError(f"{key}: {value!r} is out of range; must be {bounds}")
    return value


def _split_field(spec: dict) -> str:
    split = spec.get("split", "train")
    if split not in SPLIT_NAMES:
        raise JobError(f"split: {split!r} is not allowed; choose one of: {', '.join(SPLIT_NAMES)}")
    return split


def _dataset_field(spec: dict) -> DataSpec:
    value = spec.get("dataset", {})
    if isinstance(value, DataSpec):
        return value
    if not isinstance(value, dict):
        raise JobError(f"dataset: {value!r} is not a table of dataset fields")
    return DataSpec.from_dict(value, path="dataset")  # a SpecError names the field, e.g. dataset.image_size


@register_task("data.info", kind="query", spec=DataInfoSpec, creates_run=False)
def info(spec: DataInfoSpec, ctx):
    """Sizes, classes, class counts, shape and mean/std of a dataset; image folders are decoded in full. Every
    dataset also gets "tasks" (what task=auto picks, why, and the tasks it cannot serve) and
    "target_histogram"."""
    from workbench.worker.data import load_dataset
    from workbench.worker.data.registry import is_user_dataset
    from workbench.worker.data.user_views import class_histogram

    dataset = load_dataset(spec.dataset, ctx=ctx)
    if getattr(dataset, "is_detection", False):  # boxes per image: its own summary and histograms
        from workbench.worker.data.detection.views import summary

        return summary(dataset)
    # The user's own Dataset or LightningDataModule: counts, shapes and target, no statistics.
    if is_user_dataset(spec.dataset.name):
        try:
            return _user_info(dataset, ctx)
        finally:
            dataset.release()
    dataset.decode_all(
        progress=lambda done, total, text: ctx.progress(done, total, text), check_stop=ctx.check_stop
    )
    mean, std = dataset.statistics(progress=lambda done, total, text: ctx.progress(done, total, text))
    counts = {name: split.class_counts() for name, split in dataset.splits.items()}
    train = sum(counts["train"])
    return {
        "tasks": _builtin_tasks(dataset),
        "target_histogram": class_histogram(dataset.classes, counts["train"], train, train),
        "dataset": dataset.name,
        "classes": list(dataset.classes),
        "num_samples": {name: sum(c) for name, c in counts.items()},
        "class_counts": counts,
        "sample_shape": list(dataset.sample_shape),
        "mean": mean,
        "std": std,
        "skipped_files": dataset.skipped_files,
        "in_memory": dataset.in_memory,
        "root": dataset.root,
    }


def _builtin_tasks(dataset) -> dict:
    """The tasks a built-in image set serves, from its first sample (an image and an integer label)."""
    import torch

    from workbench.worker.data.user_views import tasks_of

    split = dataset.splits["train"]
    image = torch.zeros(tuple(dataset.sample_shape), dtype=torch.uint8)  # its pixels do not decide the task
    label = split.labels[0] if len(split) else torch.tensor(0, dtype=torch.int64)
    return tasks_of(image, label.to(torch.int64))


def _user_info(dataset, ctx) -> dict:
    """data.info of a user's Dataset: its description, the tasks its first sample serves, the target histogram
    over the first train samples (cancellable)."""
    from workbench.worker.data.sequence_views import InputStats, input_kind
    from workbench.worker.data.user_views import HISTOGRAM_SAMPLES, target_histogram, tasks_of, view_of

    result = dataset.describe()
    x, y = dataset.first_sample()
    result["tasks"] = tasks_of(x, y)
    result["view"] = view_of(x, y)
    result["input_kind"] = input_kind(x)
    train = dataset.splits["train"]
    stats = InputStats(getattr(train, "source", None))
    result["target_histogram"] = target_histogram(
        train,
        result["tasks"]["auto"],
        result["classes"],
        HISTOGRAM_SAMPLES,
        progress=lambda done, total, text: ctx.progress(done, total, text),
        check_stop=ctx.check_stop,
        inputs=stats.add,
    )
    result["input_histogram"] = stats.result(min(HISTOGRAM_SAMPLES, len(train)), len(train))
    return result


@register_task("data.page", kind="query", creates_run=False)
def page(spec: dict, ctx):
    """A page of thumbnails of one split, optionally of one class: uint8 (n,H,W,C) and their indices and
    labels."""
    _check_keys(spec, ("dataset", "split", "offset", "count", "label", "thumb_size", "request_id"))
    dataset_spec = _dataset_field(spec)
    split_name = _split_field(spec)
    offset = _int_field(spec, "offset", 0, low=0)
    count = _int_field(spec, "count", 200, low=0, high=MAX_PAGE)
    label = _int_field(spec, "label", -1, low=-1)
    thumb_size = _int_field(spec, "thumb_size", 64, low=1, high=MAX_THUMB)
    request_id = _int_field(spec, "request_id", 0)

    import torch

    from workbench.worker.data import load_dataset
    from workbench.worker.data.imageops import thumbnail_size, thumbnails

    dataset = load_dataset(dataset_spec, ctx=ctx)
    if getattr(dataset, "is_detection", False):  # thumbnails with their boxes drawn
        from workbench.worker.data.detection.views import page as detection_page

        return detection_page(dataset, split_name, offset, count, thumb_size, request_id, ctx)
    if dataset_spec.name.startswith("file:"):
        try:
            return _user_page(dataset, split_name, offset, count, label, thumb_size, request_id, ctx)
        finally:
            dataset.release()
    if label >= len(dataset.classes):
        raise JobError(
            f"label: {label} is out of range; {dataset.name} has {len(dataset.classes)} classes "
            f"(0..{len(dataset.classes) - 1}), or use -1 for all"
        )
    split = dataset.splits[split_name]
    keep = split.good()  # files already known not to decode are not listed
    if label >= 0:
        keep &= split.labels == label
    listed = torch.nonzero(keep).flatten() if not bool(keep.all()) else torch.arange(len(split))
    chosen = listed[offset : offset + count]
    channels, height, width = dataset.sample_shape
    if chosen.numel():
        images = thumbnails(split.images(chosen), thumb_size)
    else:
        import numpy as np

        thumb_h, thumb_w = thumbnail_size(height, width, thumb_size)
        images = np.zeros((0, thumb_h, thumb_w, channels), dtype=np.uint8)
    return {
        "request_id": request_id,
        "split": split_name,
        "offset": offset,
        "total": int(listed.numel()),
        "indices": chosen.tolist(),
        "labels": split.labels[chosen].tolist(),
        "images": images,
    }


@register_task("data.sample", kind="query", creates_run=False)
def sample(spec: dict, ctx):
    """One sample at full size: the image, its augmented version for a seed, a histogram, label and file."""
    _check_keys(spec, ("dataset", "split", "index", "augment_seed"))
    dataset_spec = _dataset_field(spec)
    split_name = _split_field(spec)
    index = _int_field(spec, "index", 0, low=0)
    seed = _int_field(spec, "augment_seed", 0, low=0)

    from workbench.worker.data import augment_uint8, load_dataset
    from workbench.worker.data.imageops import histogram, to_hwc

    dataset = load_dataset(dataset_spec, ctx=ctx)
    if getattr(dataset, "is_detection", False):  # the image with its boxes and class names
        from workbench.worker.data.detection.views import sample as detection_sample

        return detection_sample(dataset, split_name, index)
    if dataset_spec.name.startswith("file:"):
        try:
            return _user_sample(dataset, split_name, index)
        finally:
            dataset.release()
    split = dataset.splits[split_name]
    if index >= len(split):
        raise JobError(
            f"index: {index} is out of range; the {split_name} split of {dataset.name} has "
            f"{len(split)} samples (0..{len(split) - 1})"
        )
    images, ok = split.fetch([index])
    path = split.path(index)
    if not bool(ok[0]):
        reason = next(
            (s["reason"] for s in dataset.skipped_files if s["path"] == path), "it cannot be decoded"
        )
        raise JobError(f"{path}: {reason}; this file is skipped in training. Replace or remove it.")
    augmented = augment_uint8(dataset.augment, images, seed)
    mean, std = dataset.normalization()
    label = int(split.labels[index])
    return {
        "index": index,
        "split": split_name,
        "label": label,
        "class_name": dataset.classes[label],
        "shape": list(augmented.shape[1:]),
        "image": to_hwc(images[0]),
        "augmented": to_hwc(augmented[0]),
        "histogram": histogram(images[0]),
        "path": path,
        "mean": mean,
        "std": std,
    }


def _user_page(
    dataset, split_name: str, offset: int, count: int, label: int, thumb_size: int, request_id: int, ctx
) -> dict:
    """A page of a user's Dataset, read through its own __getitem__ in this process: thumbnails (masks blended
    in) when the input is image-like ("view": "images"), else one row of tensor summaries per sample
    ("table")."""
    from workbench.worker.data.user_views import (
        label_of,
        names_of,
        table_row,
        target_text,
        thumbnail_page,
        view_of,
    )

    if label >= 0:  # a class filter would read every sample of the split to find its members
        raise JobError(
            f"label: {dataset.name} is your own Dataset; its samples are not filtered by class, use -1"
        )
    split = dataset.splits[split_name]
    total = len(split)
    chosen = list(range(min(offset, total), min(offset + count, total)))
    samples = []
    for done, index in enumerate(chosen):
        ctx.check_stop()
        # a failing __getitem__ is a JobError naming the sample, file and line
        samples.append(split.sample(index))
        ctx.progress(done + 1, len(chosen), f"reading {split_name} samples {done + 1}/{len(chosen)}")
    from workbench.worker.data.sequence_views import Describer, input_kind

    names = names_of(split.source)  # the Dataset's own `classes`, if it has them: captions name the classes
    x0, y0 = samples[0] if samples else dataset.first_sample()
    view = view_of(x0, y0)
    result = {
        "request_id": request_id,
        "split": split_name,
        "offset": offset,
        "total": total,
        "indices": chosen,
        "labels": [label_of(y) for _, y in samples],
        "captions": [target_text(y, names) for _, y in samples],
        "view": view,
        "input_kind": input_kind(x0),
    }
    if view == "images":
        result.update(thumbnail_page(samples, thumb_size))
    else:
        describer = Describer(split.source)  # the user's decode / vocab, found once for the page
        result["rows"] = [
            table_row(i, x, y, describer, names) for i, (x, y) in zip(chosen, samples, strict=True)
        ]
    return result


def _user_sample(dataset, split_name: str, index: int) -> dict:
    """One sample of a user's Dataset: the image (mask blended, the raw mask too) or the tensor summaries, and
    the target as text."""
    from workbench.worker.data.sequence_views import Describer
    from workbench.worker.data.user_views import names_of, sample_view

    split = dataset.splits[split_name]
    if index >= len(split):
        raise JobError(
            f"index: {index} is out of range; the {split_name} split of {dataset.name} has "
            f"{len(split)} samples (0..{len(split) - 1})"
        )
    x, y = split.sample(index)
    classes = names_of(split.source)
    view = sample_view(x, y, classes, Describer(split.source))
    first = view["inputs"][0]
    return {
        "index": index,
        "split": split_name,
        "shape": first["shape"],
        "path": dataset.root,
        "user": True,
        **view,
    }
