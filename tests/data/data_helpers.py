"""Real-format files for the data tests: tiny IDX datasets for torchvision's loaders and small image
folders."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
from PIL import Image

from workbench.worker.data.idx import write_idx

MNIST_FOLDERS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST", "kmnist": "KMNIST"}


def write_mnist_like(
    root: Path, name: str = "mnist", n_train: int = 60, n_test: int = 20, seed: int = 0, gz: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write <root>/<Folder>/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte; returns what was written."""
    rng = np.random.default_rng(seed)
    raw = root / MNIST_FOLDERS[name] / "raw"
    written = {}
    for part, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        for kind, array in (("images-idx3", images), ("labels-idx1", labels)):
            path = raw / f"{part}-{kind}-ubyte"
            write_idx(path, array)
            if gz:
                path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
                path.unlink()
        written[part] = (images, labels)
    return written


def save_image(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def make_image_folder(
    root: Path,
    classes=("cat", "dog", "fish"),
    per_class: int = 4,
    size=(12, 10),
    gray: bool = False,
    seed: int = 0,
) -> list[Path]:
    """Good PNG and JPEG images (alternating) under root/<class>/, some in a nested folder; returns their
    paths."""
    rng = np.random.default_rng(seed)
    paths = []
    for c, name in enumerate(classes):
        for i in range(per_class):
            shape = size if gray else (*size, 3)
            array = rng.integers(0, 256, size=shape, dtype=np.uint8)
            folder = root / name / ("nested" if i == per_class - 1 else "")
            suffix = ".png" if (i + c) % 2 == 0 else ".jpg"
            paths.append(save_image(folder / f"img{i}{suffix}", array))
    return paths


def add_bad_files(root: Path, cls: str = "cat") -> tuple[Path, Path]:
    """A PNG of random bytes and a zero-byte JPEG in one class folder."""
    corrupt = root / cls / "corrupt.png"
    corrupt.write_bytes(np.random.default_rng(1).integers(0, 256, size=500, dtype=np.uint8).tobytes())
    empty = root / cls / "empty.jpg"
    empty.write_bytes(b"")
    return corrupt, empty


class Recorder:
    """An `emit` for TaskContext/run_task that keeps every event."""

    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def __call__(self, msg_type: str, content: dict, buffers: list) -> None:
        self.events.append((msg_type, content))

    def of(self, msg_type: str) -> list[dict]:
        return [content for kind, content in self.events if kind == msg_type]
