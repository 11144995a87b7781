"""A `dataset.name = "lightning:<path.py>:<DataModule>"` read by the jobs after training (export's parity, quantize's
calibration, graph and bench inputs): the first batch of the DataModule's train_dataloader after setup("fit"), split
into samples and offered as a user Dataset is (splits of samples, first_sample). Worker side; never imports Qt.
"""

from __future__ import annotations

import torch

from workbench.errors import JobError, WorkbenchError
from workbench.specs import DataSpec
from workbench.worker.lightning.user_classes import load_datamodule, parse_name
from workbench.worker.models.user_code import _describe, _where


class _Samples:
    """One split: a list of (input, target) samples."""

    def __init__(self, name: str, samples: list):
        self.name, self._samples = name, samples

    def __len__(self) -> int:
        return len(self._samples)

    def sample(self, index: int) -> tuple:
        return self._samples[index]

    def class_counts(self) -> list[int]:
        return [len(self._samples)]


class LightningBatch:
    """The DataModule's first training batch as samples: "val" holds them (what export's parity and quantize's
    evaluation read when there is no test split), "train" too (calibration)."""

    in_memory = False
    classes: list = []

    def __init__(self, name: str, samples: list):
        self.name = name
        self.splits = {"train": _Samples("train", samples), "val": _Samples("val", samples),
                       "test": _Samples("test", [])}

    def first_sample(self) -> tuple:
        return self.splits["train"].sample(0)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        x = self.first_sample()[0]
        return tuple(x.shape) if isinstance(x, torch.Tensor) else ()

    def normalization(self, progress=None) -> None:
        """None: the DataModule's own transforms normalise its batches (as a file: dataset's do)."""
        return None

    def release(self) -> None:
        pass


def _unbatch(batch) -> list:
    """(x, y) samples of a collated batch: a tuple/list (input first, target second) or a dict with input/target."""
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


def load_lightning_dataset(spec: DataSpec, ctx=None) -> LightningBatch:
    def log(text: str, level: str = "info") -> None:
        if ctx is not None:
            ctx.log(text, level)

    module = load_datamodule(spec.name, spec.args, log)
    path, attr = parse_name(spec.name, "dataset.name", "LightningDataModule")
    try:
        module.prepare_data()
        module.setup("fit")
        batch = next(iter(module.train_dataloader()))
    except WorkbenchError:
        raise
    except StopIteration:
        raise JobError(f"dataset.name: {attr} from {path} gives an empty train_dataloader") from None
    except Exception as exc:
        raise JobError(f"{_where(exc, path)}: {_describe(exc)} (while reading the first batch of {attr})") from None
    return LightningBatch(spec.name, _unbatch(batch))
