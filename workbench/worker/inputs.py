"""A model's example inputs as the data gives them: one tensor, a tuple or a dict of tensors, each keeping its
dtype, shape and name (token ids stay int64), taken from a run's real samples, else drawn from
`model.input_spec`, else random floats of `model.input_shape`. Every job that feeds a model reads its inputs
here. Worker side.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from workbench.errors import JobError

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
SEED = 0


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class Example:
    """A batch of a model's inputs (first dimension: the batch) in the structure the model is called with."""

    tensors: list[torch.Tensor]  # one batch per input, in call order
    names: list[str]
    kind: str = "tensor"  # "tensor": model(x); "tuple": model(*xs); "dict": model(**{name: x})
    origin: str = ""  # where the values come from, for logs and results ("3 samples of the train split")
    real: bool = True  # real samples (False: drawn at random from a shape or an input spec)
    # Per input, the (low, high) values to draw integer inputs from: observed in the data, or the input
    # spec's.
    ranges: list[tuple[int, int] | None] = field(default_factory=list)

    # -- what it is ------------------------------------------------------------------------------------------
    @property
    def single(self) -> bool:
        """One floating-point tensor: the image-like case every exporter and backend takes as it is."""
        return self.kind == "tensor" and self.tensors[0].is_floating_point()

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The first input's shape without its batch dimension."""
        return tuple(self.tensors[0].shape[1:])

    @property
    def batch_size(self) -> int:
        return int(self.tensors[0].shape[0])

    def shapes(self) -> dict[str, list[int]]:
        """Each input's per-sample shape, by name."""
        return {name: list(t.shape[1:]) for name, t in zip(self.names, self.tensors)}

    def dtypes(self) -> dict[str, str]:
        return {name: _dtype_name(t.dtype) for name, t in zip(self.names, self.tensors)}

    def describe(self) -> str:
        """e.g. "ids int64[32], mask bool[32]" or "input float32[1,8,8]"."""
        return ", ".join(
            f"{name} {_dtype_name(t.dtype)}[{','.join(map(str, t.shape[1:]))}]"
            for name, t in zip(self.names, self.tensors)
        )

    def summary(self) -> dict:
        """What a job's result says about the inputs it fed."""
        return {
            "input_names": list(self.names),
            "input_shapes": self.shapes(),
            "input_dtypes": self.dtypes(),
            "inputs_from": self.origin,
        }

    # -- the same structure, other values --------------------------------------------------------------------
    def structure(self, tensors: list[torch.Tensor]):
        """`tensors` in this example's structure: a tensor, a tuple or a dict."""
        if self.kind == "dict":
            return dict(zip(self.names, tensors))
        if self.kind == "tuple":
            return tuple(tensors)
        return tensors[0]

    @property
    def value(self):
        return self.structure(self.tensors)

    def with_tensors(
        self, tensors: list[torch.Tensor], *, origin: str | None = None, real: bool | None = None
    ):
        return Example(
            list(tensors),
            self.names,
            self.kind,
            self.origin if origin is None else origin,
            self.real if real is None else real,
            self.ranges,
        )

    def batch(self, size: int) -> Example:
        """`size` samples: the example's own, repeated in turn where it has fewer."""
        have = self.batch_size
        if size == have:
            return self
        index = torch.arange(size) % have
        return self.with_tensors([t[index] for t in self.tensors])

    def first(self, count: int = 1) -> Example:
        return self.with_tensors([t[:count] for t in self.tensors])

    def random(self, size: int, generator: torch.Generator) -> Example:
        """Random inputs typed like these: floats from a normal distribution, integers (token ids, class
        indices) within the range the data shows, booleans as they are (masks keep their meaning)."""
        out = []
        for t, bounds in zip(self.tensors, self.ranges or [None] * len(self.tensors)):
            shape = (size, *t.shape[1:])
            if t.is_floating_point():
                out.append(torch.randn(shape, generator=generator).to(t.dtype))
            elif t.dtype == torch.bool:
                out.append(t[torch.arange(size) % len(t)])
            else:
                low, high = bounds if bounds is not None else (int(t.min()), int(t.max()))
                out.append(torch.randint(int(low), int(high) + 1, shape, generator=generator).to(t.dtype))
        return self.with_tensors(out, origin="random", real=False)

    def floats_changed(self, change) -> Example:
        """`change` applied to the floating-point inputs only: integer ids and masks mean what they say."""
        return self.with_tensors([change(t) if t.is_floating_point() else t for t in self.tensors])

    def to(self, device) -> Example:
        return self.with_tensors([t.to(device) for t in self.tensors])

    # -- calling a model with it -----------------------------------------------------------------------------
    def call(self, model, x=None):
        """model(x), model(*x) or model(**x), with this example's values unless `x` (same structure) is
        given."""
        x = self.value if x is None else x
        if self.kind == "dict":
            return model(**x)
        if self.kind == "tuple":
            return model(*x)
        return model(x)

    def positional(self, model: nn.Module) -> nn.Module:
        """`model` as a module called with the inputs positionally, in `names` order: what exporters and
        backends take (a dict input becomes keyword arguments inside). The model itself for one tensor or a
        tuple."""
        return model if self.kind != "dict" else Positional(model, self.names, keyed=True)

    def args(self) -> tuple[torch.Tensor, ...]:
        return tuple(self.tensors)

    def sample(self, index: int = 0):
        """One sample (no batch dimension) in the example's structure: what a model's trial forward pass
        stacks."""
        return self.structure([t[index] for t in self.tensors])


