"""`imagefolder`: a root with one folder per class. A fast scan (os.scandir, no decoding) and a lazily decoded
store.

Images are decoded with PIL on first use, converted to one mode (L when every probed image is grayscale, else
RGB) and resized to one size; within the memory budget each decoded image is kept in one uint8 tensor, so the
dataset ends up held in memory like the others. A file that fails to decode, or whose header claims a
decompression bomb's size, is skipped and reported by path, as is a folder link that loops back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from workbench.errors import JobError
from workbench.specs import MAX_IMAGE_SIDE
from workbench.worker.data.imageops import parse_size
from workbench.worker.data.registry import Source, SourceRequest, register_dataset
from workbench.worker.data.stores import ImageStore, check_budget, memory_budget, nbytes

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".ppm", ".pgm", ".pbm", ".bmp", ".tif", ".tiff", ".webp", ".gif"}
)
GRAY_MODES = frozenset({"1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
PROBE_COUNT = 32  # images whose headers decide the mode and size: enough to see a mixed folder, cheap to open
LRU_BYTES = 256 * 2**20  # decoded images kept when the dataset is too big to hold whole
LRU_MIN = 16  # images the cache keeps however large they are, so a batch's worth is not decoded twice
# PIL's own decompression-bomb threshold (Image.MAX_IMAGE_PIXELS, where it warns): more than any camera but
# medium format takes. A file whose header claims more is skipped unread: a 69-byte PNG can claim 12000x12000.
MAX_DECODE_PIXELS = 89_478_485
# Images a store read from its files holds at once at the least: its cache's minimum and a decoded group as
# large.
STREAM_MIN_IMAGES = 2 * LRU_MIN

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _decode_pool() -> ThreadPoolExecutor:
    # PIL releases the GIL while it decodes, so threads decode in parallel without a process pool.
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2), thread_name_prefix="decode")
        return _pool


# -- scanning ---------------------------------------------------------------------------------------


@dataclass
class FolderScan:
    root: Path
    classes: list[str]
    paths: list[str]
    counts: list[int]
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"} of folder links not followed


def _within(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or inside it (both real paths)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _loop_reason(real: str) -> str:
    return (
        f"a link to {real}, a folder that holds it: following it would loop back and count the same images "
        "again, so it is not followed"
    )


def _list_images(folder: str, skipped: list[dict]) -> list[str]:
    """Image files anywhere under `folder`, sorted; hidden files and folders (.DS_Store, ._x.jpg) are skipped.

    Links to folders are followed, except one to a folder that holds it (e.g. `loopup -> ..`), which would
    count its ancestors' images under this folder; those are appended to `skipped` with the reason."""
    found: list[str] = []
    # Each folder to read travels with the real paths of the folders it was reached through.
    stack: list[tuple[str, tuple[str, ...]]] = [(folder, (os.path.realpath(folder),))]
    seen_links: set[str] = set()
    while stack:
        current, chain = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    name = entry.name
                    if name[0] == ".":
                        continue
                    dot = name.rfind(".")
                    if dot > 0 and name[dot:].lower() in IMAGE_EXTENSIONS:
                        found.append(entry.path)
                    elif entry.is_dir():
                        if not entry.is_symlink():
                            stack.append((entry.path, (*chain, os.path.join(chain[-1], name))))
                            continue
                        real = os.path.realpath(entry.path)
                        if any(_within(above, real) for above in chain):
                            skipped.append({"path": entry.path, "reason": _loop_reason(real)})
                        elif real not in seen_links:  # two links to one folder: its images are counted once
                            seen_links.add(real)
                            stack.append((entry.path, (*chain, real)))
        except OSError as exc:
            raise JobError(f"cannot read the folder {current}: {exc.strerror or exc}") from None
    found.sort()
    return found


