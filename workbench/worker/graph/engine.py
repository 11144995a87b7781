"""`build_graph`: a GraphSpec to Model Explorer's graph JSON, the module table and overlays in the run's
artifacts/graph/ folder, and the result the CLI prints and the Graph tab shows. Worker side; never Qt.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.errors import JobError, SpecError, WorkbenchError
from workbench.runs import RunStore, atomic_write_json, effective_status
from workbench.specs import GraphSpec, ModelSpec, QuantSpec
from workbench.task_ids import QUANT_TASK
from workbench.worker.graph import me_json
from workbench.worker.graph.analyze import Analysis, ModuleStat, analyze
from workbench.worker.graph.capture import capture, describe_failure
from workbench.worker.graph.overlays import write_overlay, write_quant_overlays
from workbench.worker.graph.sources import build_module, check_file, has_profile, load_exported_program

GRAPH_DIR = "graph"
STEPS = 4


@dataclass
class QuantRun:
    """What a finished quantize run gives a graph: its id, its source and its report's per-layer entries."""

    id: str
    dir: Path
    spec: QuantSpec
    layers: list
    doctor: dict | None = None  # the report's doctor block, when the run diagnosed its layers


def read_quant_run(ref: str, workspace) -> QuantRun:
    """The finished quantize run `ref` names (id, id prefix or folder), opened read-only; a JobError naming
    the run and the problem otherwise."""
    from workbench.workspace import default_workspace

    store = RunStore(workspace if workspace is not None else default_workspace())
    try:
        with store.open_run(ref) as run:  # read-only: painting a run's results never writes to it
            run_dir, task = run.dir, run.task
            status, message = effective_status(run.dir, run.status, run.message, task)
            if task != QUANT_TASK:
                raise JobError(
                    f"quant_run: run {run_dir.name} is not a quantize run (it is a {task or 'unknown'} "
                    "run); pick a run of `workbench quantize`"
                )
            if status != "done":
                said = f": {message}" if message else ""
                raise JobError(
                    f"quant_run: run {run_dir.name} has not finished ({status}{said}); its per-layer "
                    "SQNR is in its report once it is done"
                )
            data, report = run.read_spec(), run.read_report()
    except JobError:
        raise
    except WorkbenchError as exc:
        raise JobError(f"quant_run: {exc}") from None
    if not report or not isinstance(report.get("layers"), list):
        raise JobError(f"quant_run: run {run_dir.name} has no per-layer results in {run_dir / 'report.json'}")
    try:
        spec = QuantSpec.from_dict(data)
    except SpecError as exc:
        raise JobError(
            f"quant_run: the spec of {run_dir.name} no longer reads as a quantize spec ({exc})"
        ) from None
    doctor = report.get("doctor") if isinstance(report.get("doctor"), dict) else None
    return QuantRun(run_dir.name, run_dir, spec, report["layers"], doctor)


def _with_quant_source(spec: GraphSpec, quant: QuantRun) -> GraphSpec:
    """`spec` with the quantize run's model when it names none of its own (source and model.* left empty; a
    model.input_shape alone still overrides): its training run, else the model and checkpoint it quantized."""
    if spec.source.run or spec.source.file or dataclasses.replace(spec.model, input_shape=[]) != ModelSpec():
        return spec
    source = quant.spec.source.run
    if source:
        # Its id (or folder) in the quantize run's own workspace, wherever that workspace is now.
        sibling = quant.dir.parent / Path(source).name
        run = str(sibling) if sibling.is_dir() else source
        return dataclasses.replace(spec, source=dataclasses.replace(spec.source, run=run))
    model = dataclasses.replace(
        quant.spec.model, input_shape=spec.model.input_shape or quant.spec.model.input_shape
    )
    return dataclasses.replace(spec, model=model, dataset=quant.spec.dataset)


def _write_overlays(folder: Path, graph: dict, modules: list[dict], times: dict[str, float] | None) -> dict:
    overlays = {}
    specs = [
        ("params", "Parameters", {m["name"]: m["params"] for m in modules}),
        ("flops", "FLOPs (millions)", {m["name"]: m["flops"] / 1e6 for m in modules}),
    ]
    if times:
        specs.append(("self_time_ms", "Forward self-time (ms, CPU, one sample)", times))
    for metric, label, values in specs:
        overlay = write_overlay(folder, metric, values, graph=graph, label=label, additive=True)
        overlays[metric] = overlay.summary(folder)
    return overlays


# metric, the layer statistic, label: a training run's latest recorded layer statistics, painted like SQNR
LAYER_OVERLAYS = (
    ("layers_grad_norm", "grad_norm", "Gradient norm"),
    ("layers_update_ratio", "update_ratio", "Update-to-weight ratio"),
    ("layers_dead_fraction", "dead_fraction", "Dead units (share)"),
    ("layers_weight_norm", "weight_norm", "Weight norm"),
    ("layers_act_std", "act_std", "Activation std"),
)


