"""Where jobs run and in what precision: resolving `device` (auto = cuda, then mps, then cpu) and `amp`, and
whether TensorRT can build engines here.

Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import importlib.util
import shutil

import torch

from workbench.errors import JobError

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_device(name: str) -> torch.device:
    """The torch device `name` means here; an unavailable one is a JobError that says what is available."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    here = ["cpu"] + (["mps"] if _mps_available() else [])
    here += [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise JobError(
                f"device: {name} is not available here (torch sees no CUDA device); "
                f"use device=auto or one of: {', '.join(here)}"
            )
        device = torch.device(name)
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise JobError(
                f"device: {name} does not exist; this machine has {torch.cuda.device_count()} CUDA "
                f"device(s): {', '.join(here)}"
            )
        return device
    if name == "mps" and not _mps_available():
        raise JobError(
            f"device: mps is not available here (it needs Apple silicon and a torch build with MPS); "
            f"use device=auto or one of: {', '.join(here)}"
        )
    return torch.device(name)


def check_amp(amp: str, device: torch.device) -> None:
    """Refuse a precision the device cannot autocast to, before any work is done."""
    if amp == "none":
        return
    if device.type == "cuda" and amp == "bf16" and not torch.cuda.is_bf16_supported():
        raise JobError(
            f"amp: bf16 is not supported on {torch.cuda.get_device_name(device)}; use amp=fp16 or none"
        )
    try:
        with torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp]):
            a = torch.ones(2, 2, device=device)
            (a @ a).sum()
    except Exception as exc:
        raise JobError(f"amp: {amp} autocast does not work on {device} ({exc}); use amp=none") from None


def autocast(amp: str, device: torch.device):
    """The autocast context for `amp` (a no-op for none)."""
    if amp == "none":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AMP_DTYPES[amp])


def check_compile(mode: str, device: torch.device) -> None:
    # Inductor writes C++ for the CPU; without a compiler it fails deep inside the first step.
    if (
        mode != "off"
        and device.type == "cpu"
        and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang"))
    ):
        raise JobError(
            "compile: torch.compile on the CPU needs a C compiler (gcc or clang); install one or set "
            "compile=off"
        )


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


class HostReader:
    """Reads small device tensors back to the host: one non_blocking copy into a reused pinned buffer, then a
    wait on that copy's event alone. A blocking `.cpu()` would synchronise the whole stream (and trips torch's
    sync debug mode); the values are needed now, so the wait itself cannot be avoided, only made as small as
    it can be.
    """

    def __init__(self):
        self._buffers: dict[tuple, torch.Tensor] = {}

    def read(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host copy of `tensor` (the caller may keep it)."""
        if tensor.device.type != "cuda":
            return tensor.detach().to("cpu", copy=True)
        key = (tuple(tensor.shape), tensor.dtype)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._buffers[key] = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        buffer.copy_(tensor.detach(), non_blocking=True)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(tensor.device))
        done.synchronize()
        return buffer.clone()


def tensorrt_availability(has_cuda: bool) -> dict:
    """{available, reason}: whether torch_tensorrt can build engines here (devices.list and the TensorRT
    export both ask)."""
    if importlib.util.find_spec("torch_tensorrt") is None:
        return {
            "available": False,
            "reason": "torch-tensorrt is not installed (pip install 'torch-workbench[tensorrt]')",
        }
    if not has_cuda:
        return {"available": False, "reason": "TensorRT needs a CUDA device; none is visible"}
    try:
        import torch_tensorrt  # noqa: F401
    except Exception as exc:
        return {"available": False, "reason": f"torch-tensorrt failed to import: {exc}"}
    return {"available": True, "reason": ""}
