"""`profile_steps`: torch.profiler over a few training steps after a warm-up, written as
artifacts/profile_top_ops.json (top ops by self CPU time) and artifacts/trace.json (Chrome trace).

Worker side; never imports Qt.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from workbench.runs import atomic_write_json

TOP_OPS = 30
WARMUP_STEPS = 2  # the first steps allocate memory and pick kernels: not what a user wants to see


def top_ops(prof, count: int = TOP_OPS) -> list[dict]:
    rows = []
    for event in prof.key_averages():
        device_total = getattr(event, "device_time_total", None)
        if device_total is None:  # older torch names it after CUDA
            device_total = getattr(event, "cuda_time_total", 0)
        rows.append(
            {
                "name": event.key,
                "calls": int(event.count),
                "cpu_time_total_us": float(event.cpu_time_total),
                "self_cpu_time_total_us": float(event.self_cpu_time_total),
                "device_time_total_us": float(device_total or 0),
            }
        )
    rows.sort(key=lambda r: r["self_cpu_time_total_us"], reverse=True)
    return rows[:count]


class StepProfiler:
    """Call `step_done()` after every optimiser step; the profiler runs for `steps` steps after the warm-up
    and then writes its artifacts and announces them through `report.artifact`."""

    def __init__(self, steps: int, device: torch.device, artifacts_dir: Path, report, remaining_steps: int):
        self.steps = steps
        self.artifacts_dir = Path(artifacts_dir)
        self.report = report
        self.activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        # A short run still gets a profile: skip the warm-up when it would leave fewer steps than asked for.
        self.warmup = min(WARMUP_STEPS, max(0, remaining_steps - steps))
        self.seen = 0
        self.recorded = 0
        self.prof = None
        self.finished = steps <= 0
        if not self.finished and self.warmup == 0:
            self._start()

    def _start(self) -> None:
        self.prof = profile(activities=self.activities)
        self.prof.start()

    def step_done(self) -> None:
        if self.finished:
            return
        self.seen += 1
        if self.prof is None:
            if self.seen >= self.warmup:
                self._start()
            return
        self.recorded += 1
        if self.recorded >= self.steps:
            self.close()

    def close(self) -> None:
        """Stop and write (also when training ended before all steps were recorded)."""
        if self.finished:
            return
        self.finished = True
        if self.prof is None:
            return
        self.prof.stop()
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        ops_path = self.artifacts_dir / "profile_top_ops.json"
        atomic_write_json(ops_path, top_ops(self.prof))
        trace_path = self.artifacts_dir / "trace.json"
        tmp = self.artifacts_dir / ".trace.json.tmp"
        self.prof.export_chrome_trace(str(tmp))
        os.replace(tmp, trace_path)
        self.prof = None
        self.report.artifact("profile", ops_path, kind="profile")
        self.report.artifact("trace", trace_path, kind="trace")
