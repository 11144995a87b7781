"""QDQ parity over the zoo of issue #22: torchvision classifiers at their random initialisation
(torch.manual_seed(0), 10 classes), the `fake` dataset at 64x64 (75 for inception_v3, 224 for the ViTs), the
default W8A8 `quantize` on 32 calibration samples, then `export format=onnx_qdq` from that run. Prints one row
per model (parity as deployed and as written, the output's difference and tolerance in steps, quantizer codes
one step off at a rounding tie, elsewhere, two or more) and a summary: how many passed and the worst ratio of
difference to tolerance.

    .venv/bin/python benchmarks/qdq_zoo.py [--models resnet18 googlenet] [--size 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import torch

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

# The twelve that failed parity in the sweep first, then the ten that passed.
ZOO = [
    "resnet18",
    "resnet50",
    "wide_resnet50_2",
    "resnext50_32x4d",
    "mobilenet_v2",
    "regnet_y_400mf",
    "squeezenet1_0",
    "densenet121",
    "inception_v3",
    "vgg11_bn",
    "swin_t",
    "maxvit_t",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "shufflenet_v2_x0_5",
    "googlenet",
    "mnasnet0_5",
    "convnext_tiny",
    "vit_b_16",
    "alexnet",
]
SIZES = {"inception_v3": 75, "vit_b_16": 224, "maxvit_t": 224}


def _quiet(*args) -> None:
    pass


def _run(task: str, spec: dict, workspace: Path) -> dict:
    return run_task(get_task(task), spec, emit=_quiet, workspace=workspace)


def one(arch: str, size: int, root: Path) -> dict:
    """Quantize and export one model; its row."""
    import torchvision

    torch.manual_seed(0)
    checkpoint = root / f"{arch}.pt"
    torch.save(torchvision.models.get_model(arch, num_classes=10).state_dict(), checkpoint)
    data = {
        "name": "fake",
        "num_classes": 10,
        "size": 128,
        "test_fraction": 0.25,
        "image_size": [SIZES.get(arch, size)] * 2,
    }
    started = time.perf_counter()
    quant = _run(
        "quant.analyze",
        {
            "model": {"name": f"torchvision:{arch}", "checkpoint": str(checkpoint)},
            "dataset": data,
            "calibration": {"samples": 32},
            "eval_samples": 32,
        },
        root / "ws",
    )
    if quant["status"] != "done":
        return {"model": arch, "error": f"quantize: {quant['error']['message'][:160]}"}
    quant_s = time.perf_counter() - started
    started = time.perf_counter()
    result = _run(
        "export.model", {"source": {"run": Path(quant["run_dir"]).name}, "format": "onnx_qdq"}, root / "ws"
    )
    if result["status"] != "done":
        return {"model": arch, "error": f"export: {result['error']['message'][:160]}"}
    parity, accuracy = result["parity"], result.get("accuracy") or {}
    steps = parity["steps"]
    row = {
        "model": arch,
        "passed": parity["passed"],
        "unit": steps["unit"],
        "quant_s": round(quant_s, 1),
        "export_s": result["export_s"],
        "parity_s": parity.get("parity_s"),
        "wall_export_s": round(time.perf_counter() - started, 1),
        "accuracy_equal": accuracy.get("equal"),
        "accuracy": {"onnxruntime": accuracy.get("onnxruntime"), "simulated": accuracy.get("simulated")},
    }
    for mode in ("deployed", "as_written"):
        analysis = steps[mode]
        q = analysis["quantizers"]
        row[mode] = {
            "passed": analysis["passed"],
            "max_steps": analysis["max_steps"],
            "tolerance_steps": analysis["tolerance_steps"],
            "values": q["values"],
            "tie_flips": q["one_step_at_a_tie"],
            "elsewhere": q["one_step_elsewhere"],
            "two_or_more": q["two_or_more"],
            "first_off": q["off"][0]["point"] if q["off"] else None,
        }
    return row


def _ratio(row: dict) -> float:
    ratios = [
        row[m]["max_steps"] / row[m]["tolerance_steps"]
        for m in ("deployed", "as_written")
        if row.get(m) and row[m]["max_steps"] is not None
    ]
    return max(ratios) if ratios else float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="*", default=ZOO)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = []
    print(
        f"{'model':<20} {'parity':<7} {'deployed steps/tol':>18} {'as written':>11} {'tie flips':>10} "
        f"{'elsewhere':>9} {'>=2':>4} {'acc equal':>9} {'export s':>8} {'parity s':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.models:
            row = one(arch, args.size, Path(tmp))
            rows.append(row)
            if "error" in row:
                print(f"{arch:<20} error   {row['error']}", flush=True)
                continue
            d, w = row["deployed"], row["as_written"]
            print(
                f"{arch:<20} {'pass' if row['passed'] else 'FAIL':<7} {d['max_steps']:>9.0f} / "
                f"{d['tolerance_steps']:<6} {w['max_steps']:>4.0f} / {w['tolerance_steps']:<4} "
                f"{d['tie_flips'] + w['tie_flips']:>10} {d['elsewhere'] + w['elsewhere']:>9} "
                f"{d['two_or_more'] + w['two_or_more']:>4} {str(row['accuracy_equal']):>9} "
                f"{row['export_s']:>8.1f} {row['parity_s'] or 0:>8.1f}",
                flush=True,
            )
    measured = [r for r in rows if "error" not in r]
    passed = sum(1 for r in measured if r["passed"])
    worst = max(measured, key=_ratio, default=None)
    print(
        f"\n{passed}/{len(measured)} pass parity as deployed and as written ({len(rows) - len(measured)} did "
        "not quantize or export)"
    )
    if worst is not None:
        print(f"worst difference / tolerance: {_ratio(worst):.2f} ({worst['model']})")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
