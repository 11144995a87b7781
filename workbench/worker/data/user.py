"""`dataset.name = "file:<path.py>:<Name>"`: the user's own torch Dataset, read through torch's DataLoader.

`Name` is a torch.utils.data.Dataset subclass, or a function returning one, called with `**dataset.args`. If
it takes a `split` argument it is called for "train", "val" and "test" (a split it raises ValueError/KeyError
for, or gives None or an empty dataset for, is missing); a function may also return {"train": ds, "val": ds,
...}. Missing val/test splits are carved out of train with the seeded splitters of splits.py, as Subsets.

A sample is (input, target) or {"input": ..., "target": ...}; user_samples.py converts and collates them.
Batches come from a DataLoader with dataset.num_workers worker processes (kept between epochs), its order
drawn from (seed, epoch) alone. Running the file is running the user's code: announced in the job's log. Never
imports Qt.
"""

from __future__ import annotations

import inspect
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Subset

from workbench.errors import JobError
from workbench.specs import DataSpec
from workbench.trust import file_problem
from workbench.worker.data.loaded import _mix, auto_worker_count
from workbench.worker.data.splits import split_train, split_whole
from workbench.worker.data.user_labels import LabelRange, LargestLabel, label_range, scan_batch
from workbench.worker.data.user_samples import (
    Collate,
    IndexedSamples,
    SampleError,
    clean_message,
    first_tensor,
    one_line,
    where,
    worker_death,
)

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
PLACEMENT = "dataloader"
SCAN_BATCH = 256  # samples per batch when reading the train labels for the class count


@dataclass
class UserCore:
    """What the engine reads of `dataset.core`."""

    workspace: Path
    path: Path
    attr: str


def parse_user_name(name: str) -> tuple[Path, str]:
    """file:<path.py>:<Name> -> (absolute path, Name); JobError when malformed or the file does not exist."""
    text = name[len("file:") :] if name.startswith("file:") else name
    path_text, _, attr = text.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if not path_text or not attr.isidentifier():
        raise JobError(f"dataset.name: {name!r} must be file:<path.py>:<DatasetClassOrFunction>")
    path = Path(path_text).expanduser().absolute()
    problem = file_problem(path)
    if problem is not None:
        raise JobError(f"dataset.name: the dataset file {path} {problem}")
    return path, attr


def _import(path: Path):
    from workbench.worker.models.user_code import import_user_file

    try:
        return import_user_file(path)
    except JobError as exc:
        raise JobError(
            str(exc).replace("while importing the model file", "while importing the dataset file")
        ) from None


def _accepts(target, name: str) -> bool:
    try:
        return name in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


MISSING = object()  # a split the user's function raised ValueError/KeyError for


# the splits draw a permutation of every index, 8 bytes each: past this it cannot fit in memory
MAX_SAMPLES = 2**36


def _size(ds) -> int:
    """The raw value of the dataset's __len__: len() would refuse a negative or huge one in words of its own,
    naming neither the user's class nor what it returned."""
    return type(ds).__len__(ds)


def _check_size(n, ds, split: str, label: str, path: Path) -> int:
    name = f"{type(ds).__name__}.__len__"
    if isinstance(n, bool) or not isinstance(n, int):
        raise JobError(
            f"{label}: {name} returned {n!r} for the {split} split ({path}); it must return the "
            "number of samples, an int"
        )
    if n < 0 or n > MAX_SAMPLES:
        raise JobError(
            f"{label}: {name} returned {n} for the {split} split ({path}); it must return the "
            f"number of samples, from 0 to {MAX_SAMPLES:,}"
        )
    return n


