"""torchvision's real datasets (MNIST, FashionMNIST, KMNIST, CIFAR-10/100, SVHN) loaded into uint8 tensors.

Files are checked before torchvision reads them, so a missing, truncated or corrupt file gets a message naming
it, the folder it belongs in, and how to get it (copy it there, or download=true where there is internet).
CIFAR's files are pickles: torchvision verifies their md5 sums first, so only the genuine files are unpickled.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path

import torch

from workbench.errors import JobError
from workbench.worker.data.idx import idx_length, idx_problem
from workbench.worker.data.imageops import parse_size, resize_uint8
from workbench.worker.data.registry import Source, SourceRequest, register_dataset
from workbench.worker.data.stores import TensorStore, check_budget, nbytes

MNIST_FILES = (  # (name, dimensions)
    ("train-images-idx3-ubyte", 3),
    ("train-labels-idx1-ubyte", 1),
    ("t10k-images-idx3-ubyte", 3),
    ("t10k-labels-idx1-ubyte", 1),
)
ONLINE_HINT = "or run with dataset.download=true on a machine with internet"


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _download(
    title: str, folder: Path, files_hint: str, fetch: Callable[[], object], request: SourceRequest
) -> None:
    """Run torchvision's own download; without a network say where the files go instead of a URLError."""
    request.log(f"downloading {title} into {folder} (skipped for files already there)")
    try:
        fetch()
    except Exception as exc:  # URLError, OSError, RuntimeError("File not found or corrupted."), ...
        raise JobError(
            f"could not download {title} into {folder}: {_short(exc)}. Without internet, put "
            f"{files_hint} in {folder}/ (copied from a machine that has them)."
        ) from None


def _resized(images: torch.Tensor, request: SourceRequest) -> torch.Tensor:
    size = parse_size(request.spec.image_size)
    if size is None:
        return images
    check_budget(
        nbytes(len(images), (images.shape[1], *size)),
        f"{len(images):,} images of {request.spec.name} resized to {size[0]}x{size[1]}",
        "set a smaller dataset.image_size",
    )
    return resize_uint8(images, size)


# -- MNIST and its look-alikes ----------------------------------------------------------------------