def scan_image_folder(root: str | Path) -> FolderScan:
    """List class folders and their image files without opening any image; bad layouts are a JobError."""
    root = Path(root)
    layout = f"imagefolder expects one folder per class, e.g. {root / 'cat' / '001.jpg'}"
    if not root.exists():
        raise JobError(
            f"dataset.root: the folder {root} does not exist; {layout}. Set dataset.root to such a folder."
        )
    if not root.is_dir():
        raise JobError(f"dataset.root: {root} is a file, not a folder; {layout}.")
    skipped: list[dict] = []
    real_root = os.path.realpath(root)
    try:
        with os.scandir(root) as entries:
            folders = sorted((e.name, e.is_symlink()) for e in entries if e.name[0] != "." and e.is_dir())
    except OSError as exc:
        raise JobError(f"cannot read the folder {root}: {exc.strerror or exc}") from None
    classes = []
    for name, is_link in folders:
        real = os.path.realpath(root / name) if is_link else ""
        if is_link and _within(real_root, real):  # a "class" that is the root itself, or above it
            skipped.append({"path": str(root / name), "reason": _loop_reason(real)})
        else:
            classes.append(name)
    if not classes:
        raise JobError(f"{root} has no class folders; {layout}.")
    paths: list[str] = []
    counts: list[int] = []
    for name in classes:
        files = _list_images(os.path.join(root, name), skipped)
        paths += files
        counts.append(len(files))
    extensions = ", ".join(sorted(IMAGE_EXTENSIONS))
    if not paths:
        raise JobError(
            f"no images under {root}: its {len(classes)} class folder(s) hold no {extensions} files. "
            "Put the images in the class folders."
        )
    empty = [str(root / name) for name, count in zip(classes, counts) if count == 0]
    if empty:
        raise JobError(
            f"class folder {', '.join(empty)} has no images ({extensions}); add images to it or remove "
            "the folder."
        )
    return FolderScan(root, classes, paths, counts, skipped)


# -- decoding ---------------------------------------------------------------------------------------


class TooLarge(Exception):
    """An image whose header claims more pixels than MAX_DECODE_PIXELS; never decoded."""

    def __init__(self, width: int, height: int):
        super().__init__(f"{width}x{height}")
        self.width, self.height = width, height


def _too_large_reason(width: int | None = None, height: int | None = None) -> str:
    claim = f"{width}x{height} pixels ({width * height / 1e6:,.0f} megapixels)" if width else "more pixels"
    return (
        f"its header claims {claim}, more than the {MAX_DECODE_PIXELS / 1e6:.0f} megapixels a file may "
        "decode to, so it is skipped unread as a decompression bomb would be (an image of the dataset has "
        f"at most {MAX_IMAGE_SIDE} pixels a side: shrink the file if it is a real picture)"
    )


def _reason(path: str, exc: BaseException) -> str:
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, TooLarge):
        return _too_large_reason(exc.width, exc.height)
    try:
        if os.path.getsize(path) == 0:
            return "empty file (0 bytes)"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if isinstance(exc, Image.DecompressionBombError):  # PIL refuses twice its own limit inside Image.open
        return _too_large_reason()
    if isinstance(exc, UnidentifiedImageError):
        return "not an image PIL can read (unknown format or corrupt header)"
    text = str(exc).replace(repr(path), "").replace(path, "").strip(" :") or type(exc).__name__
    return f"cannot be decoded ({text})"


def decode_file(path: str, mode: str, size: tuple[int, int]) -> np.ndarray:
    """Decode an image file to uint8 (H,W) for mode L or (H,W,3) for RGB at `size` (H, W)."""
    from PIL import Image

    with Image.open(path) as img:
        # decided from the header, before any pixel is allocated
        if img.width * img.height > MAX_DECODE_PIXELS:
            raise TooLarge(img.width, img.height)
        return convert_image(img, mode, size)


SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16B", "I;16L", "I;16N"})


def is_sixteen_bit(img) -> bool:
    """A 16-bit grayscale image (PIL opens a 16-bit PNG as I;16, or as I with values above 255)."""
    return img.mode in SIXTEEN_BIT_MODES or (img.mode == "I" and img.getextrema()[1] > 255)


def convert_image(img, mode: str, size: tuple[int, int]) -> np.ndarray:
    """An opened PIL image as uint8 (H,W) for mode L or (H,W,3) for RGB at `size` (H, W): how this dataset
    reads its files, and how Try it (workbench.worker.predict) reads the user's image. 16-bit values are
    divided by 257."""
    from PIL import Image

    height, width = size
    if img.format == "JPEG":
        img.draft(mode, (width, height))  # let libjpeg decode at a reduced scale: much faster for big photos
    if is_sixteen_bit(img):
        # PIL's own conversion clips 16-bit values at 255 (an almost white image): scale them to 8 bits
        # instead.
        img = Image.fromarray(
            np.clip(np.asarray(img, dtype=np.float64) / 257.0, 0, 255).round().astype(np.uint8), "L"
        )
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")  # what PIL asks for before dropping a palette's transparency
    img = img.convert(mode)
    if img.size != (width, height):
        img = img.resize((width, height), Image.Resampling.BILINEAR)  # antialiased when shrinking
    return np.array(img, dtype=np.uint8)  # a writable copy: torch will not wrap read-only memory


