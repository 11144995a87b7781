"""What the Data tab shows of a user's own Dataset (`file:`) and of any dataset's targets: thumbnails with
segmentation masks blended in, per-sample tensor summaries for a table, the tasks a sample can serve, and a
target histogram over a bounded number of train samples. Worker side: imports torch, never Qt.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from workbench.errors import JobError
from workbench.worker.data.imageops import histogram, thumbnail_size, to_hwc
from workbench.worker.objectives.detect import TASKS, check_target, detect_task

HISTOGRAM_SAMPLES = 512  # train samples the target histogram reads: bounded, so data.info stays quick
VALUE_BINS = 30
IGNORE_INDEX = 255  # segmentation's "not labelled" pixels: neither blended nor counted as a class
MASK_ALPHA = 0.5
# One colour per class (tab10, then more), blended over the image; class 0 is background and stays unblended.
PALETTE = np.array(
    [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
        (174, 199, 232),
        (255, 187, 120),
        (152, 223, 138),
        (255, 152, 150),
        (197, 176, 213),
        (196, 156, 148),
        (247, 182, 210),
        (199, 199, 199),
        (219, 219, 141),
        (158, 218, 229),
    ],
    dtype=np.float32,
)


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


# -- what kind of sample -------------------------------------------------------------------------------------
def is_image(x) -> bool:
    """An input the grid can draw: one tensor C×H×W with C in 1, 3, 4, of real numbers."""
    return (
        isinstance(x, torch.Tensor)
        and x.dim() == 3
        and int(x.shape[0]) in (1, 3, 4)
        and not x.is_complex()
        and x.shape[1] > 0
        and x.shape[2] > 0
    )


def is_mask(x, y) -> bool:
    """A target that is an integer class map of the input's H×W (1×H×W too)."""
    if (
        not (isinstance(y, torch.Tensor) and is_image(x))
        or y.is_floating_point()
        or y.is_complex()
        or y.dtype == torch.bool
    ):
        return False
    if y.dim() == 3 and y.shape[0] == 1:
        y = y[0]
    return y.dim() == 2 and tuple(y.shape) == tuple(x.shape[-2:])


def view_of(x, y) -> str:
    """ "images" when the input is image-like, else "table"."""
    return "images" if is_image(x) else "table"


# -- images --------------------------------------------------------------------------------------------------
def image_uint8(x: torch.Tensor) -> torch.Tensor:
    """uint8 C×H×W (C 1 or 3) to draw: uint8 as it is, 0..1 floats ×255, anything else stretched over its own
    min..max (a normalised image has negative values); a 4th channel (alpha) is dropped."""
    x = x.detach().cpu()
    if x.shape[0] == 4:
        x = x[:3]
    if x.dtype == torch.uint8:
        return x.contiguous()
    integer = not x.is_floating_point()
    x = x.to(torch.float32)
    x = torch.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    low, high = float(x.min()), float(x.max())
    if low >= 0.0 and high <= 1.0:
        scaled = x * 255
    elif integer and low >= 0.0 and high <= 255.0:  # integer pixel values
        scaled = x
    else:
        scaled = (x - low) * (255.0 / (high - low)) if high > low else torch.zeros_like(x)
    return scaled.round_().clamp_(0, 255).to(torch.uint8)


def mask_map(y: torch.Tensor) -> torch.Tensor:
    """An integer H×W map of class ids (a 1×H×W target loses its first axis)."""
    y = y.detach().cpu()
    return (y[0] if y.dim() == 3 else y).to(torch.int64)


def blend_mask(image: torch.Tensor, mask: torch.Tensor, alpha: float = MASK_ALPHA) -> torch.Tensor:
    """uint8 3×H×W: the image (grey made RGB) with each class > 0 blended in its palette colour; 0
    (background) and 255 (ignored) pixels keep the image."""
    rgb = image.expand(3, -1, -1) if image.shape[0] == 1 else image[:3]
    out = rgb.to(torch.float32).permute(1, 2, 0).numpy().copy()
    ids = mask.numpy()
    labelled = (ids > 0) & (ids != IGNORE_INDEX)
    if labelled.any():
        colours = PALETTE[ids[labelled] % len(PALETTE)]
        out[labelled] = (1 - alpha) * out[labelled] + alpha * colours
    return torch.from_numpy(np.clip(np.round(out), 0, 255).astype(np.uint8)).permute(2, 0, 1).contiguous()


