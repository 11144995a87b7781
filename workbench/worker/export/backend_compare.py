"""Across backends, per PyTorch module: the QDQ step analysis's code comparison (onnxruntime against the
quantize run's simulation, quantizer by quantizer) gathered by the module that owns each quantizer, the
doctor's `backend_mismatch` findings drawn from it, and TensorRT's per-module outputs where TensorRT and CUDA
are here."""

from __future__ import annotations

import importlib.util
import re

import torch

from workbench.quant_findings import beyond_ties as _beyond_ties
from workbench.worker.export import qdq_steps
from workbench.worker.export.common import reason as reason_of

CONFIGURATIONS = (("deployed", True), ("as written", False))  # onnxruntime's graph optimizations on, then off
INPUT_MODULE = "(input)"  # the model's input quantizer belongs to no submodule
# An op of the model's own forward() (a residual add written there) belongs to no submodule.
ROOT_MODULE = "(model)"
TENSORRT_MODULES = 8  # TensorRT builds one engine per module compared: the worst modules only


# --- which module owns a quantizer
# ----------------------------------------------------------------------------------


def point_owners(sim) -> dict[str, str]:
    """{activation point: the PyTorch module path that owns it}. A layer's point belongs to its layer (the
    path of a layer called twice, whose second point is named `<path>@1`); a point named after a module (a
    pooling, a requantization after a LayerNorm, `<layer>.input` before a layer) to that module; an add to the
    module whose output it quantizes (the ReLU module after it) or whose forward holds it (ROOT_MODULE for the
    model's own forward); the input to INPUT_MODULE."""
    structure = sim.structure
    modules = {name for name, _ in sim.gm.named_modules() if name}
    return {name: _owner_of(name, point, structure, modules) for name, point in structure.points.items()}


def _owner_of(name: str, point, structure, modules: set[str]) -> str:
    if point.kind == "input":
        return INPUT_MODULE
    if point.kind == "layer" and point.layer in structure.layers:
        return structure.layers[point.layer].path
    base = re.sub(r"@\d+$", "", name)
    for candidate in (base, base.removesuffix(".input")):
        if candidate in modules:
            return candidate
    stack = (point.node.meta.get("nn_module_stack") or {}) if point.node is not None else {}
    paths = [value[0] for value in stack.values() if isinstance(value, (tuple, list)) and value and value[0]]
    return paths[-1] if paths else ROOT_MODULE


# --- onnxruntime's codes per module
# ---------------------------------------------------------------------------------


def tallies_of(measured: qdq_steps.Measured) -> dict[str, dict]:
    """One configuration's per-quantizer comparison (qdq_steps.measure's `per_point`) as plain numbers:
    {point: {codes, equal, ties, elsewhere, two_or_more, worst_step}}."""
    worst = getattr(measured, "worst", {}) or {}
    return {
        point: {
            "codes": sum(t),
            "equal": t[0],
            "ties": t[1],
            "elsewhere": t[2],
            "two_or_more": t[3],
            "worst_step": int(worst.get(point, _least_worst(t))),
        }
        for point, t in measured.per_point.items()
    }


def _least_worst(tally: list[int]) -> int:
    """The worst step a tally's buckets imply, where the largest difference was not recorded."""
    return 2 if tally[3] else (1 if tally[1] + tally[2] else 0)


def codes_by_module(configurations: dict[str, dict[str, dict]], owners: dict[str, str]) -> list[dict]:
    """The step analysis per PyTorch module: `configurations` = {"deployed": tallies_of(...), "as written":
    ...}. One row per module that owns a compared quantizer: {module, quantizers, codes, codes_off, ties,
    worst_step, configuration, by_configuration}. `codes_off` counts every code that differs (a tie's one-step
    flip included), `ties` those flips alone; the row's headline numbers are the configuration where the
    module is worse (codes off beyond ties, then the worst step), each configuration's in `by_configuration`.
    Worst first."""
    grouped: dict[str, dict[str, dict]] = {}
    quantizers: dict[str, list[str]] = {}
    for configuration, tallies in configurations.items():
        for point, tally in tallies.items():
            module = owners.get(point, point)
            if point not in quantizers.setdefault(module, []):
                quantizers[module].append(point)
            totals = grouped.setdefault(module, {}).setdefault(
                configuration, {"codes": 0, "codes_off": 0, "ties": 0, "worst_step": 0}
            )
            totals["codes"] += int(tally["codes"])
            totals["codes_off"] += int(tally["ties"] + tally["elsewhere"] + tally["two_or_more"])
            totals["ties"] += int(tally["ties"])
            totals["worst_step"] = max(totals["worst_step"], int(tally["worst_step"]))
    rows = []
    for module, by_configuration in grouped.items():
        configuration = max(
            by_configuration,
            key=lambda c: (
                _beyond_ties(by_configuration[c]),
                by_configuration[c]["worst_step"],
                -list(configurations).index(c),
            ),
        )
        rows.append(
            {
                "module": module,
                "quantizers": quantizers[module],
                **by_configuration[configuration],
                "configuration": configuration,
                "by_configuration": by_configuration,
            }
        )
    rows.sort(key=lambda r: (-_beyond_ties(r), -r["worst_step"], -r["codes_off"], r["module"]))
    return rows


# --- TensorRT, one module's output at a time
# ------------------------------------------------------------------------


def tensorrt_unavailable() -> str | None:
    """Why TensorRT's comparison cannot run here, or None where it can."""
    if not torch.cuda.is_available():
        return "TensorRT comparison: not available here (no CUDA)"
    if importlib.util.find_spec("tensorrt") is None:
        return "TensorRT comparison: not available here (tensorrt is not installed)"
    return None