def probe(paths: list[str], counts: list[int]) -> list[tuple[str, str, tuple[int, int]]]:
    """Open the headers (not the pixels) of up to PROBE_COUNT images, taken round-robin across classes; files
    that do not open, or claim more than MAX_DECODE_PIXELS (they will be skipped), are left out."""
    from PIL import Image

    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    found: list[tuple[str, str, tuple[int, int]]] = []
    tried: list[tuple[str, BaseException]] = []
    for depth in range(max(counts)):
        for start, count in zip(starts, counts):
            if depth >= count:
                continue
            path = paths[start + depth]
            try:
                with Image.open(path) as img:
                    if img.width * img.height > MAX_DECODE_PIXELS:
                        raise TooLarge(img.width, img.height)
                    found.append((path, img.mode, (img.height, img.width)))
            except Exception as exc:
                tried.append((path, exc))
            if len(found) >= PROBE_COUNT or len(found) + len(tried) >= 4 * PROBE_COUNT:
                return found
    return found


class FileStore(ImageStore):
    """Image files decoded on demand; within `memory_limit` (default: the memory budget) every decoded image
    is kept in one uint8 tensor. `skipped` lists files or folders already left out (by the scan) with their
    reasons."""

    def __init__(
        self,
        paths: list[str],
        labels: torch.Tensor,
        shape: tuple[int, int, int],
        mode: str,
        memory_limit: int | None = None,
        skipped: list[dict] | None = None,
    ):
        self.paths = paths
        self.labels = labels.to(torch.int64)
        self.shape = shape
        self.mode = mode
        n = len(paths)
        self.in_memory = nbytes(n, shape) <= (memory_budget() if memory_limit is None else memory_limit)
        # torch.empty only reserves address space: pages are touched as images are decoded into them.
        self._buffer = torch.empty((n, *shape), dtype=torch.uint8) if self.in_memory else None
        self._decoded = torch.zeros(n, dtype=torch.bool)  # decoded once: good ones are in the buffer
        self._bad = torch.zeros(n, dtype=torch.bool)
        self._lru: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._lru_capacity = max(LRU_MIN, LRU_BYTES // max(1, nbytes(1, shape)))
        self._skipped: list[dict] = list(skipped or [])
        self._lock = threading.Lock()

    def path(self, index: int) -> str:
        return self.paths[index]

    def known_bad(self) -> torch.Tensor | None:
        return self._bad if bool(self._bad.any()) else None

    @property
    def skipped_files(self) -> list[dict]:
        with self._lock:
            return list(self._skipped)

    @property
    def fully_decoded(self) -> bool:
        return bool(self._decoded.all())

    def resident(self) -> torch.Tensor | None:
        # Complete only once every file was decoded; bad files leave rows that known_bad() marks.
        return self._buffer if self._buffer is not None and self.fully_decoded else None

    def _decode_one(self, index: int) -> tuple[int, torch.Tensor | None, str]:
        path = self.paths[index]
        try:
            array = decode_file(path, self.mode, self.shape[1:])
        except Exception as exc:  # a hostile or broken file: skip it, never the job
            return index, None, _reason(path, exc)
        tensor = torch.from_numpy(array)
        return index, (tensor.unsqueeze(0) if tensor.dim() == 2 else tensor.permute(2, 0, 1)), ""

    def _decode_many(self, indices: list[int]) -> dict[int, torch.Tensor]:
        if len(indices) > 2:
            results = list(_decode_pool().map(self._decode_one, indices))
        else:
            results = [self._decode_one(i) for i in indices]
        good: dict[int, torch.Tensor] = {}
        for index, image, reason in results:
            if image is not None:
                good[index] = image
                if self._buffer is not None:
                    self._buffer[index] = image  # written before the flag below says it is there
            with self._lock:
                if image is None and not bool(self._bad[index]):
                    self._bad[index] = True
                    self._skipped.append({"path": self.paths[index], "reason": reason})
                    log.warning("skipped %s: %s", self.paths[index], reason)
                self._decoded[index] = True
        return good

    def decode(self, indices: torch.Tensor) -> None:
        indices = torch.as_tensor(indices, dtype=torch.int64)
        todo = torch.unique(indices[~self._decoded[indices]]).tolist()
        # A cache's worth at a time: the decoded images of a group are all alive at once, and a chunk of large
        # images (256 at 4096x4096) would not fit in memory together.
        for start in range(0, len(todo), self._lru_capacity):
            decoded = self._decode_many(todo[start : start + self._lru_capacity])
            if self._buffer is None:
                for index, image in decoded.items():
                    self._remember(index, image)

    def _remember(self, index: int, image: torch.Tensor) -> None:
        with self._lock:
            self._lru[index] = image
            self._lru.move_to_end(index)
            while len(self._lru) > self._lru_capacity:
                self._lru.popitem(last=False)

    def fetch(self, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        indices = torch.as_tensor(indices, dtype=torch.int64)
        if self._buffer is not None:
            self.decode(indices)
            return self._buffer[indices], ~self._bad[indices]
        out = torch.zeros((indices.numel(), *self.shape), dtype=torch.uint8)
        with self._lock:
            cached = {i: self._lru[i] for i in set(indices.tolist()) if i in self._lru}
        missing = [i for i in dict.fromkeys(indices.tolist()) if i not in cached and not bool(self._bad[i])]
        fresh = self._decode_many(missing) if missing else {}
        for index, image in fresh.items():
            self._remember(index, image)
        images = {**cached, **fresh}
        for row, index in enumerate(indices.tolist()):
            if index in images:
                out[row] = images[index]
        return out, ~self._bad[indices]


# -- the dataset ------------------------------------------------------------------------------------


def automatic_size(probed: list[tuple[str, str, tuple[int, int]]], root: Path, say) -> tuple[int, int]:
    """(H, W) for a folder whose dataset.image_size is empty: the most common size among the probed images
    that a dataset's image may have (MAX_IMAGE_SIDE a side), so no single odd file, first or not, sizes them
    all."""
    fits = [(path, size) for path, _, size in probed if max(size) <= MAX_IMAGE_SIDE]
    if not fits:
        path, _, (height, width) = probed[0]
        raise JobError(
            f"the images under {root} are too large to use at their own size: e.g. {path} is "
            f"{width}x{height} (width x height), and a dataset's images have at most {MAX_IMAGE_SIDE} "
            "pixels a side. Set dataset.image_size (e.g. [224]) to resize them as they are read."
        )
    sizes = Counter(size for _, size in fits)
    size = sizes.most_common(1)[0][0]  # on a tie, the size seen first
    other = next(((p, s) for p, _, s in probed if s != size), None)
    if other is not None:
        example = next(path for path, s in fits if s == size)
        say(
            f"images under {root} differ in size (e.g. {example} is {size[1]}x{size[0]}, {other[0]} is "
            f"{other[1][1]}x{other[1][0]}); resizing all to {size[0]}x{size[1]} (height x width), the most "
            f"common size among the {len(probed)} looked at. Set dataset.image_size to choose another."
        )
    return size


@register_dataset("imagefolder", has_test_split=False)
def load_imagefolder(request: SourceRequest) -> Source:
    """Your own images: dataset.root holds one folder per class (any depth inside), decoded as they are
    used."""
    root = request.root
    if not request.spec.root and not root.is_dir():
        raise JobError(
            f"dataset.root is empty, so the workspace's data folder {root} was used, and it does not "
            "exist; set dataset.root to a folder with one subfolder per class."
        )
    scan = scan_image_folder(root)
    probed = probe(scan.paths, scan.counts)
    if not probed:
        raise JobError(
            f"none of the images tried under {root} could be opened (first: {scan.paths[0]}); check "
            "that the files are images."
        )
    mode = "L" if all(m in GRAY_MODES for _, m, _ in probed) else "RGB"
    size = parse_size(request.spec.image_size) or automatic_size(probed, root, request.log)
    shape = (1 if mode == "L" else 3, *size)
    # Even read from the files as they are used, some images are held at once: refuse before anything is
    # allocated when those alone are beyond the memory budget.
    held = min(len(scan.paths), STREAM_MIN_IMAGES)
    check_budget(
        nbytes(held, shape),
        f"{held} images from {root} at {'x'.join(map(str, shape))} "
        f"({nbytes(1, shape) / 2**20:,.1f} MB each), the fewest held in memory at once",
        "set dataset.image_size to a smaller size (e.g. [224])",
    )
    for item in scan.skipped:
        request.log(f"skipped {item['path']}: {item['reason']}")
    labels = torch.repeat_interleave(torch.arange(len(scan.classes)), torch.tensor(scan.counts))
    store = FileStore(scan.paths, labels, shape, mode, skipped=scan.skipped)
    # Cached statistics must not outlive a change of files: key them on the listing too.
    digest = hashlib.sha1("\n".join(scan.paths).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return Source(classes=scan.classes, parts={"all": store}, root=str(root), fingerprint=digest)
