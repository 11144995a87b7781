"""The layer statistics a training run records (see workbench.worker.training.layer_stats): the file format,
read and written with numpy alone (the window, the report and the TensorBoard export read it), and what looks
wrong.
"""

from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np

from workbench.runs import atomic_writer

BINS = 64
# Per layer, in this order (the file's "scalars" columns).
SCALARS = ("weight_norm", "grad_norm", "update_ratio", "act_mean", "act_std", "dead_fraction")
KINDS = ("weights", "gradients", "activations")  # the histograms, in this order
STEP_FILE = "step-{:09d}.npz"
FOLDER = "layer_stats"

# What the log and the Layers view call out.
GRADIENT_SPREAD = 1e4  # first and last layers' gradient norms this far apart: vanishing or exploding
UPDATE_TARGET, UPDATE_FACTOR = 1e-3, 100.0  # an update ratio outside 1e-5..1e-1 is far from the usual 1e-3
SCHEDULED_DOWN = 0.1  # an lr under a tenth of the spec's: small updates are the schedule's doing
DEAD_LIMIT = 0.9  # more than 90 % of a layer's units zero for a whole batch after its ReLU


def record_from_rows(
    step: int, names: list[str], host: np.ndarray, *, lr: float = math.nan, lr_peak: float = math.nan
) -> dict:
    """A step's record from its rows: per layer the SCALARS, then per kind [low, high, BINS counts]; `lr` is
    the lr the step used and `lr_peak` the spec's (or the step's, if larger): a schedule's tail is no "lr too
    small"."""
    scalars = host[:, : len(SCALARS)]
    rest = host[:, len(SCALARS) :].reshape(len(names), len(KINDS), BINS + 2)
    return {
        "step": step,
        "layers": list(names),
        "scalars": scalars,
        "ranges": rest[:, :, :2],
        "counts": rest[:, :, 2:],
        "lr": float(lr),
        "lr_peak": float(lr_peak),
    }


def findings(record: dict) -> list[tuple[str, str, str]]:
    """(layer, kind, sentence) for what looks wrong in one recorded step: vanishing or exploding gradients,
    layers with no gradient, update ratios far from 1e-3, layers with more than 90 % dead units."""
    names, scalars, step = record["layers"], record["scalars"], record["step"]
    column = {name: index for index, name in enumerate(SCALARS)}
    out = []
    lr, peak = record.get("lr", math.nan), record.get("lr_peak", math.nan)
    scheduled_down = math.isfinite(lr) and math.isfinite(peak) and lr < SCHEDULED_DOWN * peak
    grads = scalars[:, column["grad_norm"]]
    if len(names) >= 2 and np.isfinite(grads[[0, -1]]).all():
        first, last = float(grads[0]), float(grads[-1])
        low, high = min(first, last), max(first, last)
        if high > 0 and (low == 0 or high / low >= GRADIENT_SPREAD):
            ratio = "no gradient at all" if low == 0 else f"{high / low:.0e}x apart"
            trend = "vanishing" if last > first else "exploding"
            out.append(
                (
                    names[0],
                    "gradient_spread",
                    f"step {step}: {trend} gradients: the gradient norm of the first layer {names[0]} "
                    f"({first:.2e}) and of the last layer {names[-1]} ({last:.2e}) are {ratio}",
                )
            )
    for index, name in enumerate(names):
        if float(scalars[index, column["grad_norm"]]) == 0.0:
            out.append(
                (
                    name,
                    "no_gradient",
                    f"step {step}: layer {name} gets no gradient at all (nothing flows back "
                    "to it: a dead layer after it, or a detached branch)",
                )
            )
        ratio = float(scalars[index, column["update_ratio"]])
        if (
            math.isfinite(ratio)
            and ratio > 0
            and not (UPDATE_TARGET / UPDATE_FACTOR <= ratio <= UPDATE_TARGET * UPDATE_FACTOR)
        ):
            size = "large" if ratio > UPDATE_TARGET else "small"
            if size == "small" and scheduled_down:
                continue  # a warm-up's start or a schedule's tail: small steps are what was asked for
            out.append(
                (
                    name,
                    f"update_{size}",
                    f"step {step}: layer {name}: the update-to-weight ratio is "
                    f"{ratio:.1e}, far from the usual 1e-3 (the lr may be too {size})",
                )
            )
        dead = float(scalars[index, column["dead_fraction"]])
        if math.isfinite(dead) and dead > DEAD_LIMIT:
            out.append(
                (
                    name,
                    "dead",
                    f"step {step}: layer {name}: {dead:.0%} of its units are dead (zero for the "
                    "whole batch after its ReLU)",
                )
            )
    return out


# -- files ---------------------------------------------------------------------------------------------
def write_record(folder: Path, record: dict) -> Path:
    """One .npz per recorded step, written whole then renamed (a reader never sees half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STEP_FILE.format(record["step"])
    with atomic_writer(path) as handle:
        np.savez(
            handle,
            step=np.int64(record["step"]),
            layers=np.array(record["layers"], dtype=str),
            lr=np.float64(record.get("lr", math.nan)),
            lr_peak=np.float64(record.get("lr_peak", math.nan)),
            scalars=record["scalars"],
            ranges=record["ranges"],
            counts=record["counts"],
            scalar_names=np.array(SCALARS, dtype=str),
            kinds=np.array(KINDS, dtype=str),
        )
    return path


def records_folder(run_dir: str | Path) -> Path:
    """Where a run keeps its recorded steps: artifacts/layer_stats/."""
    return Path(run_dir) / "artifacts" / FOLDER


def record_paths(run_dir: str | Path) -> list[Path]:
    """The recorded steps' files of a run, in step order."""
    folder = records_folder(run_dir)
    return sorted(folder.glob("step-*.npz")) if folder.is_dir() else []


def read_record(path: str | Path) -> dict:
    """One recorded step (raises ValueError naming the file when it is not one): no pickles are loaded."""
    try:
        with np.load(path, allow_pickle=False) as data:
            record = {
                "step": int(data["step"]),
                "layers": [str(name) for name in data["layers"]],
                "scalars": np.asarray(data["scalars"], dtype=np.float64),
                "ranges": np.asarray(data["ranges"], dtype=np.float64),
                "counts": np.asarray(data["counts"], dtype=np.float64),
                "lr": float(data["lr"]) if "lr" in data.files else math.nan,
                "lr_peak": float(data["lr_peak"]) if "lr_peak" in data.files else math.nan,
            }
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a layer statistics file ({exc})") from None
    count = len(record["layers"])
    if (
        record["scalars"].shape != (count, len(SCALARS))
        or record["counts"].shape != (count, len(KINDS), BINS)
        or record["ranges"].shape != (count, len(KINDS), 2)
    ):
        raise ValueError(f"{path}: not a layer statistics file (its arrays do not fit {count} layers)")
    return record


def latest_record(run_dir: str | Path) -> dict | None:
    """The last readable recorded step of a run (the files are read from the newest back, not all of them)."""
    for path in reversed(record_paths(run_dir)):
        try:
            return read_record(path)
        except ValueError:
            continue
    return None


def read_records(run_dir: str | Path) -> list[dict]:
    """Every readable recorded step of a run, in step order (a damaged file is skipped, not fatal)."""
    records = []
    for path in record_paths(run_dir):
        try:
            records.append(read_record(path))
        except ValueError:
            continue
    return records