class Positional(nn.Module):
    """model(**dict(zip(names, args))): a dict-input model with one positional signature, so an exporter names
    its inputs by the dict's keys."""

    def __init__(self, model: nn.Module, names: list[str], keyed: bool = True):
        super().__init__()
        self.model, self.names, self.keyed = model, list(names), keyed

    def forward(self, *args):
        if self.keyed:
            return self.model(**dict(zip(self.names, args)))
        return self.model(*args)


def forward_names(model: nn.Module, count: int) -> list[str]:
    """forward()'s positional parameter names for `count` inputs (`input_<i>` past them, `input` for a single
    unnamed one), so an exported file's inputs read as the model's code does (`ids`, `attention_mask`)."""
    try:
        params = [
            p.name
            for p in inspect.signature(model.forward).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    if count == 1 and not params:
        return ["input"]
    return [params[i] if i < len(params) else f"input_{i}" for i in range(count)]


def from_value(
    value, *, model: nn.Module | None = None, origin: str = "", real: bool = True, ranges: list | None = None
) -> Example:
    """An Example of a batched input as a DataLoader collates it: a tensor, a tuple/list or a dict of
    tensors."""
    if isinstance(value, dict):
        names = [str(k) for k in value]
        tensors = [torch.as_tensor(v) for v in value.values()]
        kind = "dict"
    elif isinstance(value, (tuple, list)):
        tensors = [torch.as_tensor(v) for v in value]
        names = (
            forward_names(model, len(tensors))
            if model is not None
            else [f"input_{i}" for i in range(len(tensors))]
        )
        kind = "tuple"
    else:
        tensors = [torch.as_tensor(value)]
        names = forward_names(model, 1) if model is not None else ["input"]
        kind = "tensor"
    if not tensors:
        raise JobError("the dataset's input is an empty tuple or dict: the model has nothing to take")
    if ranges is None:
        ranges = [_observed(t) for t in tensors]
    return Example(tensors, names, kind, origin, real, ranges)


def _observed(t: torch.Tensor) -> tuple[int, int] | None:
    if t.is_floating_point() or t.dtype == torch.bool or t.numel() == 0:
        return None
    return int(t.min()), int(t.max())


def named_for(example: Example, model: nn.Module) -> Example:
    """The example with a tuple's or tensor's inputs named by `model`'s forward() (a dict keeps its keys)."""
    if example.kind == "dict":
        return example
    names = forward_names(model, len(example.tensors))
    return Example(example.tensors, names, example.kind, example.origin, example.real, example.ranges)


# -- where examples come from --------------------------------------------------------------------------------


def from_shape(shape, batch: int = 1) -> Example:
    """Random floats shaped like one sample, the same on every run: a model with no data and no input spec."""
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(batch, *shape, generator=generator)
    return Example(
        [x],
        ["input"],
        "tensor",
        f"random floats of model.input_shape {','.join(map(str, shape))}",
        real=False,
        ranges=[None],
    )


def from_input_spec(input_spec: dict, batch: int | None = None) -> Example:
    """Random inputs drawn from `model.input_spec` ({name: {shape, dtype, low, high}}): floats normal (or
    uniform in [low, high) where given), integers uniform in [low, high]. `shape` includes the batch
    dimension; `batch` replaces it."""
    generator = torch.Generator().manual_seed(SEED)
    tensors, names, ranges = [], [], []
    for name, entry in input_spec.items():
        shape = [int(d) for d in entry["shape"]]
        if batch is not None:
            shape[0] = batch
        dtype = DTYPES[entry.get("dtype", "float32")]
        low, high = entry.get("low"), entry.get("high")
        if dtype == torch.bool:
            tensors.append(torch.rand(shape, generator=generator) < 0.5)
            ranges.append(None)
        elif dtype.is_floating_point:
            if low is not None and high is not None:
                x = torch.rand(shape, generator=generator) * (float(high) - float(low)) + float(low)
            else:
                x = torch.randn(shape, generator=generator)
            tensors.append(x.to(dtype))
            ranges.append(None)
        else:
            lo = int(low) if low is not None else 0
            hi = int(high) if high is not None else max(lo, 1)
            tensors.append(torch.randint(lo, hi + 1, shape, generator=generator).to(dtype))
            ranges.append((lo, hi))
        names.append(str(name))
    kind = "tensor" if len(tensors) == 1 else "dict"
    return Example(tensors, names, kind, "random inputs of model.input_spec", real=False, ranges=ranges)


def from_dataset(dataset, *, count: int = 2, splits=("train", "val", "test")) -> Example:
    """The first `count` samples of the first non-empty split of a loaded dataset, batched as training batches
    them: a user Dataset's inputs collated as its DataLoader would (tuple or dict, each dtype kept); a
    built-in image set's images scaled and normalised as the training engine does."""
    for name in splits:
        split = dataset.splits.get(name) if hasattr(dataset, "splits") else None
        if split is not None and len(split):
            return _from_split(dataset, split, name, count)
    if hasattr(dataset, "first_sample"):  # a LightningDataModule's first batch
        return from_value(_batched([dataset.first_sample()[0]]), origin="the dataset's first sample")
    raise JobError(f"dataset {getattr(dataset, 'name', '')} has no samples to take example inputs from")


def _from_split(dataset, split, name: str, count: int) -> Example:
    take = min(count, len(split))
    if hasattr(dataset, "first_sample"):  # a user Dataset
        items = [split.sample(i)[0] for i in range(take)]
        return from_value(_batched(items), origin=f"{take} sample{'s' * (take > 1)} of the {name} split")
    images, ok = split.fetch(torch.arange(take))
    images = images[ok] if bool(ok.any()) else images
    mean, std = dataset.normalization()
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, *([1] * (images.dim() - 2)))
    std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, *([1] * (images.dim() - 2)))
    x = images.to(torch.float32).div_(255).sub_(mean_t).div_(std_t)
    return Example(
        [x], ["input"], "tensor", f"{len(x)} sample{'s' * (len(x) > 1)} of the {name} split", ranges=[None]
    )


def _batched(items: list):
    from torch.utils.data import default_collate

    return default_collate(items)


def values_in(example: Example) -> int:
    """Values per sample over every input (what the per-sample cap applies to)."""
    return sum(math.prod(t.shape[1:]) for t in example.tensors)


def dtype_hint(exc: BaseException, example: Example) -> str:
    """For a forward pass that failed on a dtype: which dtype the model expected and which the inputs have."""
    text = str(exc)
    if "scalar type" not in text.lower() and "dtype" not in text.lower() and "expected" not in text.lower():
        return ""
    wants_int = any(word in text for word in ("Long", "Int", "indices"))
    got = example.describe()
    if wants_int and any(t.is_floating_point() for t in example.tensors):
        return (
            f"; the model expected integer inputs (int64 token ids, say) but got {got}; take the inputs from "
            'the run\'s dataset, or set model.input_spec with dtype = "int64"'
        )
    if "Float" in text and not any(t.is_floating_point() for t in example.tensors):
        return f"; the model expected float inputs but got {got}"
    return f"; the inputs were {got}"
