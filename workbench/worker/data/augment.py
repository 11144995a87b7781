"""Training augmentations: DataSpec.augment steps (torchvision.transforms.v2 names and parameters) built into
batched ops that draw random parameters per sample from an explicit generator.

Batched: one batch is a few tensor ops, not a Python loop of PIL calls. Explicit generator: results are
reproducible from a seed and never touch torch's global RNG, which a training job on another thread shares.
Steps work on float images in 0..1 before normalisation; random_erasing fills with `value` in those units.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F

from workbench.errors import JobError

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)  # the ITU-R 601 luma weights torchvision uses


# -- parameter checks -------------------------------------------------------------------------------


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value, where: str, low: float | None = None, high: float | None = None) -> float:
    if not _is_number(value):
        raise JobError(f"{where}: {value!r} is not a number")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = " and ".join(
            b for b in (f">= {low}" if low is not None else "", f"<= {high}" if high is not None else "") if b
        )
        raise JobError(f"{where}: {value!r} is out of range; must be {bounds}")
    return float(value)


def _int(value, where: str, low: int = 0) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool)) or value < low:
        raise JobError(f"{where}: {value!r} is not allowed; must be an integer >= {low}")
    return int(value)


def _ints(value, where: str, counts: tuple[int, ...], low: int) -> list[int]:
    """An integer or a list of `counts` integers."""
    if isinstance(value, (list, tuple)):
        if len(value) not in counts:
            raise JobError(
                f"{where}: {list(value)!r} must be one integer or a list of {' or '.join(map(str, counts))}"
            )
        return [_int(v, f"{where}[{i}]", low) for i, v in enumerate(value)]
    return [_int(value, where, low)]


def _range(value, where: str, low: float, high: float | None, centre: float | None) -> tuple[float, float]:
    """A number x meaning [centre - x, centre + x] (or [-x, x] with no centre), or an explicit [min, max]."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise JobError(f"{where}: {list(value)!r} must be one number or a list [min, max]")
        lo_val, hi_val = (_number(v, f"{where}[{i}]", low, high) for i, v in enumerate(value))
        if lo_val > hi_val:
            raise JobError(f"{where}: {list(value)!r} has min > max")
        return lo_val, hi_val
    x = _number(value, where, 0, high)
    if centre is None:  # a symmetric range around 0, e.g. degrees
        return -x, x
    return max(low, centre - x), centre + x