class _Maker:
    """Calls the user's class or function and checks what comes back."""

    def __init__(self, target, attr: str, path: Path, args: dict, label: str):
        self.target, self.attr, self.path, self.args, self.label = target, attr, path, dict(args), label

    def call(self, missing: tuple = (), **extra):
        """The call's result; MISSING when it raises one of `missing`; any other failure is a JobError."""
        shown = ", ".join(f"{k}={v!r}" for k, v in {**self.args, **extra}.items())
        try:
            return self.target(**self.args, **extra)
        except missing:
            return MISSING
        except Exception as exc:
            if isinstance(exc, TypeError) and _is_call_error(exc):
                raise JobError(
                    f"{self.label}: {self.attr}({shown}) from {self.path}: {one_line(exc)}; "
                    "check dataset.args"
                ) from None
            raise JobError(
                f"{self.label}: {type(exc).__name__}: {one_line(exc)} ({where(exc, self.path)}, "
                f"while calling {self.attr}({shown}))"
            ) from None

    def check(self, ds, split: str):
        """The dataset for a split, or None when it counts as missing (None or empty)."""
        if ds is None:
            return None
        if isinstance(ds, IterableDataset):
            raise JobError(
                f"{self.label}: {self.attr} gave an IterableDataset for the {split} split; it "
                "needs __len__ and __getitem__ (a map-style torch.utils.data.Dataset)"
            )
        if not isinstance(ds, Dataset):
            raise JobError(
                f"{self.label}: {self.attr} from {self.path} gave a {type(ds).__name__} for the "
                f"{split} split, not a torch.utils.data.Dataset"
            )
        try:
            n = _size(ds)
        except Exception as exc:
            raise JobError(
                f"{self.label}: len() of the {split} split failed: {type(exc).__name__}: "
                f"{one_line(exc)} ({where(exc, self.path)}); a dataset needs __len__"
            ) from None
        return ds if _check_size(n, ds, split, self.label, self.path) > 0 else None


def _is_call_error(exc: TypeError) -> bool:
    """A TypeError about the call itself (unexpected/missing argument), raised before the user's code ran."""
    tb = exc.__traceback__
    depth = 0
    while tb is not None:
        depth += 1
        tb = tb.tb_next
    text = str(exc)
    return depth <= 1 and ("argument" in text or "positional" in text)


def _make_splits(maker: _Maker) -> dict:
    """{"train", "val", "test"} -> the user's datasets, None where missing."""
    found: dict = dict.fromkeys(SPLITS)
    if _accepts(maker.target, "split") and "split" not in maker.args:
        for split in SPLITS:
            ds = maker.call((ValueError, KeyError) if split != "train" else (), split=split)
            if ds is MISSING:
                continue
            found[split] = maker.check(ds, split)
        return found
    made = maker.call()
    if isinstance(made, dict):
        unknown = [key for key in made if key not in SPLITS]
        if unknown:
            raise JobError(
                f"{maker.label}: {maker.attr} returned a dict with key(s) "
                f"{', '.join(map(repr, unknown))}; the keys must be 'train', 'val' and 'test'"
            )
        for split in SPLITS:
            found[split] = maker.check(made.get(split), split)
        return found
    found["train"] = maker.check(made, "train")
    return found


def _carve(found: dict, spec: DataSpec, label: str) -> dict:
    """Fill the missing val/test splits from train with the seeded splitters; every split a Dataset."""
    train = found["train"]
    if train is None:
        raise JobError(
            f"{label}: the train split is empty (0 samples); the dataset must give at least one sample"
        )
    n = len(train)
    what = f"the train split of {label}"
    val, test = found["val"], found["test"]
    if val is None and test is None:
        parts = split_whole(n, spec.val_fraction, spec.test_fraction, spec.seed, what)
    elif val is None:
        parts = split_train(n, spec.val_fraction, spec.seed, what)
    elif test is None:
        parts = split_whole(n, 0.0, spec.test_fraction, spec.seed, what)
    else:
        parts = {}
    if not parts:
        return {"train": train, "val": val, "test": test}
    out = {"train": _carved(train, parts["train"])}
    for split in ("val", "test"):
        given = found[split]
        out[split] = (
            given
            if given is not None
            else _carved(train, parts.get(split, torch.empty(0, dtype=torch.int64)))
        )
    return out


def _carved(train, indices: torch.Tensor) -> Subset:
    part = Subset(train, indices.tolist())
    part.workbench_origin = "train"  # its samples are named by their index in the user's train dataset
    return part


class _BatchPlan:
    """A batch sampler whose batches are set before each pass, so one DataLoader (and its persistent workers)
    serves every epoch."""

    def __init__(self):
        self.batches: list[list[int]] = []

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def _move(value, device: torch.device, non_blocking: bool):
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if isinstance(value, tuple | list):
        return tuple(_move(v, device, non_blocking) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device, non_blocking) for k, v in value.items()}
    return value


