"""`devices.list`: every device torch can use here, with memory and what each can do (AMP, compile, ORT,
TensorRT)."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil

from workbench.worker.registry import register_task


def _autocast_works(device_type: str, dtype_name: str) -> bool:
    import torch

    dtype = getattr(torch, dtype_name)
    try:
        with torch.autocast(device_type=device_type, dtype=dtype):
            a = torch.ones(4, 4, device=device_type)
            (a @ a).sum().item()
        return True
    except Exception:
        return False


def _onnxruntime_providers() -> list[str]:
    try:
        import onnxruntime

        return list(onnxruntime.get_available_providers())
    except Exception:
        return []


def _compile_status(device_type: str) -> dict:
    # Inductor generates C++ on the CPU and Triton kernels on CUDA; without those it cannot compile.
    if device_type == "cpu" and not (shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")):
        return {"available": False, "reason": "torch.compile on the CPU needs a C compiler (gcc or clang)"}
    if device_type == "cuda" and importlib.util.find_spec("triton") is None:
        return {"available": False, "reason": "torch.compile on CUDA needs triton"}
    if device_type == "mps":
        return {"available": False, "reason": "torch.compile support for MPS is experimental"}
    return {"available": True, "reason": ""}


def _cpu_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def describe_devices() -> list[dict]:
    import torch

    from workbench.worker.devices import tensorrt_availability  # imports torch: not at the worker's start

    providers = _onnxruntime_providers()
    has_cuda = torch.cuda.is_available()
    tensorrt = tensorrt_availability(has_cuda)
    devices = [
        {
            "id": "cpu",
            "type": "cpu",
            "name": platform.processor() or platform.machine() or "CPU",
            "memory_total": _cpu_memory(),
            "threads": torch.get_num_threads(),
            "capabilities": {
                "autocast_bf16": _autocast_works("cpu", "bfloat16"),
                "autocast_fp16": _autocast_works("cpu", "float16"),
                "compile": _compile_status("cpu"),
                "onnxruntime_providers": providers,
                "tensorrt": {"available": False, "reason": "TensorRT runs on CUDA devices only"},
            },
        }
    ]
    for index in range(torch.cuda.device_count() if has_cuda else 0):
        props = torch.cuda.get_device_properties(index)
        devices.append(
            {
                "id": f"cuda:{index}",
                "type": "cuda",
                "name": props.name,
                "memory_total": props.total_memory,
                "compute_capability": f"{props.major}.{props.minor}",
                "capabilities": {
                    "autocast_bf16": torch.cuda.is_bf16_supported(),
                    "autocast_fp16": True,
                    "compile": _compile_status("cuda"),
                    "onnxruntime_providers": providers,
                    "tensorrt": tensorrt,
                },
            }
        )
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        devices.append(
            {
                "id": "mps",
                "type": "mps",
                "name": "Apple Metal (MPS)",
                "memory_total": _cpu_memory(),
                "capabilities": {
                    "autocast_bf16": _autocast_works("mps", "bfloat16"),
                    "autocast_fp16": _autocast_works("mps", "float16"),
                    "compile": _compile_status("mps"),
                    "onnxruntime_providers": providers,
                    "tensorrt": {"available": False, "reason": "TensorRT runs on CUDA devices only"},
                },
            }
        )
    return devices


@register_task("devices.list", kind="query")
def list_devices(spec: dict, ctx):
    """List the devices torch can use, with their memory and capabilities."""
    import torch

    return {"devices": describe_devices(), "torch": torch.__version__, "torchrun": torchrun_group()}


def torchrun_group() -> dict | None:
    """The torchrun group this process runs in (rank, local_rank, world_size, backend, master), or None."""
    import torch

    from workbench.worker.training.torchrun import environment

    env = environment()
    if env is None:
        return None
    return env.describe("nccl" if torch.cuda.is_available() else "gloo")