def _layer_overlays(folder: Path, graph: dict, spec: GraphSpec, ctx) -> dict:
    """The latest recorded layer statistics of the training run in source.run, one overlay per statistic."""
    from workbench.layer_records import SCALARS, latest_record

    if not spec.source.run:
        return {}
    try:
        run_dir = (
            RunStore(ctx.workspace).resolve(spec.source.run)
            if ctx.workspace is not None
            else Path(spec.source.run)
        )
    except WorkbenchError:
        return {}
    latest = latest_record(run_dir)
    if latest is None:
        return {}
    overlays = {}
    for metric, statistic, label in LAYER_OVERLAYS:
        column = latest["scalars"][:, SCALARS.index(statistic)]
        values = {name: float(value) for name, value in zip(latest["layers"], column) if math.isfinite(value)}
        if values:
            overlay = write_overlay(
                folder,
                metric,
                values,
                graph=graph,
                label=f"{label} (step {latest['step']})",
                additive=False,
                info={"run": run_dir.name, "step": latest["step"]},
            )
            overlays[metric] = overlay.summary(folder)
    return overlays


def _check_quant_source(spec: GraphSpec, quant: QuantRun, ctx) -> None:
    """A warning when source.run names another training run than the one the quantize run quantized."""
    if not spec.source.run or not quant.spec.source.run:
        return
    store = RunStore(ctx.workspace) if ctx.workspace is not None else None
    try:
        mine = store.resolve(spec.source.run).name if store else Path(spec.source.run).name
    except WorkbenchError:
        return  # source.run's own error comes when the model is loaded
    theirs = Path(quant.spec.source.run).name
    if mine != theirs and not mine.startswith(theirs):
        ctx.log(
            f"source.run {mine} is not the run {quant.id} quantized ({theirs}): its SQNR is painted on "
            "the modules whose names match",
            "warning",
        )


def _quant_overlays(folder: Path, graph: dict, modules: list[dict], quant: QuantRun, ctx) -> dict:
    written = write_quant_overlays(
        folder,
        graph,
        quant.layers,
        quant_run=quant.id,
        names=[m["name"] for m in modules],
        doctor=quant.doctor,
    )
    if not written:
        named = sorted(
            {e.get("name") for e in quant.layers if isinstance(e, dict) and isinstance(e.get("name"), str)}
        )
        raise JobError(
            f"quant_run: none of the layers of run {quant.id} ({', '.join(named[:6]) or 'none'}) is a "
            "module of this graph, or none has a finite SQNR; build the graph of the model it quantized"
        )
    for overlay in written.values():
        ctx.log(f"{overlay.label} of run {quant.id} on {overlay.nodes} nodes")
    return {metric: overlay.summary(folder) for metric, overlay in written.items()}


def _from_module(spec: GraphSpec, ctx) -> tuple[dict, Analysis, str, str, str, dict | None]:
    model, example, label, source = build_module(spec, ctx)
    ctx.progress(1, STEPS, "counting parameters and FLOPs", force=True)
    ctx.log(f"example inputs: {example.describe()} ({example.origin})")
    # A dict input goes by name, so the graph's module names stay the model's own.
    inputs, kwargs = ((), example.value) if example.kind == "dict" else (example.args(), None)
    analysis = analyze(model, inputs, kwargs=kwargs)
    ctx.check_stop()
    ctx.progress(2, STEPS, "capturing the graph with torch.export", force=True)
    captured = capture(model, inputs, ctx.log, kwargs=kwargs)
    ctx.check_stop()
    ctx.progress(3, STEPS, "writing Model Explorer's graph", force=True)
    if captured.program is not None:
        graph = me_json.graph_from_program(captured.program, spec.const_element_count_limit, ctx.log)
    else:
        graph = me_json.graph_from_modules(analysis)
    times = None
    if has_profile(source):
        # The run's own profile is by operator, not by module; per-module time is measured here, on this
        # model.
        from workbench.worker.graph.timing import self_times_ms

        times = self_times_ms(model, inputs, kwargs)
    return graph, analysis, captured.how, captured.reason, label, times


def _program_inputs(program) -> tuple[torch.Tensor, ...]:
    if program.example_inputs:
        args, kwargs = program.example_inputs
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            return tuple(a[:1].clone() if a.dim() else a.clone() for a in args)
    specs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    shapes = {
        n.name: n.meta["val"].shape for n in program.graph.nodes if n.op == "placeholder" and "val" in n.meta
    }
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*[int(d) for d in shapes[s.arg.name]], generator=generator) for s in specs)


