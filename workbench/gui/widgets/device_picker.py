"""The device picker: the devices the worker reported, with their capabilities as tooltips, and what each
device cannot usefully do (the wizards grey those options out with the reason).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n else "unknown memory"


def device_type(device: dict) -> str:
    return device.get("type") or str(device.get("id", "cpu")).split(":")[0]


def amp_unavailable_reason(device: dict | None, amp: str) -> str:
    """Why mixed precision `amp` (none, bf16, fp16) should not be offered on `device`; "" when it should.

    The worker reports what autocast accepts, which is not the same as what helps: CPU autocast takes fp16,
    but CPUs have few fp16 kernels, so a run casts back and forth and is about ten times slower than fp32.
    """
    if amp == "none" or device is None:
        return ""
    if not device.get("capabilities", {}).get(f"autocast_{amp}"):
        return f"{amp} autocast is not supported on this device"
    if amp == "fp16" and device_type(device) == "cpu":
        return "fp16 on the CPU runs about ten times slower than full precision; use bf16 or none"
    return ""


def describe_capabilities(device: dict) -> str:
    caps = device.get("capabilities", {})
    compile_ = caps.get("compile", {})
    trt = caps.get("tensorrt", {})
    lines = [
        f"{device.get('name', device['id'])} — {_gib(device.get('memory_total', 0))}",
        f"bf16 autocast: {'yes' if caps.get('autocast_bf16') else 'no'}",
        "fp16 autocast: "
        + (
            "slow on the CPU"
            if caps.get("autocast_fp16") and device_type(device) == "cpu"
            else "yes"
            if caps.get("autocast_fp16")
            else "no"
        ),
        "torch.compile: " + ("yes" if compile_.get("available") else f"no — {compile_.get('reason', '')}"),
        "ONNX Runtime: " + (", ".join(caps.get("onnxruntime_providers", [])) or "not installed"),
        "TensorRT: " + ("yes" if trt.get("available") else f"no — {trt.get('reason', '')}"),
    ]
    return "\n".join(lines)


class DevicePicker(QComboBox):
    device_chosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.devices: list[dict] = []
        self._preferred = "cpu"
        self.setMinimumContentsLength(18)
        self.setToolTip("The device the worker runs jobs on")
        self.addItem("cpu (checking…)", "cpu")
        self.currentIndexChanged.connect(self._on_index_changed)

    def set_preferred(self, device_id: str) -> None:
        self._preferred = device_id

    def set_devices(self, devices: list[dict]) -> None:
        self.devices = devices
        self.blockSignals(True)
        self.clear()
        for i, device in enumerate(devices):
            self.addItem(f"{device['id']} · {device.get('name', '')}".strip(" ·"), device["id"])
            self.setItemData(i, describe_capabilities(device), role=3)  # Qt.ToolTipRole
        index = max(0, self.findData(self._preferred))
        self.setCurrentIndex(index)
        self.blockSignals(False)
        self._on_index_changed(index)

    def current_device(self) -> str:
        return self.currentData() or "cpu"

    def current_info(self) -> dict | None:
        return next((d for d in self.devices if d["id"] == self.current_device()), None)

    def _on_index_changed(self, index: int) -> None:
        info = self.current_info()
        self.setToolTip(describe_capabilities(info) if info else "The device the worker runs jobs on")
        if info:
            self._preferred = info["id"]
            self.device_chosen.emit(info["id"])