class UserSplit:
    """One of train/val/test of a user's dataset: `len`, `class_counts()`, `batches(...)`,
    `indexed_batches(...)`."""

    def __init__(self, name: str, source, dataset: UserDataset):
        self.name = name
        self.source = source
        self.dataset = dataset
        self.samples = IndexedSamples(source, name, dataset.label, dataset.core.path)
        self._loaders: dict[bool, tuple[DataLoader, _BatchPlan]] = {}
        self._busy: dict[bool, object] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.samples)

    def class_counts(self) -> list[int]:
        """[number of samples]: a user's dataset is not counted per class without reading every sample."""
        return [len(self)]

    def sample(self, index: int) -> tuple:
        """(input, target) of one sample, converted, read in this process."""
        try:
            _, x, y = self.samples[index]
        except SampleError as exc:
            raise JobError(clean_message(exc)) from None
        return x, y

    # -- batches ---------------------------------------------------------------------------------------------
    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool,
        seed: int = 0,
        epoch: int = 0,
        drop_last: bool = False,
        device: str | torch.device = "cpu",
        augment: bool | None = None,
        placement: str | None = None,
    ) -> Iterator[tuple]:
        """Yield (x, y) on `device` covering the split once; the order (shuffle) is drawn from (seed, epoch)
        alone. `augment` and `placement` are accepted for the built-in datasets' signature and ignored."""
        order = (
            torch.randperm(len(self), generator=torch.Generator().manual_seed(_mix(seed, epoch)))
            if shuffle
            else torch.arange(len(self))
        )
        plan = self._plan(order, batch_size, drop_last, (0, 1))
        for _, x, y in self._run(plan, device, seed=_mix(seed, epoch)):
            yield x, y

    def indexed_batches(
        self,
        batch_size: int,
        *,
        device: str | torch.device = "cpu",
        rank: int = 0,
        world: int = 1,
        placement: str | None = None,
    ) -> Iterator[tuple]:
        """(indices within the split (host int64), x, y) in split order; with world > 1, every world-th batch
        from the rank-th."""
        plan = self._plan(torch.arange(len(self)), batch_size, False, (rank, world))
        yield from self._run(plan, device, seed=0)

    @staticmethod
    def _plan(
        order: torch.Tensor, batch_size: int, drop_last: bool, shard: tuple[int, int]
    ) -> list[list[int]]:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, not {batch_size}")
        rank, world = shard
        n = len(order)
        plan = []
        for number, start in enumerate(range(0, n, batch_size)):
            if drop_last and start + batch_size > n:
                break
            if number % world == rank:
                plan.append(order[start : start + batch_size].tolist())
        return plan

    def _make_loader(self, pin: bool, persistent: bool, seed: int) -> tuple[DataLoader, _BatchPlan]:
        workers = self.dataset.loader_workers()
        plan = _BatchPlan()
        loader = DataLoader(
            self.samples,
            batch_sampler=plan,
            num_workers=workers,
            collate_fn=Collate(self.samples.origin, self.dataset.label),
            pin_memory=pin,
            persistent_workers=persistent and workers > 0,
            generator=torch.Generator().manual_seed(seed),
        )
        return loader, plan

    def _run(self, batches: list[list[int]], device, *, seed: int) -> Iterator[tuple]:
        device = torch.device(device)
        pin = self.dataset.pins(device)
        if not batches:
            return
        token = object()
        with self._lock:
            reuse = self._busy.get(pin) is None
            if reuse:
                self._busy[pin] = token
                if pin not in self._loaders:
                    self._loaders[pin] = self._make_loader(pin, True, seed)
                loader, plan = self._loaders[pin]
        if not reuse:  # this split is already being read (nested passes): a loader of this pass's own
            loader, plan = self._make_loader(pin, False, seed)
        try:
            plan.batches = batches
            stream = iter(loader)
            _no_sigchld_raise(stream)
            while True:
                try:
                    indices, x, y = next(stream)
                except StopIteration:
                    return
                except Exception as exc:
                    dead = _dead_workers(stream, exc)
                    error = self.dataset.translate(exc, dead)
                    if error is None:
                        raise
                    if dead or worker_death(exc) is not None:
                        self._forget_loaders()
                    raise error from None
                labels = self.dataset.labels
                if labels is not None:  # on the host, before the device (or the loss) meets a bad label
                    labels.check(self.dataset.label, self.samples.origin, indices, y)
                yield indices, _move(x, device, pin), _move(y, device, pin)
        finally:
            with self._lock:
                if self._busy.get(pin) is token:
                    self._busy[pin] = None

    def _forget_loaders(self) -> None:
        with self._lock:
            loaders, self._loaders = self._loaders, {}
        for loader, _ in loaders.values():
            _shutdown(loader)

    def release(self) -> None:
        self._forget_loaders()