def tensorrt_by_module(sim, onnx_path, x: torch.Tensor, owners: dict[str, str], modules: list[str]) -> dict:
    """TensorRT's output of each of `modules` (the first TENSORRT_MODULES) against the simulation's on input
    x: for each, an engine built from the QDQ file with only that module's dequantized outputs marked as extra
    outputs, so TensorRT's fusions hold everywhere else and one engine at a time is in memory. Counted in
    steps of the module's quantizer; the simulation runs free (no teacher forcing), so a difference carried
    from upstream counts too. {available, reason, rows}; where TensorRT or CUDA is missing, the reason and no
    rows."""
    reason = tensorrt_unavailable()
    if reason is not None:
        return {"available": False, "reason": reason, "rows": []}
    import onnx

    proto = onnx.load(str(onnx_path))
    dequantized = _dequantized_outputs(proto)  # quantizer module name -> its DequantizeLinear's output
    by_name = qdq_steps._quantizers_by_name(sim)
    x = x.detach().float().cpu()
    simulated = _simulated_points(sim, by_name, x)
    rows = []
    for module in [m for m in modules if m != INPUT_MODULE][:TENSORRT_MODULES]:
        marks = {
            name: dequantized[name]
            for name, q in by_name.items()
            if owners.get(q.point) == module and name in dequantized and q.point in simulated
        }
        if not marks:
            continue
        try:
            outputs = _tensorrt_run(proto, x, list(marks.values()))
        except Exception as exc:  # a module TensorRT cannot build with its output marked: said in its row
            rows.append({"module": module, "configuration": "TensorRT", "error": reason_of(exc)})
            continue
        codes = off = worst = 0
        for name, tensor in marks.items():
            point = by_name[name].point
            reference, scale = simulated[point]
            theirs = outputs.get(tensor)
            if theirs is None or tuple(theirs.shape) != tuple(reference.shape):
                continue
            gap = torch.round((theirs.float().cpu() - reference).abs() / scale)
            codes, off, worst = codes + gap.numel(), off + int((gap > 0).sum()), max(worst, int(gap.max()))
        rows.append(
            {
                "module": module,
                "codes": codes,
                "codes_off": off,
                "ties": None,
                "worst_step": worst,
                "configuration": "TensorRT",
            }
        )
    return {"available": True, "reason": "", "rows": rows}


def _dequantized_outputs(proto) -> dict[str, str]:
    """{quantizer module name (_quant_act_<k>): the output of the DequantizeLinear right after its
    QuantizeLinear}."""
    quantized = {}
    for node in proto.graph.node:
        if node.op_type == "QuantizeLinear":
            name = qdq_steps._quantizer_of(node)
            if name is not None:
                quantized.setdefault(node.output[0], name)
    found: dict[str, str] = {}
    for node in proto.graph.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in quantized:
            found.setdefault(quantized[node.input[0]], node.output[0])
    return found


@torch.no_grad()
def _simulated_points(sim, by_name: dict, x: torch.Tensor) -> dict[str, tuple[torch.Tensor, float]]:
    """{point: (the simulation's quantized output there, its step)} for the per-tensor quantizers, in one
    pass."""
    seen: dict[str, tuple[torch.Tensor, float]] = {}

    def hook(module):
        def keep(_, __, output):
            qp = module.qp
            per_tensor = qp is not None and qp.scale.numel() == 1
            if module.enabled and per_tensor and isinstance(output, torch.Tensor):
                seen.setdefault(module.point, (output.detach().float().cpu().clone(), float(qp.scale)))

        return keep

    handles = [m.register_forward_hook(hook(m)) for m in by_name.values()]
    try:
        sim(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _tensorrt_run(proto, x: torch.Tensor, marked: list[str]) -> dict[str, torch.Tensor]:
    """A TensorRT engine built from the QDQ model with `marked` tensors as extra outputs, run on x (CUDA)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    explicit = (
        0
        if int(trt.__version__.split(".")[0]) >= 10
        else 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    )  # TensorRT 10 is explicit batch only
    network = builder.create_network(explicit)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(proto.SerializeToString()):
        raise RuntimeError("; ".join(str(parser.get_error(i)) for i in range(parser.num_errors)))
    wanted = set(marked)
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        for j in range(layer.num_outputs):
            if layer.get_output(j).name in wanted:
                network.mark_output(layer.get_output(j))
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.INT8)  # explicit quantization: the Q/DQ pairs set every int8 scale
    input_name = network.get_input(0).name
    profile = builder.create_optimization_profile()
    profile.set_shape(input_name, tuple(x.shape), tuple(x.shape), tuple(x.shape))
    config.add_optimization_profile(profile)
    engine = trt.Runtime(logger).deserialize_cuda_engine(builder.build_serialized_network(network, config))
    context = engine.create_execution_context()
    context.set_input_shape(input_name, tuple(x.shape))
    feed = x.cuda().contiguous()
    context.set_tensor_address(input_name, feed.data_ptr())
    outputs = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            dtype = torch.float16 if engine.get_tensor_dtype(name) == trt.DataType.HALF else torch.float32
            outputs[name] = torch.empty(tuple(context.get_tensor_shape(name)), dtype=dtype, device="cuda")
            context.set_tensor_address(name, outputs[name].data_ptr())
    stream = torch.cuda.Stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return {name: outputs[name] for name in marked if name in outputs}