def _from_program(spec: GraphSpec, path: Path, ctx) -> tuple[dict, Analysis, str, str, str, None]:
    program = load_exported_program(path)
    ctx.progress(1, STEPS, "counting parameters and FLOPs", force=True)
    types = me_json.module_types(program)
    inputs = _program_inputs(program)
    try:
        analysis = analyze(torch.export.unflatten(program), inputs, names=types)
    except JobError:
        raise
    except Exception as exc:  # unflatten refuses some programs; the counts then come from the flat graph
        ctx.log(f"per-module counts unavailable ({describe_failure(exc)}); totals only", "warning")
        analysis = analyze(program.module(), inputs)
        analysis.modules = [ModuleStat(name, kind, 0, 0) for name, kind in types.items()]
    ctx.progress(3, STEPS, "writing Model Explorer's graph", force=True)
    graph = me_json.graph_from_program(program, spec.const_element_count_limit, ctx.log)
    return (
        graph,
        analysis,
        "export",
        f"a saved ExportedProgram ({path.name}), shown as saved",
        path.name,
        None,
    )


def _from_onnx(spec: GraphSpec, path: Path, ctx) -> dict:
    from workbench.worker.graph.onnx_stats import onnx_stats

    stats = onnx_stats(path)
    ctx.progress(3, STEPS, "converting with model-explorer-onnx", force=True)
    try:
        graph = me_json.graph_from_onnx(path, spec.const_element_count_limit, ctx.log)
    except Exception as exc:  # the adapter's own failures on odd files
        raise JobError(
            f"source.file: model-explorer-onnx cannot convert {path} ({describe_failure(exc)})"
        ) from None
    return {
        "graph": graph,
        "modules": stats["modules"],
        "params_total": stats["params_total"],
        "params_trainable": stats["params_total"],
        "flops": stats["flops"],
        "capture": "export",
        "capture_reason": f"an ONNX file ({path.name}), converted by model-explorer-onnx; rows are ONNX "
        "nodes, and an ONNX file does not say which weights train, so all count as trainable",
        "model": path.name,
        "input_shape": None,
        "times": None,
    }


def build_graph(spec: GraphSpec, ctx) -> dict:
    """The `graph.build` task: capture, count, write graph JSON and overlays; returns the result contract."""
    run = ctx.run
    if run is None:
        raise JobError("the graph is written into a run folder: run it with a workspace")
    folder = run.artifacts_dir / GRAPH_DIR
    ctx.progress(0, STEPS, "loading the model", force=True)
    quant = read_quant_run(spec.quant_run, ctx.workspace) if spec.quant_run else None
    if quant is not None:
        spec = _with_quant_source(spec, quant)
        _check_quant_source(spec, quant, ctx)
    path = check_file(spec.source.file) if spec.source.file else None
    if path is not None and path.suffix.lower() == ".onnx":
        found = _from_onnx(spec, path, ctx)
    else:
        if path is not None:
            graph, analysis, how, reason, label, times = _from_program(spec, path, ctx)
        else:
            graph, analysis, how, reason, label, times = _from_module(spec, ctx)
        found = {
            "graph": graph,
            "modules": [m.row() for m in analysis.modules],
            "params_total": analysis.params_total,
            "params_trainable": analysis.params_trainable,
            "flops": analysis.flops,
            "capture": how,
            "capture_reason": reason,
            "model": label,
            "input_shape": list(analysis.input_shape),
            "times": times,
        }
    graph_path = folder / "graph.json"
    me_json.write_graph(graph_path, found["graph"], found["model"])
    modules_path = folder / "modules.json"
    atomic_write_json(modules_path, found["modules"])
    overlays = _write_overlays(folder, found["graph"], found["modules"], found["times"])
    if quant is not None:
        overlays.update(_quant_overlays(folder, found["graph"], found["modules"], quant, ctx))
    else:
        overlays.update(_layer_overlays(folder, found["graph"], spec, ctx))
    ctx.artifact("graph", graph_path, kind="graph")
    ctx.artifact("overlays", folder / "overlays.json", kind="overlays")
    nodes = me_json.count_nodes(found["graph"])
    ctx.progress(STEPS, STEPS, f"{nodes} nodes, captured by {found['capture']}", force=True)
    ctx.log(
        f"graph of {found['model']}: {nodes} nodes ({found['capture_reason']}); {found['params_total']:,} "
        f"parameters, {found['flops']:,} FLOPs per sample"
    )
    return {
        "graph_json": str(graph_path),
        "nodes": nodes,
        "params_total": found["params_total"],
        "params_trainable": found["params_trainable"],
        "flops": found["flops"],
        "modules": found["modules"],
        "capture": found["capture"],
        "capture_reason": found["capture_reason"],
        "model": found["model"],
        "input_shape": found["input_shape"],
        "modules_json": str(modules_path),
        "overlays_json": str(folder / "overlays.json"),
        "overlays": overlays,
        "quant_run": quant.id if quant is not None else "",
    }