class Step:
    """One augmentation; subclasses list their parameters with defaults in PARAMS."""

    name = ""
    PARAMS: dict = {}
    REQUIRED: tuple[str, ...] = ()

    def __init__(self, params: Mapping, where: str):
        self.where = where
        for key in params:
            if key == "name":
                continue
            if key not in self.PARAMS:
                close = difflib.get_close_matches(str(key), list(self.PARAMS), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise JobError(
                    f"{where}.{key}: unknown parameter of {self.name}; {hint}{self.name} takes: "
                    f"{', '.join(self.PARAMS) or 'no parameters'}"
                )
        for key in self.REQUIRED:
            if key not in params:
                raise JobError(
                    f"{where}.{key}: {self.name} needs {key}, e.g. {{name='{self.name}', {key}=...}}"
                )
        self.setup({**self.PARAMS, **{k: v for k, v in params.items() if k != "name"}})

    def setup(self, params: dict) -> None:
        raise NotImplementedError

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        raise NotImplementedError


def _to(tensor: torch.Tensor, device) -> torch.Tensor:
    # Random parameters are drawn on the CPU (one generator, the same numbers on every device) and cross to
    # the batch's device without a wait: on CUDA a blocking copy would synchronise the stream every batch.
    return tensor.to(device, non_blocking=torch.device(device).type == "cuda")


def _uniform(n: int, low: float, high: float, generator: torch.Generator, device) -> torch.Tensor:
    return _to(low + (high - low) * torch.rand(n, generator=generator), device)


def _gray(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    weights = _to(torch.tensor(GRAY_WEIGHTS, dtype=x.dtype), x.device).view(1, 3, 1, 1)
    return (x * weights).sum(1, keepdim=True)


# -- the steps --------------------------------------------------------------------------------------


class RandomCrop(Step):
    name = "random_crop"
    PARAMS = {"size": None, "padding": 0, "padding_mode": "constant"}
    MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}

    def setup(self, params: dict) -> None:
        size = params["size"]
        self.size = None if size is None else _ints(size, f"{self.where}.size", (1, 2), 1)
        if self.size is not None and len(self.size) == 1:
            self.size *= 2
        padding = _ints(params["padding"], f"{self.where}.padding", (1, 2, 4), 0)
        # torchvision's order: one value for all sides, [left/right, top/bottom], or [left, top, right,
        # bottom].
        self.padding = padding * 4 if len(padding) == 1 else padding * 2 if len(padding) == 2 else padding
        if params["padding_mode"] not in self.MODES:
            raise JobError(
                f"{self.where}.padding_mode: {params['padding_mode']!r} is not allowed; choose one of: "
                f"{', '.join(self.MODES)}"
            )
        self.mode = self.MODES[params["padding_mode"]]

    def __call__(self, x, generator):
        n, _, height, width = x.shape
        left, top, right, bottom = self.padding
        if any(self.padding):
            x = F.pad(x, (left, right, top, bottom), mode=self.mode)
        padded_h, padded_w = x.shape[-2:]
        h, w = self.size or (height, width)
        if h > padded_h or w > padded_w:
            raise JobError(
                f"{self.where}.size: {h}x{w} is larger than the {padded_h}x{padded_w} (padded) image; "
                "lower size or add padding"
            )
        top_left_y = _to(torch.randint(0, padded_h - h + 1, (n,), generator=generator), x.device)
        top_left_x = _to(torch.randint(0, padded_w - w + 1, (n,), generator=generator), x.device)
        rows = top_left_y[:, None] + torch.arange(h, device=x.device)
        cols = top_left_x[:, None] + torch.arange(w, device=x.device)
        batch = torch.arange(n, device=x.device)[:, None, None]
        # Advanced indexing puts the indexed dims first: (n, h, w, C).
        return x[batch, :, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


class _Flip(Step):
    PARAMS = {"p": 0.5}
    dim = -1

    def setup(self, params: dict) -> None:
        self.p = _number(params["p"], f"{self.where}.p", 0, 1)

    def __call__(self, x, generator):
        flip = _to(torch.rand(x.shape[0], generator=generator) < self.p, x.device).view(-1, 1, 1, 1)
        return torch.where(flip, x.flip(self.dim), x)


class HFlip(_Flip):
    name = "hflip"
    dim = -1


class VFlip(_Flip):
    name = "vflip"
    dim = -2


class Rotation(Step):
    name = "rotation"
    # torchvision requires degrees; a bare "rotation" (--set dataset.augment=hflip,rotation) gets ±15°.
    PARAMS = {"degrees": 15, "fill": 0.0}

    def setup(self, params: dict) -> None:
        self.degrees = _range(params["degrees"], f"{self.where}.degrees", -360, 360, None)
        self.fill = _number(params["fill"], f"{self.where}.fill", 0, 1)

    def __call__(self, x, generator):
        n, _, height, width = x.shape
        angle = _uniform(n, *self.degrees, generator, "cpu") * (math.pi / 180)
        cos, sin = torch.cos(angle), torch.sin(angle)
        # Counter-clockwise for positive angles, as torchvision; the aspect terms keep non-square images
        # undistorted.
        theta = torch.zeros(n, 2, 3)
        theta[:, 0, 0], theta[:, 0, 1] = cos, -sin * height / width
        theta[:, 1, 0], theta[:, 1, 1] = sin * width / height, cos
        grid = F.affine_grid(_to(theta.to(x.dtype), x.device), list(x.shape), align_corners=False)
        if self.fill == 0:
            return F.grid_sample(x, grid, mode="nearest", padding_mode="zeros", align_corners=False)
        ones = torch.ones_like(x[:, :1])
        out = F.grid_sample(
            torch.cat([x, ones], 1), grid, mode="nearest", padding_mode="zeros", align_corners=False
        )
        inside = out[:, -1:]
        return out[:, :-1] * inside + self.fill * (1 - inside)


def _rgb_to_hsv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r, g, b = x.unbind(1)
    maxc, minc = x.amax(1), x.amin(1)
    same = maxc == minc
    chroma = maxc - minc
    ones = torch.ones_like(maxc)
    s = chroma / torch.where(same, ones, maxc)
    divisor = torch.where(same, ones, chroma)
    rc, gc, bc = (maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = torch.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return h, s, maxc


def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    i = torch.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.to(torch.int64) % 6
    p = (v * (1 - s)).clamp(0, 1)
    q = (v * (1 - s * f)).clamp(0, 1)
    t = (v * (1 - s * (1 - f))).clamp(0, 1)
    pick = i.unsqueeze(0)
    r = torch.stack([v, q, p, p, t, v]).gather(0, pick)[0]
    g = torch.stack([t, v, v, q, p, p]).gather(0, pick)[0]
    b = torch.stack([p, p, t, v, v, q]).gather(0, pick)[0]
    return torch.stack([r, g, b], 1)


class ColorJitter(Step):
    name = "color_jitter"
    PARAMS = {"brightness": 0.0, "contrast": 0.0, "saturation": 0.0, "hue": 0.0}

    def setup(self, params: dict) -> None:
        self.ranges = {
            key: _range(params[key], f"{self.where}.{key}", 0, None, 1.0)
            for key in ("brightness", "contrast", "saturation")
        }
        self.hue = _range(params["hue"], f"{self.where}.hue", -0.5, 0.5, None)

    def __call__(self, x, generator):
        # A fixed order (torchvision shuffles it per call); each factor is drawn per sample.
        n, device = x.shape[0], x.device

        def factor(key):
            return _uniform(n, *self.ranges[key], generator, device).view(-1, 1, 1, 1).to(x.dtype)

        if self.ranges["brightness"] != (1.0, 1.0):
            x = (x * factor("brightness")).clamp(0, 1)
        if self.ranges["contrast"] != (1.0, 1.0):
            f = factor("contrast")
            mean = _gray(x).mean(dim=(1, 2, 3), keepdim=True)
            x = (f * x + (1 - f) * mean).clamp(0, 1)
        if x.shape[1] == 3 and self.ranges["saturation"] != (1.0, 1.0):
            f = factor("saturation")
            x = (f * x + (1 - f) * _gray(x)).clamp(0, 1)
        if x.shape[1] == 3 and self.hue != (0.0, 0.0):
            shift = _uniform(n, *self.hue, generator, device).view(-1, 1, 1).to(x.dtype)
            h, s, v = _rgb_to_hsv(x)
            x = _hsv_to_rgb(torch.remainder(h + shift, 1.0), s, v)
        return x


class RandomErasing(Step):
    name = "random_erasing"
    PARAMS = {"p": 0.5, "scale": [0.02, 0.33], "ratio": [0.3, 3.3], "value": 0.0}

    def setup(self, params: dict) -> None:
        self.p = _number(params["p"], f"{self.where}.p", 0, 1)
        self.scale = _range(params["scale"], f"{self.where}.scale", 0, 1, None)
        if not isinstance(params["scale"], (list, tuple)) or self.scale[0] <= 0:
            raise JobError(
                f"{self.where}.scale: {params['scale']!r} must be [min, max] fractions of the image "
                "area with 0 < min <= max <= 1, e.g. [0.02, 0.33]"
            )
        self.ratio = _range(params["ratio"], f"{self.where}.ratio", 0, None, None)
        if not isinstance(params["ratio"], (list, tuple)) or self.ratio[0] <= 0:
            raise JobError(
                f"{self.where}.ratio: {params['ratio']!r} must be [min, max] aspect ratios > 0, "
                "e.g. [0.3, 3.3]"
            )
        self.value = _number(params["value"], f"{self.where}.value", 0, 1)

    def __call__(self, x, generator):
        n, _, height, width = x.shape
        apply = torch.rand(n, generator=generator) < self.p
        area = height * width * _uniform(n, *self.scale, generator, "cpu")
        log_ratio = _uniform(n, math.log(self.ratio[0]), math.log(self.ratio[1]), generator, "cpu")
        aspect = torch.exp(log_ratio)
        h = torch.sqrt(area * aspect).round().clamp(1, height).to(torch.int64)
        w = torch.sqrt(area / aspect).round().clamp(1, width).to(torch.int64)
        top = (torch.rand(n, generator=generator) * (height - h + 1)).floor().to(torch.int64)
        left = (torch.rand(n, generator=generator) * (width - w + 1)).floor().to(torch.int64)
        rows = torch.arange(height)[None, :]
        cols = torch.arange(width)[None, :]
        in_rows = (rows >= top[:, None]) & (rows < (top + h)[:, None])
        in_cols = (cols >= left[:, None]) & (cols < (left + w)[:, None])
        mask = (in_rows[:, :, None] & in_cols[:, None, :]) & apply[:, None, None]
        return x.masked_fill(_to(mask, x.device)[:, None], self.value)


STEPS: dict[str, type[Step]] = {
    cls.name: cls for cls in (RandomCrop, HFlip, VFlip, Rotation, ColorJitter, RandomErasing)
}


class Augment:
    """The steps of DataSpec.augment in order; call it on float (n,C,H,W) images in 0..1 with a generator."""

    def __init__(self, steps: list[Step]):
        self.steps = steps

    def __bool__(self) -> bool:
        return bool(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        for step in self.steps:
            x = step(x, generator)
        return x


def build_augment(items: list[Mapping]) -> Augment:
    """Check and build DataSpec.augment; a bad step or parameter is a JobError naming `augment[i].param`."""
    steps = []
    for i, item in enumerate(items or []):
        where = f"augment[{i}]"
        if not isinstance(item, Mapping):
            raise JobError(f"{where}: {item!r} is not a table; write e.g. {{name='hflip', p=0.5}}")
        name = item.get("name")
        if name not in STEPS:
            raise JobError(f"{where}.name: {name!r} is not allowed; choose one of: {', '.join(STEPS)}")
        steps.append(STEPS[name](item, where))
    return Augment(steps)


def augment_uint8(augment: Augment, images: torch.Tensor, seed: int) -> torch.Tensor:
    """Augment uint8 (n,C,H,W) images with a seeded generator and give back uint8: what a preview shows."""
    if not augment:
        return images.clone()
    generator = torch.Generator().manual_seed(int(seed))
    out = augment(images.to(torch.float32) / 255, generator)
    return out.mul(255).round_().clamp_(0, 255).to(torch.uint8)
