"""ONNX with QuantizeLinear/DequantizeLinear from a quantize run: `write_onnx_qdq(quant_run_dir, out_path)`
(the export task and the onnxruntime_int8 benchmark call it) and `build_qdq`, which also gives the parity
check the simulated model. 8-bit only. Worker side; never imports Qt.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize

from workbench.errors import JobError, SpecError, WorkbenchError
from workbench.results import dig
from workbench.specs import DataSpec, ModelSpec, QuantSpec
from workbench.task_ids import QUANT_TASK
from workbench.worker.export import qdq_ops
from workbench.worker.export.common import file_size, staged_output
from workbench.worker.export.formats import example_batch, write_onnx

# What the file holds: the model as the quantize run quantized it (the same BatchNorms folded, its corrected
# biases), every weight as int8 (symmetric, zero point 0) or uint8 (asymmetric) codes behind a
# DequantizeLinear, per channel along the weight's output-channel axis (0; 1 for a ConvTranspose, as ONNX lays
# out its weight; an embedding's table per row, then Gather) or per tensor as the run chose, and a
# QuantizeLinear + DequantizeLinear pair with the run's scale and zero point at every activation point (the
# input, each layer's output after its activation, each residual add). QuantizeLinear holds 8-bit integers
# here; a layer that mixed precision kept at 16 bits stays float (its 16-bit weights dequantized, its output
# clipped to its range), with a warning; other bit widths are refused.
MIN_OPSET = qdq_ops.SYMBOLIC_OPSET
BITS = 8
FLOAT_BITS = 16  # a mixed-precision layer at this width is kept float in the ONNX file

Say = Callable[..., None]  # (text, level="info")


@dataclass
class QuantRun:
    """What a finished quantize run gives an export: its spec, parameters and report, the training run it
    quantized (when it still exists) and the model and dataset it worked on."""

    dir: Path
    spec: QuantSpec
    params: dict
    report: dict
    model: ModelSpec  # the model's architecture; the weights come from the run's artifacts/quantized.pt
    dataset: DataSpec
    train_dir: Path | None
    train: object = None  # the training run's TrainSpec (its task decides what accuracy means), when readable

    @property
    def id(self) -> str:
        return self.dir.name

    @property
    def artifacts(self) -> Path:
        return self.dir / "artifacts"

    @property
    def recorded_checkpoint(self) -> Path:
        """The float checkpoint the run's params say it quantized."""
        return Path(str(self.params.get("checkpoint") or "")).expanduser()

    def fp32_checkpoint(self) -> Path | None:
        """The float weights the run started from: the file its params name, else its training run's
        checkpoint; None when both are gone (a quantize run keeps only its quantized weights)."""
        from workbench.worker.source import run_checkpoint

        recorded = self.recorded_checkpoint
        if str(recorded) not in ("", ".") and recorded.is_file():
            return recorded
        if self.train_dir is not None:
            try:
                return run_checkpoint(self.train_dir)
            except JobError:
                return None
        return None


