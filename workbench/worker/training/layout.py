"""channels_last=auto: which memory layout (channels-last or contiguous) trains a model faster on a device,
found by a short timed trial once per model, batch, precision and device, and remembered in <workspace>/cache/
as the dataset statistics are. A layout changes no precision: the same arithmetic, in a different order in
memory.

Worker side; never imports Qt.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from workbench.worker.devices import autocast
from workbench.worker.models import logits_of

log = logging.getLogger(__name__)

LAYOUT_VERSION = 2  # 2: medians and a 10 % margin; choices remembered by version 1 are timed again
TRIAL_ROUNDS = 7  # timed steps per layout, interleaved so a noisy neighbour slows both alike
# channels-last must win by this much at the median: a tie keeps the plain layout, which needs no conversion
# of inputs. With 3 % and the fastest round, noise on a 2-core machine picked channels-last where full
# training steps then ran 9 % slower (resnet18, 32x32, batch 128).
MARGIN = 0.10

# (model, input batch shape, device, amp) -> {"contiguous": seconds a step, "channels_last": seconds a step}
Measure = Callable[[nn.Module, tuple, torch.device, str], dict]


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        parts = [platform.processor() or platform.machine(), f"{torch.get_num_threads()} threads"]
        return ", ".join(part for part in parts if part)
    return device.type


def model_fingerprint(model: nn.Module) -> str:
    """The architecture (module tree and parameter shapes), not the weights: a retrained model keeps its
    layout."""
    shapes = [(name, tuple(p.shape), str(p.dtype)) for name, p in model.named_parameters()]
    text = repr(model) + json.dumps(shapes)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def layout_key(model: nn.Module, batch_shape: tuple, device: torch.device, amp: str) -> dict:
    return {
        "version": LAYOUT_VERSION,
        "model": model_fingerprint(model),
        "input": list(batch_shape),
        "device": device.type,
        "device_name": device_name(device),
        "amp": amp,
        "torch": torch.__version__,
    }


def cache_path(workspace: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return Path(workspace) / "cache" / f"layout-{digest}.json"


def read_choice(path: Path, key: dict) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ok = data.get("key") == key and isinstance(data.get("channels_last"), bool)
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return data if ok else None


def write_choice(path: Path, key: dict, channels_last: bool, times: dict) -> None:
    """Atomically (temp file, then rename); a failure only logs: the next run times the trial again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".layout-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "channels_last": channels_last, "step_s": times}, f, indent=1)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("could not remember the memory layout in %s: %s", path, exc)


def _sync(device: torch.device) -> None:
    # The trial's clock needs the device to have finished; this runs before training, never inside a step.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def timed_trial(model: nn.Module, batch_shape: tuple, device: torch.device, amp: str) -> dict:
    """Seconds per forward and backward pass of a copy of `model` in each layout: the median of TRIAL_ROUNDS
    (the fastest round flattered one layout by luck as often as not; the median is what a run of many steps
    sees).

    A copy, under a forked RNG and on random inputs from a private generator: the model's weights, buffers
    (batch norm statistics) and every random stream the run uses are as they were.
    """
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(batch_shape, generator=generator).to(device)
    trial = copy.deepcopy(model).to(device)
    trial.train()
    layouts = {"contiguous": torch.contiguous_format, "channels_last": torch.channels_last}
    inputs = {name: x.contiguous(memory_format=fmt) for name, fmt in layouts.items()}
    times: dict[str, list[float]] = {name: [] for name in layouts}
    devices = (
        [device.index if device.index is not None else torch.cuda.current_device()]
        if device.type == "cuda"
        else []
    )

    def step(name: str) -> float:
        trial.to(memory_format=layouts[name])
        _sync(device)
        started = time.perf_counter()
        with autocast(amp, device):
            out = logits_of(trial(inputs[name]))
        out.float().square().mean().backward()
        _sync(device)
        elapsed = time.perf_counter() - started
        trial.zero_grad(set_to_none=True)
        return elapsed

    with torch.random.fork_rng(devices=devices):
        for name in layouts:  # the first pass allocates and picks kernels: not timed
            step(name)
        for round_ in range(TRIAL_ROUNDS):
            for name in layouts if round_ % 2 == 0 else reversed(list(layouts)):
                times[name].append(step(name))
    return {name: statistics.median(values) for name, values in times.items()}


def has_conv2d(model: nn.Module) -> bool:
    return any(
        isinstance(m, nn.modules.conv._ConvNd) and m.weight is not None and m.weight.dim() == 4
        for m in model.modules()
    )


def resolve_channels_last(
    setting,
    *,
    model: nn.Module,
    sample_shape: tuple,
    batch_size: int,
    device: torch.device,
    amp: str = "none",
    workspace: Path | None = None,
    deterministic: bool = False,
    compiled: bool = False,
    measure: Measure | None = None,
) -> tuple[bool, str]:
    """(channels_last, why) for the spec's channels_last (True, False or "auto")."""
    if setting is True or setting is False:
        return setting, f"channels_last={'true' if setting else 'false'}"
    if len(sample_shape) != 3 or not has_conv2d(model):
        return False, "contiguous (channels_last=auto: the model has no 2-d convolutions to speed up)"
    if deterministic:
        return False, "contiguous (channels_last=auto: a deterministic run is not steered by a timing)"
    if compiled:
        return False, "contiguous (channels_last=auto: torch.compile chooses layouts for its own kernels)"
    batch_shape = (int(batch_size), *(int(n) for n in sample_shape))
    key = layout_key(model, batch_shape, device, amp)
    path = cache_path(workspace, key) if workspace is not None else None
    cached = read_choice(path, key) if path is not None else None
    if cached is not None:
        choice = cached["channels_last"]
        return (
            choice,
            f"{_name(choice)} (channels_last=auto, remembered from an earlier trial on {key['device_name']})",
        )
    try:
        times = (measure or timed_trial)(model, batch_shape, device, amp)
    except Exception as exc:  # a model the trial cannot copy or run as it is: the plain layout always works
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return (
            False,
            f"contiguous (channels_last=auto: the timed trial failed: {type(exc).__name__}: {first})",
        )
    choice = times["channels_last"] < (1 - MARGIN) * times["contiguous"]
    if path is not None:
        write_choice(path, key, choice, times)
    return choice, (
        f"{_name(choice)} (channels_last=auto: a step took {times['channels_last'] * 1e3:.1f} ms "
        f"channels-last, {times['contiguous'] * 1e3:.1f} ms contiguous on {key['device_name']})"
    )


def _name(channels_last: bool) -> str:
    return "channels-last" if channels_last else "contiguous"
