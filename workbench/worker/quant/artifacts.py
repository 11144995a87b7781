"""What a quantize run keeps for later (the ONNX QDQ exporter, a re-run): the quantized weights with their
scales and zero points (artifacts/quantized.pt, loadable with torch.load(weights_only=True)), the quantization
parameters as JSON (artifacts/quant_params.json), every histogram and range array (artifacts/histograms.npz),
and `load_quantized` to rebuild the quantized model from them. Worker side; never imports Qt.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

from workbench.errors import JobError
from workbench.runs import atomic_write_bytes, atomic_write_json
from workbench.worker.checkpoints import load_state_dict, save_state_dict
from workbench.worker.quant.quantizer import Grid, QParams, int_dtype

FORMAT = 1
WEIGHTS_FILE = "quantized.pt"
PARAMS_FILE = "quant_params.json"
HISTOGRAMS_FILE = "histograms.npz"


def _grid(grid: Grid) -> dict:
    return {
        "bits": grid.bits,
        "symmetric": grid.symmetric,
        "signed": grid.signed,
        "restricted": grid.restricted,
        "qmin": grid.qmin,
        "qmax": grid.qmax,
    }


def save_quantized(sim, folder: Path, *, model_spec: dict, checkpoint: str) -> tuple[Path, Path]:
    """Write quantized.pt and quant_params.json into `folder`; the simulation ends with everything
    quantized."""
    sim.all()
    weights, activations = [], []
    tensors = {
        "format": torch.tensor(FORMAT),
        "state_dict": {k: v.detach().cpu().clone() for k, v in sim.gm.state_dict().items()},
        "weight_int": {},
        "weight_scale": {},
        "weight_zero_point": {},
        "activation_scale": {},
        "activation_zero_point": {},
    }
    for name, wq in sim.weights.items():
        tensors["weight_int"][name] = wq.codes.detach().cpu().to(int_dtype(wq.grid))
        tensors["weight_scale"][name] = wq.qp.scale.detach().cpu()
        tensors["weight_zero_point"][name] = wq.qp.zero_point.detach().cpu()
        weights.append(
            {
                "name": name,
                **_grid(wq.grid),
                "axis": wq.qp.axis,
                "range_method": wq.method,
                "rounding": wq.rounding,
                "scale": wq.qp.scale.cpu().reshape(-1).tolist(),
                "zero_point": wq.qp.zero_point.cpu().reshape(-1).tolist(),
            }
        )
    for name, state in sim.points.items():
        qp = state.module.qp
        point = sim.structure.points[name]
        tensors["activation_scale"][name] = qp.scale.detach().cpu()
        tensors["activation_zero_point"][name] = qp.zero_point.detach().cpu()
        traced = point.node is not None
        activations.append(
            {
                "name": name,
                "kind": point.kind,
                "after_node": point.node.name if traced else None,
                "after_module": (point.node.target if point.node.op == "call_module" else None)
                if traced
                else point.layer,
                "logits": point.logits,
                **_grid(qp.grid),
                "range_method": state.method,
                "scale": float(qp.scale),
                "zero_point": int(qp.zero_point),
                **({"feeds": sim.structure.feeds[name]} if name in sim.structure.feeds else {}),
            }
        )
    weights_path = folder / WEIGHTS_FILE
    save_state_dict(tensors, weights_path, name=f"artifacts/{WEIGHTS_FILE}")
    params = {
        "format": FORMAT,
        "model": model_spec,
        "checkpoint": checkpoint,
        "folded_bn": {info["bn"]: layer for layer, info in sim.folded.items()},
        "groups": sim.groups,
        "weights": weights,
        "activations": activations,
    }
    if not sim.structure.traced:
        params["tracing"] = "modules"  # torch.fx could not trace it: load_quantized rebuilds the hooks
    params_path = folder / PARAMS_FILE
    atomic_write_json(params_path, params)
    return weights_path, params_path


# in histograms.npz: a JSON string, each array's metadata (estimator names, rows, columns)
META_KEY = "__meta__"


def save_arrays(path: Path, arrays: dict[str, tuple[np.ndarray, dict]]) -> None:
    """Every array with the metadata it was sent with, so a reader of a finished run sees what a live one
    saw."""
    buffer = io.BytesIO()
    meta = json.dumps({name: m for name, (_, m) in arrays.items()})
    np.savez_compressed(
        buffer, **{name: a for name, (a, _) in arrays.items()}, **{META_KEY: np.asarray(meta)}
    )
    atomic_write_bytes(path, buffer.getvalue())


def _unpacked_attention(state: dict, expected: set[str]) -> dict:
    """`state` with nn.MultiheadAttention's packed in_proj_weight/in_proj_bias (or its q/k/v_proj_weight) as
    the q_proj, k_proj and v_proj layers that trace() now makes of it: runs saved before attention was
    quantized hold the packed form. Keys the model expects are left as they are."""
    state = dict(state)
    for key in list(state):
        if key in expected:
            continue
        prefix, _, leaf = key.rpartition(".")
        head = f"{prefix}." if prefix else ""
        if leaf in ("in_proj_weight", "in_proj_bias"):
            kind = leaf.removeprefix("in_proj_")
            if f"{head}q_proj.{kind}" in expected:  # rows q, then k, then v
                for part, value in zip(("q_proj", "k_proj", "v_proj"), state.pop(key).chunk(3), strict=True):
                    state[f"{head}{part}.{kind}"] = value.clone()
        elif leaf in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
            layer = leaf.removesuffix("_weight")
            if f"{head}{layer}.weight" in expected:
                state[f"{head}{layer}.weight"] = state.pop(key)
    return state


def _inside(node, module: str) -> bool:
    """Whether the traced `node` computes part of the module at path `module`."""
    inner = f"{module}."
    if node.op == "call_module" and (node.target == module or node.target.startswith(inner)):
        return True
    stack = node.meta.get("nn_module_stack") or {}
    return any(path == module or path.startswith(inner) for path, _ in stack.values())


def _moved_points(gm, structure, activations: list[dict]) -> dict[str, str]:
    """{saved point: point now} for the saved points the structure no longer has: one after a module that fx
    kept whole when the run was saved (an nn.TransformerEncoder, now traced op by op) sits at that module's
    last node, which the structure names after what computes it there (its last layer's LayerNorm)."""
    at = {point.node: name for name, point in structure.points.items() if point.node is not None}
    nodes = list(gm.graph.nodes)
    moved = {}
    for info in activations:
        module = info.get("after_module")
        if info["name"] in structure.points or not module:
            continue
        inside = [node for node in nodes if _inside(node, module)]
        if inside and inside[-1] in at and at[inside[-1]] not in moved.values():
            moved[info["name"]] = at[inside[-1]]
    return moved


def load_quantized(model: nn.Module, folder: str | Path, *, params: dict | None = None):
    """Rebuild the quantized model that a quantize run saved in `folder` (its artifacts/), from a freshly
    built `model` of the same spec: fold the same BatchNorms, load the quantized weights and biases, and put
    the activation quantizers back with their scales. Returns a QuantSim with everything quantized."""

    from workbench.worker.quant import module_level
    from workbench.worker.quant.cle import ensure_bias
    from workbench.worker.quant.graph import find_structure, fold_batchnorms, trace
    from workbench.worker.quant.sim import QuantSim

    folder = Path(folder)
    params = params or json.loads((folder / PARAMS_FILE).read_text(encoding="utf-8"))
    if params.get("format") != FORMAT:
        raise JobError(f"{folder / PARAMS_FILE}: format {params.get('format')!r} is not {FORMAT}")
    saved = load_state_dict(folder / WEIGHTS_FILE)
    if params.get("tracing") == "modules":
        gm, folded = module_level.prepare(model), {}
        logits = next((a["name"] for a in params["activations"] if a.get("logits")), None)
        structure = module_level.structure_of(
            gm,
            [w["name"] for w in params["weights"]],
            logits,
            input_point=any(a["kind"] == "input" for a in params["activations"]),
            feeds={a["name"]: a["feeds"] for a in params["activations"] if a["kind"] == "requant"},
        )
    else:
        gm = trace(model)
        folded = fold_batchnorms(gm, only=set(params["folded_bn"]))
        if sorted(info["bn"] for info in folded.values()) != sorted(params["folded_bn"]):
            raise JobError(f"{folder}: the model does not fold the same BatchNorms as the quantized one")
        structure = find_structure(gm)
    moved = _moved_points(gm, structure, params["activations"]) if structure.traced else {}
    saved["state_dict"] = _unpacked_attention(saved["state_dict"], set(gm.state_dict()))
    for name, layer in structure.layers.items():
        if getattr(layer.module, "bias", None) is None and f"{name}.bias" in saved["state_dict"]:
            ensure_bias(layer.module)  # bias correction gave a bias-free layer one
    gm.load_state_dict(saved["state_dict"])

    class _Plain:  # the sim's settings only matter for re-setting ranges, which a loaded model never does
        bits, symmetric, restricted, granularity, range, percentile = (
            8,
            True,
            True,
            "per_tensor",
            "minmax",
            99.99,
        )

    sim = QuantSim(gm, structure, folded, weights=_Plain, activations=_Plain)
    by_name = {w["name"]: w for w in params["weights"]}
    for name in [name for name in sim.weights if name not in by_name]:
        # A layer the run did not quantize stays float: attention's projections in a run saved before
        # they were layers (the sim and the ONNX export then leave their weights as they are).
        del sim.weights[name]
    for name, wq in sim.weights.items():
        info = by_name[name]
        grid = Grid(info["bits"], info["symmetric"], info["signed"], info["restricted"])
        wq.grid = grid
        wq.qp = QParams(
            saved["weight_scale"][name].float(),
            saved["weight_zero_point"][name].to(torch.int32),
            grid,
            info["axis"],
        )
        wq.codes = saved["weight_int"][name].float()
        wq.b_q = None if wq.b_fp is None else wq.b_fp.clone()  # the saved biases are the corrected ones
        wq.rounding, wq.method = info["rounding"], info["range_method"]
    for info in params["activations"]:
        state = sim.points.get(moved.get(info["name"], info["name"]))
        if state is None:  # a point the model no longer has: what it quantized stays float
            continue
        grid = Grid(info["bits"], info["symmetric"], info["signed"], info["restricted"])
        state.grid, state.bits, state.method = grid, grid.bits, info["range_method"]
        state.module.qp = QParams(
            saved["activation_scale"][info["name"]].float(),
            saved["activation_zero_point"][info["name"]].to(torch.int32),
            grid,
        )
    sim.all()
    return sim