def class_colour(class_id: int) -> list[int]:
    return [int(v) for v in PALETTE[class_id % len(PALETTE)]]


def _resize(image: torch.Tensor, size: tuple[int, int], nearest: bool = False) -> torch.Tensor:
    """uint8 C×H×W to `size`: area-smooth for images, nearest for class maps (a class id must stay one)."""
    if tuple(image.shape[-2:]) == tuple(size):
        return image
    batch = image.unsqueeze(0).to(torch.float32)
    if nearest:
        out = F.interpolate(batch, size=size, mode="nearest")
    else:
        out = F.interpolate(batch, size=size, mode="bilinear", align_corners=False, antialias=True)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


def thumbnail_page(samples: list[tuple], limit: int) -> dict:
    """Thumbnails of (input, target) pairs, uint8 n×H×W×C on one canvas size (smaller ones padded with black),
    masks blended in; with masks, also "masks" (uint8 n×H×W class ids, 255 outside each sample)."""
    thumbs, maps = [], []
    with_masks = any(is_mask(x, y) for x, y in samples)
    for x, y in samples:
        image = image_uint8(x)
        size = thumbnail_size(int(image.shape[1]), int(image.shape[2]), limit)
        mask = mask_map(y) if is_mask(x, y) else None
        if mask is not None:
            image = blend_mask(image, mask)
        elif with_masks and image.shape[0] == 1:
            image = image.expand(3, -1, -1)
        thumbs.append(_resize(image, size))
        if with_masks:
            small = (
                mask.clamp(0, IGNORE_INDEX).to(torch.uint8)[None]
                if mask is not None
                else torch.full((1, *image.shape[-2:]), IGNORE_INDEX, dtype=torch.uint8)
            )
            maps.append(_resize(small, size, nearest=True)[0])
    channels = max((int(t.shape[0]) for t in thumbs), default=1)
    height = max((int(t.shape[1]) for t in thumbs), default=min(limit, 1))
    width = max((int(t.shape[2]) for t in thumbs), default=min(limit, 1))
    images = np.zeros((len(thumbs), height, width, channels), dtype=np.uint8)
    masks = np.full((len(thumbs), height, width), IGNORE_INDEX, dtype=np.uint8)
    for i, thumb in enumerate(thumbs):
        if thumb.shape[0] != channels:  # a grey sample among colour ones
            thumb = thumb.expand(channels, -1, -1)
        images[i, : thumb.shape[1], : thumb.shape[2]] = to_hwc(thumb)
        if with_masks:
            masks[i, : maps[i].shape[0], : maps[i].shape[1]] = maps[i].numpy()
    out = {"images": images}
    if with_masks:
        out["masks"] = masks
    return out


# -- summaries -----------------------------------------------------------------------------------------------
def summary(t: torch.Tensor, name: str | None = None) -> dict:
    """{"shape", "dtype", "min", "max", "mean"} of a tensor (numbers as floats; None when it is empty)."""
    t = t.detach().cpu()
    out: dict = {"shape": list(t.shape), "dtype": _dtype(t), "min": None, "max": None, "mean": None}
    if name is not None:
        out["name"] = name
    if t.numel() and not t.is_complex():
        values = t.to(torch.float64)
        out.update(min=float(values.min()), max=float(values.max()), mean=float(values.mean()))
    return out