def _gunzip_missing(raw: Path) -> None:
    """Decompress name.gz to name where only the .gz is there, as torchvision's download would."""
    for name, _ in MNIST_FILES:
        target, packed = raw / name, raw / f"{name}.gz"
        if target.is_file() or not packed.is_file():
            continue
        partial = target.with_name(f".{name}.partial")
        try:
            with gzip.open(packed, "rb") as src, open(partial, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.replace(partial, target)
        except (OSError, EOFError) as exc:
            partial.unlink(missing_ok=True)
            raise JobError(
                f"{packed} is not a valid gzip file ({_short(exc)}); replace it with the original "
                f"file, {ONLINE_HINT}"
            ) from None


def _load_mnist_like(request: SourceRequest, cls_name: str, title: str) -> Source:
    from torchvision import datasets

    cls = getattr(datasets, cls_name)
    root = request.root
    raw = root / cls_name / "raw"
    files_hint = ", ".join(f"{name}(.gz)" for name, _ in MNIST_FILES)
    if request.spec.download:
        _download(
            title,
            raw,
            files_hint,
            lambda: (cls(str(root), train=True, download=True), cls(str(root), train=False, download=True)),
            request,
        )
    if raw.is_dir():
        _gunzip_missing(raw)
    missing = [name for name, _ in MNIST_FILES if not (raw / name).is_file()]
    if missing:
        where = f"{raw}/ has no {', '.join(missing)}" if raw.is_dir() else f"the folder {raw}/ does not exist"
        raise JobError(f"{title} is not in {root}: {where}. Put {files_hint} in {raw}/ {ONLINE_HINT}.")
    for name, ndim in MNIST_FILES:
        problem = idx_problem(raw / name, ndim)
        if problem:
            raise JobError(
                f"{raw / name} {problem}. Replace it with the original {title} file {ONLINE_HINT} "
                "(delete the bad file first)."
            )
    for part in ("train", "t10k"):
        images, labels = raw / f"{part}-images-idx3-ubyte", raw / f"{part}-labels-idx1-ubyte"
        if idx_length(images) != idx_length(labels):
            raise JobError(
                f"{images} holds {idx_length(images)} images but {labels} holds {idx_length(labels)} "
                f"labels; the two files must come from the same {title} release."
            )
    parts = {}
    for part, train in (("train", True), ("test", False)):
        ds = cls(str(root), train=train, download=False)
        labels = ds.targets.to(torch.int64)
        if labels.numel() and int(labels.max()) >= len(cls.classes):
            bad = raw / f"{'train' if train else 't10k'}-labels-idx1-ubyte"
            raise JobError(
                f"{bad} has label {int(labels.max())}, but {title} has {len(cls.classes)} classes; "
                f"replace it with the original file {ONLINE_HINT}."
            )
        parts[part] = TensorStore(_resized(ds.data.unsqueeze(1), request), labels)
    return Source(classes=list(cls.classes), parts=parts, root=str(root))


@register_dataset("mnist", has_test_split=True)
def load_mnist(request: SourceRequest) -> Source:
    """MNIST handwritten digits (torchvision), files under <root>/MNIST/raw/."""
    return _load_mnist_like(request, "MNIST", "MNIST")


@register_dataset("fashion_mnist", has_test_split=True)
def load_fashion_mnist(request: SourceRequest) -> Source:
    """Fashion-MNIST clothing images (torchvision), files under <root>/FashionMNIST/raw/."""
    return _load_mnist_like(request, "FashionMNIST", "Fashion-MNIST")


@register_dataset("kmnist", has_test_split=True)
def load_kmnist(request: SourceRequest) -> Source:
    """Kuzushiji-MNIST cursive Japanese (torchvision), files under <root>/KMNIST/raw/."""
    return _load_mnist_like(request, "KMNIST", "KMNIST")


# -- CIFAR ------------------------------------------------------------------------------------------


def _integrity_problems(folder: Path, expected: list[tuple[str, str]]) -> str:
    """ "" when every file is there with the right md5 sum, else what is missing and what is corrupt."""
    from torchvision.datasets.utils import check_integrity

    missing = [name for name, _ in expected if not (folder / name).is_file()]
    corrupt = [
        name for name, md5 in expected if name not in missing and not check_integrity(str(folder / name), md5)
    ]
    problems = ([f"missing: {', '.join(missing)}"] if missing else []) + (
        [f"corrupt (checksum does not match): {', '.join(corrupt)}"] if corrupt else []
    )
    return "; ".join(problems)


def _load_cifar(request: SourceRequest, cls_name: str, title: str) -> Source:
    from torchvision import datasets
    from torchvision.datasets.utils import check_integrity, extract_archive

    cls = getattr(datasets, cls_name)
    root = request.root
    folder = root / cls.base_folder
    expected = [(name, md5) for name, md5 in cls.train_list + cls.test_list]
    expected.append((cls.meta["filename"], cls.meta["md5"]))
    files_hint = ", ".join(name for name, _ in expected)
    if request.spec.download:
        _download(title, root, cls.filename, lambda: cls(str(root), train=True, download=True), request)
    problems = _integrity_problems(folder, expected)
    archive = root / cls.filename
    if problems and archive.is_file() and check_integrity(str(archive), cls.tgz_md5):
        request.log(f"extracting {archive}")
        extract_archive(str(archive), str(root))
        problems = _integrity_problems(folder, expected)
    if problems:
        raise JobError(
            f"{title} is missing or corrupt in {folder}/: {problems}. Put {files_hint} "
            f"in {folder}/ (they are in {cls.filename} from {cls.url}; that archive in {root}/ "
            f"works too) {ONLINE_HINT}."
        )
    parts = {}
    for part, train in (("train", True), ("test", False)):
        ds = cls(str(root), train=train, download=False)
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
        parts[part] = TensorStore(_resized(images, request), torch.as_tensor(ds.targets, dtype=torch.int64))
        classes = list(ds.classes)
    return Source(classes=classes, parts=parts, root=str(root))


@register_dataset("cifar10", has_test_split=True)
def load_cifar10(request: SourceRequest) -> Source:
    """CIFAR-10, 32x32 colour images in 10 classes (torchvision), under <root>/cifar-10-batches-py/."""
    return _load_cifar(request, "CIFAR10", "CIFAR-10")


@register_dataset("cifar100", has_test_split=True)
def load_cifar100(request: SourceRequest) -> Source:
    """CIFAR-100, 32x32 colour images in 100 classes (torchvision), under <root>/cifar-100-python/."""
    return _load_cifar(request, "CIFAR100", "CIFAR-100")


# -- SVHN -------------------------------------------------------------------------------------------


@register_dataset("svhn", has_test_split=True)
def load_svhn(request: SourceRequest) -> Source:
    """Street View House Numbers, 32x32 colour digits (torchvision), .mat files under <root>/SVHN/."""
    from torchvision.datasets import SVHN

    root = request.root
    expected = [(SVHN.split_list[s][1], SVHN.split_list[s][2]) for s in ("train", "test")]
    # torchvision keeps SVHN's files directly in the folder it is given; accept that layout, prefer a
    # subfolder.
    folder = root if (root / expected[0][0]).is_file() else root / "SVHN"
    files_hint = " and ".join(name for name, _ in expected)
    if request.spec.download:
        _download(
            "SVHN",
            folder,
            files_hint,
            lambda: (
                SVHN(str(folder), split="train", download=True),
                SVHN(str(folder), split="test", download=True),
            ),
            request,
        )
    problems = _integrity_problems(folder, expected)
    if problems:
        raise JobError(
            f"SVHN is missing or corrupt in {folder}/: {problems}. Put {files_hint} "
            f"(from http://ufldl.stanford.edu/housenumbers/) in {folder}/ {ONLINE_HINT}."
        )
    parts = {}
    for part in ("train", "test"):
        ds = SVHN(str(folder), split=part, download=False)
        images = torch.from_numpy(ds.data).contiguous()  # already (N,3,32,32)
        parts[part] = TensorStore(_resized(images, request), torch.from_numpy(ds.labels).to(torch.int64))
    return Source(classes=[str(d) for d in range(10)], parts=parts, root=str(folder))
