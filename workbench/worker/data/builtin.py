"""Datasets that need no files: scikit-learn's bundled 8x8 `digits` (the offline default) and random `fake`
images.

`fake` follows torchvision's FakeData recipe exactly (per-index seed, randn, then the label) but with a
private generator, because FakeData reseeds torch's global generator, which a training job on another thread
shares.
"""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.worker.data.imageops import parse_size, resize_uint8
from workbench.worker.data.registry import Source, SourceRequest, register_dataset
from workbench.worker.data.stores import TensorStore, check_budget, nbytes

FAKE_DEFAULT_SIZE = (32, 32)  # FakeData's own default (224x224) makes 1000 samples weigh 150 MB
FAKE_CHANNELS = 3


@register_dataset("digits", has_test_split=False)
def load_digits(request: SourceRequest) -> Source:
    """scikit-learn's 1,797 8x8 handwritten digits, shipped inside the package (works offline)."""
    images_16, targets = _digits_arrays()
    # Pixel values are 0..16; scale to the 0..255 every other dataset uses.
    pixels = torch.from_numpy(images_16).mul(255.0 / 16.0).round_().clamp_(0, 255).to(torch.uint8)
    images = pixels.unsqueeze(1)
    size = parse_size(request.spec.image_size)
    if size is not None:
        check_budget(
            nbytes(len(images), (1, *size)),
            f"the digits resized to {size[0]}x{size[1]}",
            "set a smaller dataset.image_size",
        )
        images = resize_uint8(images, size)
    labels = torch.from_numpy(targets).to(torch.int64)
    return Source(classes=[str(c) for c in range(10)], parts={"all": TensorStore(images, labels)})


def _digits_arrays():
    """(images (N, 8, 8) float64 in 0..16, targets (N,) int64), read straight from the CSV scikit-learn ships:
    importing sklearn itself costs seconds (16 s on a slow machine) for one small file; through sklearn where
    the file is not where it keeps it today."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path, "rt") as handle:
                data = np.loadtxt(handle, delimiter=",")
            return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits as sklearn_digits

    bunch = sklearn_digits()
    return bunch.images, bunch.target.astype(np.int64)


def fake_sample(
    index: int, offset: int, shape: tuple[int, int, int], num_classes: int, generator: torch.Generator
) -> tuple[torch.Tensor, int]:
    """Sample `index` of torchvision's FakeData(random_offset=offset): the same pixels and label."""
    generator.manual_seed(index + offset)
    image = torch.randn(*shape, generator=generator).mul_(255).byte()
    label = int(torch.randint(0, num_classes, size=(1,), dtype=torch.long, generator=generator)[0])
    return image, label


@register_dataset("fake", has_test_split=False)
def load_fake(request: SourceRequest) -> Source:
    """Random images and labels (torchvision FakeData): dataset.size, dataset.image_size, dataset.num_classes,
    seed."""
    spec = request.spec
    height, width = parse_size(spec.image_size) or FAKE_DEFAULT_SIZE
    shape = (FAKE_CHANNELS, height, width)
    check_budget(
        nbytes(spec.size, shape),
        f"the fake dataset of {spec.size:,} images of {'x'.join(map(str, shape))}",
        "lower dataset.size or dataset.image_size",
    )
    offset = spec.seed * spec.size  # a different seed gives different images, yet each is reproducible
    images = torch.empty((spec.size, *shape), dtype=torch.uint8)
    labels = torch.empty(spec.size, dtype=torch.int64)
    generator = torch.Generator()
    for i in range(spec.size):
        images[i], labels[i] = fake_sample(i, offset, shape, spec.num_classes, generator)
        if i % 4096 == 0:
            request.progress(i, spec.size, "generating fake images")
    classes = [str(c) for c in range(spec.num_classes)]
    return Source(classes=classes, parts={"all": TensorStore(images, labels)})