def input_summaries(x) -> list[dict]:
    """One summary per input tensor: a tuple in order, a dict with each entry's name."""
    if isinstance(x, tuple):
        return [
            summary(t, f"input {i}")
            if isinstance(t, torch.Tensor)
            else {"name": f"input {i}", **input_summaries(t)[0]}
            for i, t in enumerate(x)
        ]
    if isinstance(x, dict):
        return [
            summary(t, str(k)) if isinstance(t, torch.Tensor) else {"name": str(k), **input_summaries(t)[0]}
            for k, t in x.items()
        ]
    return [summary(x)]


def target_text(y: torch.Tensor, classes: list[str] | None = None) -> str:
    """A short caption for a target: a class name, a number, a short vector, or the classes a mask shows."""
    y = y.detach().cpu()
    if y.dim() == 0:
        value = y.item()
        if isinstance(value, bool) or not y.is_floating_point():
            index = int(value)
            return classes[index] if classes and 0 <= index < len(classes) else str(index)
        return f"{value:.4g}"
    if y.numel() <= 6 and y.dim() == 1:
        values = y.tolist()
        return "[" + ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in values) + "]"
    if not y.is_floating_point() and y.dim() >= 2:  # a class map: the classes in it other than background
        ids = sorted(int(v) for v in torch.unique(y) if 0 < int(v) != IGNORE_INDEX)
        names = [classes[i] if classes and i < len(classes) else str(i) for i in ids]
        return (", ".join(names[:4]) + ("…" if len(names) > 4 else "")) if names else "background only"
    return f"{_dtype(y)} {'×'.join(map(str, y.shape))}"


def label_of(y: torch.Tensor) -> int:
    """The class index of an integer scalar target; -1 for any other target (the GUI's label role)."""
    if y.dim() == 0 and not y.is_floating_point() and not y.is_complex():
        return int(y.item())
    return -1


def table_row(index: int, x, y: torch.Tensor, describer=None, classes: list[str] | None = None) -> dict:
    """A table row: the input's summaries, the target; with a describer (sequence_views), the input itself as
    its kind shows it (ids and text, a signal's values, a row of features)."""
    row = {
        "index": int(index),
        "inputs": input_summaries(x),
        "target": {**summary(y), "text": target_text(y, classes)},
    }
    if describer is not None:
        row["sample"] = describer.describe(x)
    return row


# -- tasks ---------------------------------------------------------------------------------------------------
def tasks_of(x, y) -> dict:
    """{"auto": task or None, "why": text, "unavailable": {task: reason}} from one sample, as the wizard shows
    it: what task=auto would pick, and the tasks this sample's target cannot serve, each with the reason."""
    try:
        auto, why = detect_task(x, y)
    except JobError as exc:
        auto, why = None, str(exc)
    unavailable = {}
    for task in TASKS:
        try:
            check_target(task, x, y)
        except JobError as exc:
            unavailable[task] = str(exc)
    return {"auto": auto, "why": why, "unavailable": unavailable}


# -- the target histogram ------------------------------------------------------------------------------------
def class_histogram(names: list[str], counts: list[int], sampled: int, total: int) -> dict:
    """A built-in set's class counts (the whole train split) in the target_histogram shape."""
    return {
        "kind": "classes",
        "names": list(names),
        "counts": [int(c) for c in counts],
        "sampled": int(sampled),
        "total": int(total),
    }


def names_of(source, count: int = 0, attrs=("classes", "labels", "label_names")) -> list[str]:
    """Names from the user's dataset object (`classes` or the like, at least `count` long), else
    "0".."count-1"."""
    from torch.utils.data import Subset

    while source is not None:
        for attr in attrs:
            named = getattr(source, attr, None)
            if (
                isinstance(named, list | tuple)
                and len(named) >= count
                and all(isinstance(n, str) for n in named)
            ):
                return [str(n) for n in named]
        source = source.dataset if isinstance(source, Subset) else None
    return [str(i) for i in range(count)]