def _no_sigchld_raise(stream) -> None:
    """Keep torch's SIGCHLD handler from raising "worker killed by signal" wherever the main thread happens to
    be (inside the training step, say, where no one turns it into a JobError): without its pids registered, a
    dead worker is found by the iterator itself, within 5 s, and raised from next(), where _run translates
    it."""
    if not getattr(stream, "_worker_pids_set", False):
        return
    try:
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(stream))
        stream._worker_pids_set = False
    except Exception:  # another torch: its handler stays, and so does the (rarer) raw RuntimeError
        log.debug("unregistering DataLoader worker pids", exc_info=True)


def _dead_workers(stream, exc: BaseException, wait: float = 3.0) -> dict[str, str]:
    """pid -> how it ended, for the DataLoader's worker processes that are gone. A worker that dies
    mid-transfer can surface as any error of the transfer (ConnectionResetError, EOFError, ...) before it is
    reaped, so for an error that is not a sample's own, wait up to `wait` seconds for a worker to be seen
    dead."""
    workers = getattr(stream, "_workers", None) or []
    if not workers or clean_message(exc) is not None:
        return {}
    deadline = time.monotonic() + wait
    while True:
        out = {}
        for worker in workers:
            code = worker.exitcode  # polls (waitpid WNOHANG)
            if code is not None and code != 0:
                out[str(worker.pid)] = _how(code)
        if out or time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


def _how(code: int) -> str:
    if code < 0:
        try:
            name = signal.strsignal(-code) or f"signal {-code}"
        except ValueError:
            name = f"signal {-code}"
        return f"killed by signal: {name}"
    return f"exited with status {code}"


def _shutdown(loader: DataLoader) -> None:
    """Stop a DataLoader's persistent worker processes now rather than when the garbage collector gets to
    them."""
    iterator = getattr(loader, "_iterator", None)
    stop = getattr(iterator, "_shutdown_workers", None)
    if stop is not None:
        try:
            stop()
        except Exception:  # a worker that already died
            log.debug("shutting down DataLoader workers", exc_info=True)
    loader._iterator = None


