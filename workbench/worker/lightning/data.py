"""A `dataset.name = "lightning:<path.py>:<DataModule>"` read by the jobs after training (export's parity,
quantize's calibration, graph and bench inputs): the first batch of the DataModule's train_dataloader after
setup("fit"), split into samples and offered as a user Dataset is (splits of samples, first_sample). Worker
side; never imports Qt.
"""

from __future__ import annotations

import torch

from workbench.errors import JobError, WorkbenchError
from workbench.specs import DataSpec
from workbench.worker.data.registry import register_dataset_family
from workbench.worker.lightning import require_lightning
from workbench.worker.lightning.user_classes import load_datamodule, overrides, parse_name
from workbench.worker.models.user_code import _describe, _where


class _Samples:
    """One split: a list of (input, target) samples."""

    source = None  # no Dataset object of the user's to read class names from (user_views.names_of)

    def __init__(self, name: str, samples: list):
        self.name, self._samples = name, samples

    def __len__(self) -> int:
        return len(self._samples)

    def sample(self, index: int) -> tuple:
        return self._samples[index]

    def class_counts(self) -> list[int]:
        return [len(self._samples)]


class LightningBatch:
    """The DataModule's first training batch as samples ("train": calibration), and its first validation batch
    ("val": what quantize measures and export's parity reads), or the training one where it has no
    val_dataloader. Both are drawn with torch's RNG seeded, so every job reads the same samples."""

    in_memory = False
    classes: list = []

    def __init__(self, name: str, samples: list, held_out: list | None = None):
        self.name = name
        self.splits = {
            "train": _Samples("train", samples),
            "val": _Samples("val", samples if held_out is None else held_out),
            "test": _Samples("test", []),
        }

    def first_sample(self) -> tuple:
        return self.splits["train"].sample(0)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        x = self.first_sample()[0]
        return tuple(x.shape) if isinstance(x, torch.Tensor) else ()

    def normalization(self, progress=None) -> None:
        """None: the DataModule's own transforms normalise its batches (as a file: dataset's do)."""
        return None

    def describe(self) -> dict:
        """For data.info (the training wizard's Task choice and the Data tab): what the first batches hold.
        The DataModule's own sizes are not known without reading every batch, so the counts are the
        batches'."""
        from workbench.worker.data.user import describe_samples

        first = self.first_sample()
        y = first[1]
        label = not y.is_floating_point() and y.dim() == 0
        return describe_samples(
            self.name,
            self.splits,
            first,
            classes=[],
            target="integer class label" if label else None,
            root=None,
            workers="the LightningDataModule's own dataloaders (its first batches are shown)",
        )

    def release(self) -> None:
        pass


def _unbatch(batch) -> list:
    """(x, y) samples of a collated batch: a tuple/list (input first, target second) or a dict with
    input/target."""
    if isinstance(batch, dict):
        x, y = batch.get("input"), batch.get("target")
    elif isinstance(batch, (tuple, list)):
        x, y = batch[0], batch[1] if len(batch) > 1 else None
    else:
        x, y = batch, None
    if not isinstance(x, torch.Tensor):
        raise JobError(f"the first batch's input is a {type(x).__name__}; a tensor input is needed here")
    y = y if isinstance(y, torch.Tensor) and len(y) == len(x) else torch.zeros(len(x), dtype=torch.long)
    return [(x[i], y[i]) for i in range(len(x))]


@register_dataset_family(
    "lightning",
    usage="lightning:<path.py>:<LightningDataModule>",
    user_code=True,
    description="A LightningDataModule from your own Python file: its first batches.",
)
def open_lightning_dataset(spec: DataSpec, workspace=None, ctx=None) -> LightningBatch:
    """The DataModule's first batches, read afresh for every job; the workspace plays no part."""
    return load_lightning_dataset(spec, ctx)


def load_lightning_dataset(spec: DataSpec, ctx=None) -> LightningBatch:
    def log(text: str, level: str = "info") -> None:
        if ctx is not None:
            ctx.log(text, level)

    module = load_datamodule(spec.name, spec.args, log)
    path, attr = parse_name(spec.name, "dataset.name", "LightningDataModule")
    try:
        module.prepare_data()
        module.setup("fit")
        batch = _first_batch(module.train_dataloader)
        held_out = _first_batch(module.val_dataloader) if _has_val(module) else None
    except WorkbenchError:
        raise
    except StopIteration:
        raise JobError(f"dataset.name: {attr} from {path} gives an empty train_dataloader") from None
    except Exception as exc:
        raise JobError(
            f"{_where(exc, path)}: {_describe(exc)} (while reading the first batch of {attr})"
        ) from None
    if held_out is None:
        log(f"{attr} has no val_dataloader: the first training batch also stands in for held-out samples")
    return LightningBatch(spec.name, _unbatch(batch), None if held_out is None else _unbatch(held_out))


def _first_batch(loader):
    """The first batch of `loader()`, with torch's RNG seeded for it (and put back after): a shuffling loader
    gives the same batch to every job, so a quantize run and the export of it measure the same samples."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return next(iter(loader()))


def _has_val(module) -> bool:
    return overrides(module, "val_dataloader", require_lightning().LightningDataModule)
