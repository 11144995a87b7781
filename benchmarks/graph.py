"""Time from a graph request to Model Explorer's graph JSON on disk, against a bare torch.export of the same
model plus Model Explorer's adapter, as ratios measured in the same run (medians of interleaved repeats; these
machines are shared and noisy, so read ratios, not figures). Random weights; torchvision resnet18 and resnet50
at 3x224x224.

Rows:
- `bare export + convert (strict)`: torch.export.export(strict=True), the adapter's convert() and json.dumps;
  the same capture mode the workbench tries first, so its ratio is the workbench's own overhead (building the
  model and its dry forward pass, one counting forward for FLOPs and shapes, overlays, files).
- `bare export + convert (default)`: torch.export.export with its default (non-strict in torch >= 2.7), as the
  reference ("a bare torch.export.export"). The workbench captures non-strict first, and strict only where
  non-strict fails. Goal: <= 1.5x.
- `workbench graph.build`: the task through the runner in this process (run folder, report, overlays
  included).

    .venv/bin/python benchmarks/graph.py [--models resnet18,resnet50] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torchvision
from model_explorer.pytorch_exported_program_adapter_impl import PytorchExportedProgramAdapterImpl
from model_explorer.utils import convert_adapter_response

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

SHAPE = (3, 224, 224)


def bare(arch: str, strict: bool) -> float:
    start = time.perf_counter()
    model = getattr(torchvision.models, arch)(num_classes=10).eval()
    program = torch.export.export(model, (torch.randn(1, *SHAPE),), strict=strict)
    graphs = PytorchExportedProgramAdapterImpl(program, {"const_element_count_limit": 16}).convert()
    json.dumps(convert_adapter_response(graphs))
    return time.perf_counter() - start


def workbench(arch: str, workspace: str) -> float:
    spec = {"model": {"name": f"torchvision:{arch}", "num_classes": 10, "input_shape": list(SHAPE)}}
    start = time.perf_counter()
    result = run_task(get_task("graph.build"), spec, emit=lambda *args: None, workspace=workspace)
    elapsed = time.perf_counter() - start
    if result["status"] != "done":
        raise SystemExit(f"graph.build failed: {result.get('error')}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="resnet18,resnet50")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {args.repeats} "
        "interleaved repeats after one untimed warm-up of each row",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as workspace:
        for arch in args.models.split(","):
            rows = {
                "bare export + convert (strict)": lambda a=arch: bare(a, True),
                "bare export + convert (default)": lambda a=arch: bare(a, False),
                "workbench graph.build": lambda a=arch: workbench(a, workspace),
            }
            times: dict[str, list[float]] = {name: [] for name in rows}
            for run in rows.values():  # Dynamo's and torchvision's first-use costs are nobody's overhead
                run()
            for _ in range(args.repeats):
                for name, run in rows.items():
                    times[name].append(run())
            medians = {name: statistics.median(values) for name, values in times.items()}
            ours = medians["workbench graph.build"]
            print(f"\n{arch} (3x224x224, 10 classes)")
            for name, value in medians.items():
                print(f"  {name:34s} {value:7.2f} s")
            print(
                "  ratio vs strict reference          "
                f"{ours / medians['bare export + convert (strict)']:7.2f}x"
            )
            print(
                "  ratio vs default reference         "
                f"{ours / medians['bare export + convert (default)']:7.2f}x   (goal <= 1.5x)",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