class UserDataset:
    """A `file:` dataset with the interface training uses of LoadedDataset: name, spec, splits, classes,
    sample_shape, first_sample(), prepare(), loader_workers(), describe_workers(), normalization(),
    release()."""

    in_memory = False

    def __init__(
        self,
        spec: DataSpec,
        workspace: Path,
        path: Path,
        attr: str,
        splits: dict,
        progress: Callable[[float, float, str], None] | None = None,
    ):
        self.spec = spec
        self.name = spec.name
        self.label = f"dataset {spec.name}"
        self.core = UserCore(workspace=workspace, path=path, attr=attr)
        self.root = str(path)
        self.skipped_files: list[dict] = []
        self._progress = progress
        self.splits = {name: UserSplit(name, splits[name], self) for name in SPLITS}
        self._first = None
        self._classes: list[str] | None = None
        self._classes_lock = threading.Lock()
        # the train split's largest label, once the class scan read it
        self._largest: LargestLabel | None = None
        self.labels: LabelRange | None = None  # the labels a classification run allows (expect_labels)

    # -- what the first sample says --------------------------------------------------------------------------
    def first_sample(self) -> tuple:
        """(input, target) of sample 0 of the train split, converted as batches convert them (without the
        batch dimension): input a tensor, or a tuple/dict of tensors; target a tensor."""
        if self._first is None:
            self._first = self.splits["train"].sample(0)
        return self._first

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The first sample's input shape (for a tuple/dict input: its first tensor's)."""
        return tuple(first_tensor(self.first_sample()[0]).shape)

    def target_is_label(self) -> bool:
        target = self.first_sample()[1]
        return (
            target.dim() == 0
            and not target.is_floating_point()
            and not target.is_complex()
            and target.dtype != torch.bool
        )

    @property
    def classes(self) -> list[str]:
        """Class names: the dataset's `classes` attribute (any task), else for integer scalar targets
        "0".."K-1" from the largest label of the train split (read once, through the DataLoader); [] for any
        other target."""
        with self._classes_lock:
            if self._classes is None:
                self._classes = self._find_classes()
            return self._classes

    def _declared_classes(self) -> list[str] | None:
        """The names the Dataset's own `classes` attribute gives (of the train split, or of what it was carved
        from)."""
        source = self.splits["train"].source
        while True:
            named = getattr(source, "classes", None)
            if isinstance(named, list | tuple) and named:
                return [str(c) for c in named]
            if not isinstance(source, Subset):
                return None
            source = source.dataset

    def _find_classes(self) -> list[str]:
        # The Dataset's own names first, whatever its targets: a segmentation set's classes name its mask
        # values.
        declared = self._declared_classes()
        if declared:
            return declared
        if not self.target_is_label():
            return []
        train = self.splits["train"]
        total = len(train)
        done, largest = 0, None
        for indices, _, y in train.indexed_batches(SCAN_BATCH):
            if y.dim() != 1 or y.is_floating_point():
                raise JobError(
                    f"{self.label}: sample 0 of the train split has an integer label, but a batch "
                    f"near sample {done} has targets of shape {list(y.shape[1:])} and type "
                    f"{y.dtype}; give every sample the same kind of target"
                )
            largest = scan_batch(self.label, train.samples.origin, indices, y, largest)
            done += int(y.shape[0])
            if self._progress is not None:
                self._progress(done, total, f"reading the labels of {self.name} {done:,}/{total:,}")
        self._largest = largest
        return [str(i) for i in range(largest.value + 1 if largest is not None else 0)]

    def classes_source(self) -> str:
        """Where `classes` came from, for the log line of model.num_classes auto."""
        largest = self._largest
        if self._declared_classes() or largest is None:
            return "the dataset's classes"
        return (
            f"one past the largest label, {largest.value} in {largest.sample}; the dataset has no `classes`"
        )

    def expect_labels(self, count: int) -> None:
        """From now on every batch's integer labels must lie in 0..count-1, checked on the host as the batch
        arrives; a train label the class scan already read past that is a JobError now, naming its sample."""
        self.labels = label_range(count, self._declared_classes(), self._largest)
        largest = self._largest
        if largest is not None and largest.value >= count:
            raise JobError(self.labels.message(self.label, largest.sample, largest.value))

    # -- what the engine asks of any dataset -----------------------------------------------------------------
    def normalization(self, progress=None) -> None:
        """None: a user's dataset is normalised by its own transforms."""
        return None

    def statistics(self, progress=None):
        raise JobError(f"{self.label}: mean and std are not computed for file: datasets")

    def decode_all(self, progress=None, check_stop=None) -> None:
        """Nothing to decode ahead (in_memory is False)."""

    def loader_workers(self) -> int:
        workers = self.spec.num_workers
        return auto_worker_count() if workers == "auto" else int(workers)

    def describe_workers(self) -> str:
        workers = self.loader_workers()
        if not workers:
            how = "loaded in the job's own process"
        else:
            how = f"{workers} DataLoader worker process" + ("es" if workers != 1 else "")
        if self.spec.num_workers == "auto":
            return f"{how} (dataset.num_workers auto: {workers} usable core(s))"
        return f"{how} (dataset.num_workers={workers})" if not workers else how

    def pins(self, device) -> bool:
        device = torch.device(device)
        return (bool(self.spec.pin_memory) or device.type == "cuda") and torch.cuda.is_available()

    def prepare(
        self,
        device,
        progress: Callable[[int, int, str], None] | None = None,
        check_stop: Callable[[], None] | None = None,
    ) -> tuple[str, str]:
        """("dataloader", what the job's log says about it); nothing is copied ahead."""
        text = f"torch DataLoader from {self.core.path}:{self.core.attr}, {self.describe_workers()}"
        if self.pins(device):
            text += ", pinned memory"
        return PLACEMENT, text

    def placement_for(self, device) -> str:
        return PLACEMENT

    def release(self) -> None:
        """Stop the DataLoader worker processes (the job is over); later batches start new ones."""
        for split in self.splits.values():
            split.release()

    def translate(self, exc: BaseException, dead: dict[str, str] | None = None) -> JobError | None:
        """The JobError for what a DataLoader raised (a bad sample, a dead worker); None for anything else.
        `dead`: pid -> how it ended, for the worker processes known to be gone."""
        text = clean_message(exc)
        if text is not None:
            return JobError(text)
        died = worker_death(exc)
        if dead:
            pids, how = next(iter(dead.items()))
        elif died is not None:
            pids, how = died
            how = how.replace("is killed by signal", "killed by signal")
        if dead or died is not None:
            return JobError(
                f"a DataLoader worker of {self.label} died (pid {pids}, {how}); the job stopped "
                "— try dataset.num_workers=0 to see the error in the job itself"
            )
        return None

    def describe(self) -> dict:
        """For data.info: samples per split, the input's shape and dtype, the target, the classes."""
        classes = list(self.classes)
        target = f"integer class label ({len(classes)} classes)" if self.target_is_label() else None
        return describe_samples(
            self.name,
            self.splits,
            self.first_sample(),
            classes=classes,
            target=target,
            root=self.root,
            workers=self.describe_workers(),
        )


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


