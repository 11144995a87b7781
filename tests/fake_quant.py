"""A torch-free quant.analyze for panel tests: the real task's messages (ladder rungs as metrics and the
quant/ladder array, per-tensor arrays, progress), its report contract and its histograms.npz, on made-up
numbers."""

from __future__ import annotations

import io
import json
import time

import numpy as np
from fake_doctor import fake_doctor

from workbench.errors import JobError

# Named as in tests/fake_worker.py's fake graph, so "Show on graph" finds the same modules.
FAKE_QUANT_LAYERS = ["features.0", "features.2", "classifier"]
CHANNELS = {"features.0": 8, "features.2": 16, "classifier": 10}
RANGE_COLUMNS = ["lo", "hi", "sqnr_db", "clipping_mse", "rounding_mse"]


def _plan(spec) -> list[str]:
    steps = (
        ["fp32"] + (["fold_bn"] if spec.fold_bn else []) + (["cle"] if spec.cle else []) + ["weight_ranges"]
    )
    steps += ["adaround"] if spec.adaround.enabled else []
    steps += ["bias_correction"] if spec.bias_correction != "none" else []
    return steps + ["activation_ranges"] + (["qat"] if spec.qat.epochs else [])


def _tensor(name: str, tensor: str, bits: int, rng) -> tuple[dict, dict]:
    """One quantizer's report entry and its arrays, from a made-up tensor."""
    values = rng.normal(0, 0.3, 4000) if tensor == "weight" else np.abs(rng.normal(0, 1.0, 4000))
    lo, hi = float(values.min()), float(values.max())
    clip = 0.8 * max(abs(lo), abs(hi))
    chosen = (-clip, clip) if tensor == "weight" else (0.0, clip)
    # Weights lose about 6 dB per bit; the deeper layers a little more, so the table has a worst layer.
    sqnr = 6.0 * bits - 2.0 * FAKE_QUANT_LAYERS.index(name) if name in FAKE_QUANT_LAYERS else 6.0 * bits + 3
    scale = (chosen[1] - chosen[0]) / (2**bits - 1)
    entry = {
        "name": name,
        "tensor": tensor,
        "bits": bits,
        "granularity": "per_tensor",
        "symmetric": tensor == "weight",
        "range_method": "mse",
        "qmin": -(2 ** (bits - 1) - 1) if tensor == "weight" else 0,
        "qmax": 2 ** (bits - 1) - 1 if tensor == "weight" else 2**bits - 1,
        "scale": scale,
        "zero_point": 0,
        "min": chosen[0],
        "max": chosen[1],
        "sqnr_db": sqnr,
        "mse": 10 ** (-sqnr / 10),
        "clipping_mse": 0.1 * 10 ** (-sqnr / 10),
        "rounding_mse": 0.9 * 10 ** (-sqnr / 10),
    }
    if tensor == "activation":
        entry["error"] = {
            "held_out": {
                "accumulated": {"sqnr_db": sqnr - 3, "mse": 1e-3, "cosine": 0.999},
                "only_this": {"sqnr_db": sqnr, "mse": 1e-4, "cosine": 0.9999},
            }
        }
    edges = np.linspace(min(lo, chosen[0]), max(hi, chosen[1]), 65)
    counts, _ = np.histogram(values, edges)
    estimators = ["chosen", "minmax", "mse", "percentile"]
    ranges = np.array(
        [
            [chosen[0], chosen[1], sqnr, 1e-5, 1e-4],
            [lo, hi, sqnr - 1.5, 0.0, 2e-4],
            [chosen[0], chosen[1], sqnr, 1e-5, 1e-4],
            [0.9 * lo, 0.9 * hi, sqnr - 0.5, 5e-5, 1.2e-4],
        ]
    )
    error = np.vstack(
        [np.where((edges[:-1] < chosen[0]) | (edges[1:] > chosen[1]), counts * 1e-3, 0.0), counts * 1e-5]
    )
    meta = {
        "layer": name,
        "tensor": tensor,
        "chosen": "mse",
        "sampled": tensor == "activation",
        "values": int(values.size),
    }
    key = f"{name}:{tensor}"
    arrays = {
        f"{key}:counts": (counts.astype(np.int64), meta),
        f"{key}:edges": (edges, meta),
        f"{key}:ranges": (ranges, {**meta, "estimators": estimators, "columns": RANGE_COLUMNS}),
        f"{key}:error": (error, {**meta, "rows": ["clipping", "rounding"]}),
    }
    if tensor == "weight":
        c = CHANNELS[name]
        spread = np.linspace(0.2, 1.5, c)
        arrays[f"{key}:cle_ranges"] = (
            np.stack([np.stack([-spread, spread], -1), np.stack([-np.full(c, 0.6), np.full(c, 0.6)], -1)]),
            {"layer": name, "rows": ["before", "after"], "columns": ["min", "max"]},
        )
    return entry, arrays