def target_histogram(
    split,
    task: str | None,
    classes: list[str],
    limit: int = HISTOGRAM_SAMPLES,
    progress: Callable[[int, int, str], None] | None = None,
    check_stop: Callable[[], None] | None = None,
    inputs: Callable[[object], None] | None = None,
) -> dict | None:
    """The targets of the first `limit` samples of a user split, by task: class counts, per-label counts, a
    value histogram (with edges) or pixels per class; "sampled" says how many were read, "total" of how many.
    `inputs`, when given, sees each sample's input on the way (the input histograms read the same samples
    once)."""
    total = len(split)
    n = min(limit, total)
    class_counts = np.zeros(0, dtype=np.int64)
    values: list[np.ndarray] = []
    for i in range(n):
        if check_stop is not None:
            check_stop()
        x, y = split.sample(i)
        if inputs is not None:
            inputs(x)
        y = y.detach().cpu()
        if task in ("classification", "segmentation"):
            ids = y.reshape(-1).to(torch.int64).numpy()
            ids = ids[(ids >= 0) & (ids != IGNORE_INDEX)]
            found = np.bincount(ids, minlength=len(class_counts)) if ids.size else np.zeros(0, np.int64)
            if found.size > class_counts.size:
                class_counts = np.pad(class_counts, (0, found.size - class_counts.size))
            class_counts[: found.size] += found
        elif task == "multilabel":
            row = y.reshape(-1).to(torch.float64).numpy()
            if row.size > class_counts.size:
                class_counts = np.pad(class_counts, (0, row.size - class_counts.size))
            class_counts[: row.size] += (row > 0.5).astype(np.int64)
        elif not y.is_complex() and y.dtype != torch.bool:
            values.append(y.reshape(-1).to(torch.float64).numpy())
        if progress is not None and ((i + 1) % 32 == 0 or i + 1 == n):
            progress(i + 1, n, f"reading the targets of {n:,} train samples {i + 1:,}/{n:,}")
    head = {"sampled": n, "total": total}
    if task in ("classification", "segmentation", "multilabel"):
        count = len(class_counts)
        if task == "classification" and classes:
            names = list(classes) + [str(i) for i in range(len(classes), count)]
        else:
            names = names_of(split.source, count)
        counts = np.pad(class_counts, (0, max(0, len(names) - count)))
        kind = {"classification": "classes", "segmentation": "pixels", "multilabel": "labels"}[task]
        return {"kind": kind, "names": names, "counts": [int(c) for c in counts], **head}
    if not values:
        return None
    flat = np.concatenate(values)
    flat = flat[np.isfinite(flat)]
    if not flat.size:
        return None
    low, high = float(flat.min()), float(flat.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    counts, edges = np.histogram(flat, bins=VALUE_BINS, range=(low, high))
    return {
        "kind": "values",
        "names": [],
        "counts": [int(c) for c in counts],
        "edges": [float(e) for e in edges],
        **head,
    }


# -- one sample at full size ---------------------------------------------------------------------------------
def sample_view(x, y: torch.Tensor, classes: list[str], describer=None) -> dict:
    """data.sample's part for a user sample: the image (masks blended) and raw mask when image-like, the
    tensor summaries always, the target as text; with a describer (sequence_views), the input as its kind
    shows it."""
    out = {
        "view": view_of(x, y),
        "inputs": input_summaries(x),
        "target": {**summary(y), "text": target_text(y, classes)},
        "label": label_of(y),
    }
    if describer is not None and not is_image(x):
        out["sample"] = describer.describe(x)
    out["class_name"] = out["target"]["text"]
    if is_image(x):
        image = image_uint8(x)
        out["raw_image"] = to_hwc(image)
        out["histogram"] = histogram(image)
        if is_mask(x, y):
            mask = mask_map(y)
            out["image"] = to_hwc(blend_mask(image, mask))
            out["mask"] = mask.clamp(0, IGNORE_INDEX).to(torch.uint8).numpy()
            ids = sorted(int(v) for v in torch.unique(mask) if 0 < int(v) != IGNORE_INDEX)
            out["mask_classes"] = [
                {"id": i, "name": classes[i] if i < len(classes) else str(i), "colour": class_colour(i)}
                for i in ids
            ]
        else:
            out["image"] = out["raw_image"]
    return out