def describe_samples(
    name: str,
    splits: dict,
    first: tuple,
    *,
    classes: list,
    target: str | None,
    root: str | None,
    workers: str,
) -> dict:
    """data.info's description of samples that are not a built-in image set (a user's Dataset, a
    LightningDataModule's first batches): samples per split, the input's shape and dtype (each input's, for
    several), the target (`target`, else its dtype and shape), the classes."""
    x, y = first
    head = first_tensor(x)
    if isinstance(x, tuple):
        inputs = [{"shape": list(t.shape), "dtype": _dtype(t)} for t in x]
    elif isinstance(x, dict):
        inputs = {
            k: {"shape": list(first_tensor(t).shape), "dtype": _dtype(first_tensor(t))} for k, t in x.items()
        }
    else:
        inputs = None
    counts = {split: len(samples) for split, samples in splits.items()}
    return {
        "dataset": name,
        "classes": classes,
        "num_samples": counts,
        "class_counts": {split: [n] for split, n in counts.items()},
        "sample_shape": list(head.shape),
        "input_dtype": _dtype(head),
        "inputs": inputs,
        "target": target or f"{_dtype(y)} tensor of shape {list(y.shape)}",
        "target_shape": list(y.shape),
        "target_dtype": _dtype(y),
        "mean": None,
        "std": None,
        "skipped_files": [],
        "in_memory": False,
        "root": root,
        "workers": workers,
    }


def _as_detection(spec: DataSpec, splits: dict, label: str):
    """The user's splits as a DetectionDataset when the first train sample is (image, a dict with "boxes"
    and "labels"), else None (a sample that fails is left to the usual checks, which name it)."""
    from workbench.worker.objectives.detect import is_detection_target

    try:
        first = splits["train"][0]
    except Exception:  # the user's own __getitem__: whatever it raises is reported by first_sample() below
        return None
    if not (isinstance(first, (tuple, list)) and len(first) == 2 and is_detection_target(first[1])):
        return None
    from workbench.worker.data.detection.dataset import from_user

    train = splits["train"]
    source = getattr(train, "dataset", train)  # a carved Subset's own dataset holds the class names
    return from_user(spec, splits, label, getattr(source, "classes", None))


def load_user_dataset(spec: DataSpec, workspace: Path, ctx=None) -> UserDataset:
    """Import the user's file, call `Name` for the splits, carve the missing ones and read sample 0 of
    train."""
    path, attr = parse_user_name(spec.name)
    label = f"dataset {spec.name}"

    def say(text: str) -> None:
        log.info("%s", text)
        if ctx is not None:
            ctx.log(text)

    progress = (lambda done, total, text: ctx.progress(done, total, text)) if ctx is not None else None
    say(f"running user code from {path} (dataset {attr}, with your permissions)")
    module = _import(path)
    target = getattr(module, attr, None)
    if target is None or not callable(target):
        found = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        )
        what = "is not callable" if target is not None else "is not defined there"
        raise JobError(
            f"dataset.name: {attr!r} in {path} {what}; it defines: {', '.join(found) or 'nothing callable'}"
        )
    if inspect.isclass(target) and not issubclass(target, Dataset):
        raise JobError(
            f"dataset.name: {attr} in {path} is a class but not a torch.utils.data.Dataset subclass"
        )
    maker = _Maker(target, attr, path, spec.args, label)
    splits = _carve(_make_splits(maker), spec, label)
    dataset = UserDataset(spec, workspace, path, attr, splits, progress)
    # a sample that fails, or is not (input, target), says so now, before any worker starts
    try:
        dataset.first_sample()
    except JobError:
        # A dict target is no tensor the usual samples take; (image, {"boxes", "labels"}) is a detection set
        detection = _as_detection(spec, splits, label)
        if detection is None:
            raise
        dataset.release()
        say(f"{label}: detection samples (images and torchvision targets), {len(detection.classes)} classes")
        return detection
    counts = ", ".join(f"{len(dataset.splits[name]):,} {name}" for name in SPLITS)
    say(f"{label}: {counts} samples, input {list(dataset.sample_shape)}")
    return dataset