def fake_quant_analyze(spec, ctx):
    """Speaks like quant.analyze; calibration.seed doubles as a per-rung delay (ms) for tests."""
    if spec.source.run == "broken":
        raise JobError("source.run: run broken is not a training run")
    rng = np.random.default_rng(0)
    planned = _plan(spec)
    ladder = []
    for index, step in enumerate(planned):
        accuracy = 0.99 if step in ("fp32", "fold_bn", "cle") else 0.99 - 0.002 * (8 - spec.weights.bits) / 4
        ladder.append((step, accuracy, 0.05))
        ctx.metrics(index, {"quant/accuracy": accuracy, "quant/loss": 0.05})
        ctx.array(
            "quant/ladder",
            np.array([[a, loss] for _, a, loss in ladder]),
            steps=[s for s, _, _ in ladder],
            planned=planned,
            columns=["accuracy", "loss"],
        )
        ctx.progress(index + 1, len(planned) + 1, step)
        time.sleep(spec.calibration.seed / 1000)
        yield
    layers, arrays = [], {}
    for name in ["input", *FAKE_QUANT_LAYERS]:
        for tensor in ("activation",) if name == "input" else ("weight", "activation"):
            bits = spec.weights.bits if tensor == "weight" else spec.activations.bits
            entry, tensor_arrays = _tensor(name, tensor, bits, rng)
            layers.append(entry)
            for array_name, (array, meta) in tensor_arrays.items():
                arrays[array_name] = (array, meta)
                ctx.array(f"quant/{array_name}", array, **meta)
    report = {
        "fp32": {"accuracy": ladder[0][1], "loss": 0.05},
        "quantized": {"accuracy": ladder[-1][1], "loss": 0.05, "logit_sqnr_db": 6.0 * spec.weights.bits - 8},
        "steps": [{"step": s, "accuracy": a, "loss": loss} for s, a, loss in ladder],
        "layers": layers,
        "coverage": {
            "parameters": 0.999,
            "quantized_parameters": 999,
            "total_parameters": 1000,
            "float": [{"type": "LayerNorm", "modules": 1, "parameters": 1}],
        },
    }
    if spec.sensitivity or spec.mixed_precision.target_drop:
        report["sensitivity"] = [
            {"layer": name, "only_this": 0.99 - 0.001 * i, "all_but_this": 0.985 + 0.001 * i}
            for i, name in enumerate(["input", *FAKE_QUANT_LAYERS])
        ]
    if spec.mixed_precision.target_drop:
        report["mixed_precision"] = {
            "target_drop": spec.mixed_precision.target_drop,
            "layers": [{"name": "classifier", "bits": 8}],
            "accuracy": 0.989,
            "size_bytes": 9000,
            "met": True,
            "fp32_accuracy": 0.99,
            "fp32_size_bytes": 40000,
            "points": [
                {"layers": [], "accuracy": 0.985, "size_bytes": 6000},
                {"layers": ["classifier"], "accuracy": 0.989, "size_bytes": 9000},
            ],
        }
    if spec.doctor.enabled:
        report["doctor"] = fake_doctor(spec)
    folder = ctx.run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    np.savez(
        buffer,
        **{k: a for k, (a, _) in arrays.items()},
        __meta__=np.asarray(json.dumps({k: m for k, (_, m) in arrays.items()})),
    )
    (folder / "histograms.npz").write_bytes(buffer.getvalue())
    ctx.artifact("histograms", folder / "histograms.npz", kind="arrays")
    return report