def read_quant_run(
    ref: str | Path, workspace: str | Path | None, *, field: str = "source.run", say: Say | None = None
) -> QuantRun:
    """The finished quantize run `ref` names (id, id prefix or folder), read without writing to it; a JobError
    naming `field`, the run and what to do otherwise."""
    from workbench.runs import RunStore, effective_status
    from workbench.trust import ChangedCodeError
    from workbench.worker.quant.artifacts import FORMAT, PARAMS_FILE, WEIGHTS_FILE
    from workbench.worker.source import merge_dataset, read_training_run
    from workbench.workspace import default_workspace

    ref_path = Path(str(ref)).expanduser()
    if workspace is None and ref_path.is_dir():
        workspace = ref_path.absolute().parent.parent  # <workspace>/runs/<id>
    store = RunStore(workspace if workspace is not None else default_workspace())
    try:
        with store.open_run(str(ref)) as run:
            run_dir, task = run.dir, run.task
            status, message = effective_status(run.dir, run.status, run.message, task)
            if task != QUANT_TASK:
                raise JobError(
                    f"{field}: {run_dir.name} is a {task or 'unknown'} run; onnx_qdq takes the scales and "
                    "zero points of a quantize run: run `workbench quantize --set source.run=<training "
                    "run>` and name that run"
                )
            if status != "done":
                said = f": {message}" if message else ""
                raise JobError(
                    f"{field}: quantize run {run_dir.name} has not finished ({status}{said}); its "
                    "quantized model is saved when it is done"
                )
            data, report = run.read_spec(), run.read_report() or {}
    except JobError:
        raise
    except WorkbenchError as exc:
        raise JobError(f"{field}: {exc}") from None
    try:
        spec = QuantSpec.from_dict(data)
    except SpecError as exc:
        raise JobError(
            f"{field}: the spec of {run_dir.name} no longer reads as a quantize spec ({exc})"
        ) from None
    artifacts = run_dir / "artifacts"
    for name in (PARAMS_FILE, WEIGHTS_FILE):
        if not (artifacts / name).is_file():
            raise JobError(
                f"{field}: quantize run {run_dir.name} has no {artifacts / name}; run the quantization "
                "again (runs older than the export engine did not keep it)"
            )
    try:
        params = json.loads((artifacts / PARAMS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise JobError(
            f"{artifacts / PARAMS_FILE} cannot be read ({exc}); run the quantization again"
        ) from None
    if not isinstance(params, dict) or params.get("format") != FORMAT:
        raise JobError(
            f"{artifacts / PARAMS_FILE}: format "
            f"{params.get('format') if isinstance(params, dict) else None!r} is not {FORMAT}; run the "
            "quantization again with this version"
        )
    try:
        model = ModelSpec.from_dict(params["model"])
    except (KeyError, TypeError, SpecError) as exc:
        raise JobError(
            f"{artifacts / PARAMS_FILE}: its model entry does not read as a model spec ({exc})"
        ) from None
    model = dataclasses.replace(model, checkpoint="", weights="", freeze=[])
    dataset, train_dir, trained = spec.dataset, None, None
    if spec.source.run:
        # The training run's id (or folder) in the quantize run's own workspace, wherever that workspace is
        # now.
        sibling = run_dir.parent / Path(spec.source.run).name
        try:
            train_dir, trained = read_training_run(
                str(sibling) if sibling.is_dir() else spec.source.run,
                run_dir.parent.parent,
                refusal="it is not a training run",
            )
            dataset = merge_dataset(trained.dataset, spec.dataset)
        except ChangedCodeError:
            raise
        except JobError as exc:
            if say is not None:
                say(
                    f"the training run of {run_dir.name} cannot be read ({exc}); using the quantize run's "
                    "own dataset settings",
                    "warning",
                )
    return QuantRun(run_dir, spec, params, report, model, dataset, train_dir, trained)


# --- the exportable model -----------------------------------------------------------------------------------


def unsigned_weights() -> bool:
    """Whether int8 weight codes are written as uint8 with zero point 128 (the same values): on an x86 CPU
    without VNNI, onnxruntime's fused u8 x s8 kernels add products in pairs in int16 (vpmaddubsw), which
    saturates for large codes and leaves the simulation's grid; its u8 x u8 kernels widen first and compute
    exactly. With VNNI (or on ARM) the signed weights stay, as its kernels are exact and faster there.
    WORKBENCH_QDQ_WEIGHTS=int8 or uint8 chooses for another target."""
    chosen = os.environ.get("WORKBENCH_QDQ_WEIGHTS", "").strip().lower()
    if chosen in ("int8", "uint8"):
        return chosen == "uint8"
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return not any(flag in flags for flag in (" avx512_vnni", " avx_vnni", " amx_int8"))


class QuantizedWeight(nn.Module):
    """A parametrization: the layer's weight is dequantize(codes), the codes an int8/uint8 buffer (the ONNX
    initializer); the float weight it replaces is ignored (and dropped from the exported graph)."""

    def __init__(self, codes: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, axis: int):
        super().__init__()
        self.register_buffer("codes", codes)
        self.register_buffer("scale", scale.float())
        self.register_buffer("zero_point", zero_point)
        self.axis = axis

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return torch.ops.workbench.dq(self.codes, self.scale, self.zero_point, self.axis)


class ActivationQDQ(nn.Module):
    """QuantizeLinear + DequantizeLinear with one scale and zero point (per tensor) at an activation point."""

    def __init__(self, point: str, scale: float, zero_point: int, qmin: int, qmax: int):
        super().__init__()
        self.point = point
        dtype = torch.uint8 if qmin == 0 else torch.int8
        self.register_buffer("scale", torch.tensor(scale, dtype=torch.float32))
        self.register_buffer("zero_point", torch.tensor(zero_point, dtype=dtype))
        self.qmin, self.qmax = qmin, qmax

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.workbench.qdq(
            x, self.scale, self.zero_point, qdq_ops.PER_TENSOR, self.qmin, self.qmax
        )


class Saturate(nn.Module):
    """clamp(x, low, high) (an ONNX Clip): a point kept float still saturates at its quantizer's range."""

    def __init__(self, low: float, high: float):
        super().__init__()
        self.low, self.high = low, high

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, self.low, self.high)


def _onnx_grid(grid, what: str) -> tuple[torch.dtype, int, int]:
    """The ONNX integer type of an 8-bit grid; QuantizeLinear clamps to the whole type, so a narrower grid
    only works for weights, whose codes are already inside it."""
    if grid.signed:
        return torch.int8, -128, 127
    if grid.qmin != 0 or grid.qmax != 255:
        raise JobError(f"{what}: an unsigned grid {grid.qmin}..{grid.qmax} has no ONNX integer type")
    return torch.uint8, 0, 255


def _mixed_layers(spec: QuantSpec) -> dict[str, int]:
    return {item["name"]: int(item["bits"]) for item in spec.mixed_precision.layers}


def _kept_float(kind: str, name: str, bits: int, mixed: dict[str, int], say: Say) -> bool:
    """Whether a layer's weights (or a point's activations) stay float; a JobError for a width ONNX QDQ
    lacks."""
    if bits == BITS:
        return False
    if bits == FLOAT_BITS and mixed.get(name) == FLOAT_BITS:
        say(
            f"{name}: the mixed-precision proposal keeps its {kind} at 16 bits, which ONNX QuantizeLinear "
            "cannot hold; they stay float in the ONNX file",
            "warning",
        )
        return True
    raise JobError(
        f"onnx_qdq: {name} has {bits}-bit {kind}, and ONNX QuantizeLinear/DequantizeLinear hold 8-bit "
        f"integers; quantize with weights.bits=8 and activations.bits=8 (16-bit layers are kept only "
        "through mixed_precision.layers, and stay float here)"
    )


def _int32_bias(sim, name: str, module: nn.Module, mixed: dict[str, int], say: Say) -> None:
    """Write the bias of a layer fed by an 8-bit quantizer as int32 codes behind a DequantizeLinear, as the
    simulation adds it. Left float, onnxruntime would quantize it itself, and a code past the int32 range then
    becomes whatever its float-to-int cast gives (-2^31 on x86); here it saturates, in the file and the
    simulation."""
    point = sim.bias_inputs.get(name)
    found = sim.int32_bias_codes(name)
    if found is None or mixed.get(point, BITS) != BITS or sim.points[point].module.qp.grid.bits != BITS:
        return
    codes, grid_scale, saturated = found
    codes, grid_scale = codes.detach().cpu(), grid_scale.detach().cpu()
    if saturated:
        say(
            f"{name}: its bias does not fit int32 on the grid of its input's scale "
            f"({float(sim.bias_input_scale(name)):.3g}) times its weights' scale, so int8 kernels saturate "
            "it; the activations before it span almost nothing (a quantizer scale this small means they "
            "vanished): check the model's weights",
            "warning",
        )
    axis = 0 if grid_scale.dim() else qdq_ops.PER_TENSOR
    parametrize.register_parametrization(
        module,
        "bias",
        QuantizedWeight(
            codes.to(torch.int32),
            grid_scale,
            torch.zeros_like(codes, dtype=torch.int32) if axis == 0 else torch.zeros((), dtype=torch.int32),
            axis,
        ),
        unsafe=True,
    )


def qdq_module(sim, spec: QuantSpec, say: Say) -> tuple[nn.Module, dict]:
    """A copy of the simulation model whose quantizers are Q/DQ ops; what was quantized and what kept
    float."""
    mixed = _mixed_layers(spec)
    gm = copy.deepcopy(sim.gm).eval()
    # Each weight quantizer's module is found in the copy by its path (a module called twice is one entry).
    done: set[str] = set()
    weights = {"qdq": [], "float": []}
    unsigned = unsigned_weights()
    if unsigned:
        say(
            "int8 weight codes are written as uint8 with zero point 128 (the same values): this CPU has no "
            "VNNI, and onnxruntime's u8 x s8 kernels saturate there while its u8 x u8 kernels compute "
            "exactly; set WORKBENCH_QDQ_WEIGHTS=int8 to write signed weights for a VNNI target"
        )
    for name, wq in sim.weights.items():
        target = sim.structure.layers[name].path
        if _kept_float("weights", name, wq.grid.bits, mixed, say):
            weights["float"].append(name)
            continue
        weights["qdq"].append(name)
        if target in done:
            continue
        done.add(target)
        dtype, _, _ = _onnx_grid(wq.grid, f"{name} weights")
        codes = wq.codes.detach().cpu().round()
        zero_point = wq.qp.zero_point.detach().cpu()
        if dtype == torch.int8 and unsigned:  # the same values on a grid onnxruntime computes exactly here
            codes, zero_point, dtype = codes + 128, zero_point + 128, torch.uint8
        codes, zero_point = codes.to(dtype), zero_point.to(dtype)
        axis = wq.qp.axis if wq.qp.axis is not None else qdq_ops.PER_TENSOR
        scale = wq.qp.scale.detach().cpu().float()
        if axis == qdq_ops.PER_TENSOR:
            scale, zero_point = scale.reshape(()), zero_point.reshape(())
        module = gm.get_submodule(target)
        parametrize.register_parametrization(
            module, "weight", QuantizedWeight(codes, scale, zero_point, axis), unsafe=True
        )
        _int32_bias(sim, name, module, mixed, say)
    activations = {"qdq": [], "float": []}
    for path, module in list(gm.named_modules()):
        if not getattr(module, "is_quantizer", False):
            continue
        point = module.point
        state = sim.points[point]
        qp = state.module.qp
        if qp is None:
            activations["float"].append(point)
            replacement: nn.Module = nn.Identity()
        elif _kept_float("activations", point, qp.grid.bits, mixed, say):
            # Float, but saturating where the 16-bit grid does: a range that clips outliers keeps clipping
            # them.
            activations["float"].append(point)
            low, high = (float(v) for v in qp.extent())
            replacement = Saturate(low, high)
        else:
            activations["qdq"].append(point)
            _, qmin, qmax = _onnx_grid(qp.grid, f"{point} activations")
            replacement = ActivationQDQ(point, float(qp.scale), int(qp.zero_point), qmin, qmax)
        parent, _, child = path.rpartition(".")
        setattr(gm.get_submodule(parent) if parent else gm, child, replacement)
    # a module-level simulation's hooks call the replaced child as it is
    if isinstance(gm, torch.fx.GraphModule):
        gm.recompile()
    return gm, {"weights": weights, "activations": activations}


def logits_scale(sim, layers: dict | None = None) -> float | None:
    """The scale of the 8-bit quantizer on the model's output, or None where the export leaves the output
    float."""
    kept = set(dig(layers, "activations", "float", default=[]))
    for name, point in sim.structure.points.items():
        qp = sim.points[name].module.qp
        if point.logits and qp is not None and sim.points[name].module.enabled and name not in kept:
            return float(qp.scale)
    return None


@dataclass
class QdqBuild:
    run: QuantRun
    sim: object  # workbench.worker.quant.sim.QuantSim, everything quantized
    module: nn.Module  # what is exported
    input_shape: tuple[int, ...]
    layers: dict


def input_shape_of(run: QuantRun, workspace, say: Say) -> tuple[int, ...]:
    if run.model.input_shape:
        return tuple(run.model.input_shape)
    from workbench.worker.data import load_dataset

    try:
        dataset = load_dataset(run.dataset, workspace=workspace)
    except JobError as exc:
        raise JobError(
            f"the input shape of quantize run {run.id} comes from its dataset, which cannot be read ({exc})"
        ) from None
    return tuple(dataset.sample_shape)


def load_sim(run: QuantRun, *, say: Say, input_shape: tuple[int, ...], example=None):
    """The run's simulated quantized model (a QuantSim, everything quantized) rebuilt on the CPU from its
    artifacts:
    what the ONNX QDQ export writes and what Try it (workbench.worker.predict) runs. `example`: one sample of
    the model's inputs (workbench.worker.inputs.Example.sample), for a model that does not take one float
    tensor."""
    from workbench.worker.models import build_model
    from workbench.worker.quant.artifacts import load_quantized

    # task=custom: any output passes the trial forward pass; the model was checked for its task when it
    # trained (a segmentation model gives a map, a regression one a value).
    model = build_model(
        run.model,
        input_shape=input_shape,
        log=say,
        pretrained=False,
        checkpoint=False,
        task="custom",
        example=example,
    ).eval()
    try:
        sim = load_quantized(model, run.artifacts, params=run.params)
    except JobError:
        raise
    # a quantized.pt that does not fit the params or the model
    except (KeyError, RuntimeError, ValueError) as exc:
        raise JobError(
            f"{run.artifacts}: the saved quantized model does not fit {run.model.name} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); run the "
            "quantization again"
        ) from None
    sim.all()
    return sim


def build_qdq(
    run: QuantRun, *, say: Say, workspace=None, input_shape: tuple[int, ...] | None = None, example=None
) -> QdqBuild:
    """Rebuild the run's quantized model (load_sim) and its Q/DQ copy, on the CPU; `example` as load_sim's."""
    shape = input_shape or input_shape_of(
        run, workspace if workspace is not None else run.dir.parent.parent, say
    )
    sim = load_sim(run, say=say, input_shape=shape, example=example)
    module, layers = qdq_module(sim, run.spec, say)
    return QdqBuild(run, sim, module, shape, layers)


def count_nodes(path: Path) -> dict[str, int]:
    import onnx

    proto = onnx.load(str(path), load_external_data=False)
    counts = {"QuantizeLinear": 0, "DequantizeLinear": 0}
    for node in proto.graph.node:
        if node.op_type in counts:
            counts[node.op_type] += 1
    return counts


def export_qdq(
    build: QdqBuild,
    out_path: Path,
    *,
    opset: int,
    dynamic_batch: bool,
    say: Say,
    example: torch.Tensor | None = None,
) -> dict:
    """Write build.module as ONNX QDQ to out_path (staged: a failure leaves any earlier file in place).
    `example` is the input the exporter traces with (token ids for a model that starts with an embedding);
    random floats of the build's input shape where none is given."""
    if opset < MIN_OPSET:
        raise JobError(
            f"opset: {opset} is too old for onnx_qdq; per-channel QuantizeLinear/DequantizeLinear need "
            f"opset {MIN_OPSET} or newer (18 is the default)"
        )
    if example is None:
        example = torch.randn(
            example_batch(dynamic_batch), *build.input_shape, generator=torch.Generator().manual_seed(0)
        )
    with staged_output(out_path) as staged:
        info = write_onnx(
            build.module,
            example,
            staged,
            opset=opset,
            dynamic_batch=dynamic_batch,
            log=say,
            output_names=["output"],
            translations=qdq_ops.dynamo_translations(),
            register_symbolics=qdq_ops.register_torchscript_symbolics,
            fmt="onnx_qdq",
        )
        nodes = count_nodes(staged)
    expected = len(build.layers["activations"]["qdq"])
    if nodes["QuantizeLinear"] < expected:
        raise JobError(
            f"onnx_qdq: the exported graph has {nodes['QuantizeLinear']} QuantizeLinear nodes for "
            f"{expected} quantized activation points; the exporter dropped some. Try format=onnx"
        )
    return {**info, "nodes": nodes}


def write_onnx_qdq(
    quant_run_dir: Path,
    out_path: Path,
    *,
    opset: int = 18,
    dynamic_batch: bool = True,
    log=print,
    example=None,
) -> dict:
    """Write the quantized model of the quantize run in `quant_run_dir` (a run folder) as ONNX with
    QuantizeLinear/DequantizeLinear to `out_path`. `log` takes one string.

    Returns {"path", "size_bytes", "opset", "exporter" ("dynamo" or "torchscript"), "fallback_reason" (None,
    or why the torch.export-based exporter was not used), "quant_run" (its id), "input_name" ("input"),
    "output_name" ("output"), "input_shape" (one sample's shape, no batch), "dynamic_batch", "weights" and
    "activations" ({"qdq": [layer names], "float": [names kept float]}), "nodes" ({"QuantizeLinear": n,
    "DequantizeLinear": m}), "output_scale" (the output quantizer's scale, or None) and "warnings" ([text])}.
    Raises JobError (naming the run or file and what to do) when the run cannot be exported.
    """
    warnings: list[str] = []

    def say(text: str, level: str = "info") -> None:
        if level != "info":
            warnings.append(text)
        log(text if level == "info" else f"{level}: {text}")

    run = read_quant_run(Path(quant_run_dir), None, field="quant_run_dir", say=say)
    # `example` (workbench.worker.inputs.Example): the inputs of a model that does not take one float tensor,
    # token ids say, which the rebuild's trial pass and the exporter's trace take instead of random floats.
    integer = example is not None and not example.single
    build = build_qdq(run, say=say, example=example.sample(0) if integer else None)
    out_path = Path(out_path)
    traced = example.batch(example_batch(dynamic_batch)).tensors[0] if integer else None
    info = export_qdq(build, out_path, opset=opset, dynamic_batch=dynamic_batch, say=say, example=traced)
    return describe(build, out_path, info, dynamic_batch, warnings)


def describe(build: QdqBuild, out_path: Path, info: dict, dynamic_batch: bool, warnings: list[str]) -> dict:
    return {
        "path": str(out_path),
        "size_bytes": file_size(out_path),
        "opset": info["opset"],
        "exporter": info["exporter"],
        "fallback_reason": info["fallback_reason"],
        "quant_run": build.run.id,
        "input_name": "input",
        "output_name": "output",
        "input_shape": list(build.input_shape),
        "dynamic_batch": dynamic_batch,
        "weights": build.layers["weights"],
        "activations": build.layers["activations"],
        "nodes": info["nodes"],
        "output_scale": logits_scale(build.sim, build.layers),
        "warnings": warnings,
    }
