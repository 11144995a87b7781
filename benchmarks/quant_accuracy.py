"""Accuracy of the post-training quantization pipeline on the digits cnn (trained here, about 99 % FP32):
FP32, W8A8 and W4A8 test accuracy and logit SQNR for each cumulative configuration of the paper's flow:
minmax, +MSE, +CLE, +AdaRound, +bias correction. Every row runs the real `quant.analyze` task on the same
trained run and the same calibration subset. Weights are per-tensor by default, where CLE and bias correction
matter (the paper's Tables 7 and 10); `--granularity per_channel` for the other setting. `--bits 3` adds a
harder row set.

    .venv/bin/python benchmarks/quant_accuracy.py [--bits 8 4] [--granularity per_tensor] [--adaround-iterations 1000]
        [--calibration 256] [--epochs 8]
"""  # noqa: E501

from __future__ import annotations

import argparse
import logging
import tempfile
import time

from workbench.worker.registry import get_task
from workbench.worker.runner import run_task

CONFIGS = [
    ("minmax", {"weights": {"range": "minmax"}, "activations": {"range": "minmax"}}),
    ("+MSE", {"weights": {"range": "mse"}, "activations": {"range": "mse"}}),
    ("+CLE", {"cle": True}),
    ("+AdaRound", {"adaround": {"enabled": True}}),
    ("+bias correction", {"bias_correction": "empirical"}),
]


def _merge(base: dict, extra: dict) -> dict:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def _quiet(*args) -> None:
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bits", type=int, nargs="+", default=[8, 4], help="weight bit widths (activations: 8)"
    )
    parser.add_argument("--granularity", choices=["per_tensor", "per_channel"], default="per_tensor")
    parser.add_argument("--adaround-iterations", type=int, default=1000)
    parser.add_argument("--calibration", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=8)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as workspace:
        train = {
            "dataset": {"name": "digits"},
            "model": {"name": "cnn"},
            "epochs": args.epochs,
            "batch_size": 32,
            "lr": 1e-2,
            "scheduler": "onecycle",
            "keep_best": False,
        }
        trained = run_task(get_task("train.classifier"), train, emit=_quiet, workspace=workspace)
        assert trained["status"] == "done", trained.get("error")
        results: dict[tuple[str, int], dict] = {}
        fp32 = None
        for bits in args.bits:
            spec = {
                "source": {"run": trained["run_dir"]},
                "calibration": {"samples": args.calibration, "seed": 0},
                "weights": {"bits": bits, "granularity": args.granularity},
                "activations": {"bits": 8},
            }
            for label, extra in CONFIGS:
                spec = _merge(spec, extra)
                if "adaround" in spec:
                    spec["adaround"]["iterations"] = args.adaround_iterations
                started = time.perf_counter()
                result = run_task(get_task("quant.analyze"), spec, emit=_quiet, workspace=workspace)
                assert result["status"] == "done", result.get("error")
                result["seconds"] = time.perf_counter() - started
                results[(label, bits)] = result
                fp32 = result["fp32"]
    print(
        f"digits cnn, {args.epochs} epochs; FP32 test accuracy {fp32['accuracy']:.2%} (loss "
        f"{fp32['loss']:.4f}); weights {args.granularity}, activations 8-bit asymmetric; calibration "
        f"{args.calibration} samples"
    )
    header = f"{'configuration':<18}" + "".join(
        f"{f'W{b}A8 acc':>12}{'logit SQNR':>12}{'s':>6}" for b in args.bits
    )
    print(header)
    print("-" * len(header))
    for label, _ in CONFIGS:
        row = f"{label:<18}"
        for bits in args.bits:
            r = results[(label, bits)]
            row += (
                f"{r['quantized']['accuracy']:>12.2%}{r['quantized']['logit_sqnr_db']:>10.2f}dB"
                f"{r['seconds']:>6.1f}"
            )
        print(row)


if __name__ == "__main__":
    main()
