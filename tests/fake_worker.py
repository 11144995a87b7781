"""A fake worker for panel tests: the real kernel and protocol in a thread, serving torch-free tasks.

Its `devices.list` answers with a canned CPU and GPU, so the window's device picker can be tested here.
"""

from __future__ import annotations

import threading
from pathlib import Path

from workbench.protocol import ConnectionInfo
from workbench.worker.kernel import Kernel
from workbench.worker.registry import TaskInfo, get_task

FAKE_DEVICES = [
    {"id": "cpu", "type": "cpu", "name": "Fake CPU", "memory_total": 16 * 2**30,
     "capabilities": {"autocast_bf16": True, "autocast_fp16": False,
                      "compile": {"available": True, "reason": ""},
                      "onnxruntime_providers": ["CPUExecutionProvider"],
                      "tensorrt": {"available": False, "reason": "TensorRT runs on CUDA devices only"}}},
    {"id": "cuda:0", "type": "cuda", "name": "Fake GPU", "memory_total": 24 * 2**30,
     "capabilities": {"autocast_bf16": True, "autocast_fp16": True,
                      "compile": {"available": True, "reason": ""},
                      "onnxruntime_providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
                      "tensorrt": {"available": True, "reason": ""}}},
]


def _fake_devices(spec, ctx):
    return {"devices": FAKE_DEVICES, "torch": "fake"}


class FakeWorker:
    def __init__(self, directory: Path):
        tasks = {name: get_task(name) for name in ("debug.count", "debug.sleep", "debug.echo")}
        tasks["devices.list"] = TaskInfo("devices.list", _fake_devices, "query", None, False, "canned devices")
        self.kernel = Kernel(ConnectionInfo.new(), tasks=tasks)
        self.connection_file = Path(directory) / "fake-worker.json"
        self.kernel.conn.write(self.connection_file)
        self.thread = threading.Thread(target=self.kernel.serve_forever, name="fake-worker", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.kernel.request_shutdown()
        self.thread.join(timeout=5)
