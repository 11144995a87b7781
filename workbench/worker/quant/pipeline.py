"""The quant.analyze job from spec to report: load the source model and data, run the paper's PTQ pipeline
(BN folding, CLE with bias absorption, weight ranges, AdaRound, bias correction, activation ranges) with one
accuracy rung per step sent as it finishes, then the per-layer analysis, sensitivity, mixed precision and the
artifacts. Worker side; never imports Qt.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch.func import functional_call

from workbench.errors import JobError
from workbench.specs import QuantSpec
from workbench.worker.data import load_dataset, resolve_workspace
from workbench.worker.models import build_model
from workbench.worker.models.build import resolve_num_classes
from workbench.worker.quant import adaround as adaround_mod
from workbench.worker.quant import analysis, artifacts, bias, cle, mixed, qat, source
from workbench.worker.quant.data import calibration_batches, evaluate, held_out_batches
from workbench.worker.quant.graph import cle_pairs, find_structure, fold_batchnorms, trace
from workbench.worker.quant.measure import sqnr_db
from workbench.worker.quant.sim import QuantSim, parallel_map
from workbench.worker.quant.taps import collect, tail_function
from workbench.worker.training.devices import resolve_device


class Ladder:
    """The accuracy ladder: one {step, accuracy, loss} per pipeline step, sent the moment the step finishes as a
    metric (quant/accuracy, quant/loss at the rung's index), the whole ladder so far as the array quant/ladder
    ((k, 2): accuracy, loss; its `steps` metadata names the rungs) and a log line."""

    def __init__(self, ctx, planned: list[str]):
        self.ctx = ctx
        self.planned = planned
        self.steps: list[dict] = []

    def add(self, step: str, result: dict) -> None:
        index = len(self.steps)
        self.steps.append({"step": step, "accuracy": result["accuracy"], "loss": result["loss"]})
        self.ctx.metrics(index, {"quant/accuracy": result["accuracy"], "quant/loss": result["loss"]})
        self.ctx.flush()
        ladder = np.asarray([[s["accuracy"], s["loss"]] for s in self.steps], dtype=np.float64)
        self.ctx.array("quant/ladder", ladder, steps=[s["step"] for s in self.steps], planned=self.planned,
                       columns=["accuracy", "loss"])
        self.ctx.log(f"step {index + 1}/{len(self.planned)} {step}: accuracy {result['accuracy']:.2%}, "
                     f"loss {result['loss']:.4f}")


class Stages:
    """Progress over the job's stages, with a line of text for each."""

    def __init__(self, ctx, names: list[str]):
        self.ctx = ctx
        self.names = names
        self.done = 0

    def start(self, name: str, text: str) -> None:
        self.ctx.check_stop()
        self.ctx.progress(self.names.index(name), len(self.names), text, force=True)

    def within(self, name: str, done: int, total: int, text: str = "") -> None:
        base = self.names.index(name)
        self.ctx.progress(base + done / max(total, 1), len(self.names), text)


def plan(spec: QuantSpec) -> list[str]:
    steps = ["fp32"]
    if spec.fold_bn:
        steps.append("fold_bn")
    if spec.cle:
        steps.append("cle")
    steps.append("weight_ranges")
    if spec.adaround.enabled:
        steps.append("adaround")
    if spec.bias_correction != "none":
        steps.append("bias_correction")
    steps.append("activation_ranges")
    if spec.qat.epochs:
        steps.append("qat")
    return steps


def _logit_sqnr(reference: torch.Tensor, logits: torch.Tensor) -> float | None:
    return sqnr_db(float(reference.double().pow(2).sum()), float((reference.double() - logits.double()).pow(2).sum()))


def _emit_arrays(ctx, arrays: dict, store: dict) -> None:
    for name, (array, meta) in arrays.items():
        store[name] = (array, meta)
        ctx.array(f"quant/{name}", array, **meta)


def run_quantization(spec: QuantSpec, ctx) -> dict:
    run = ctx.run
    if run is None:
        raise JobError("quantize needs a run folder for its report and artifacts: run it with a workspace")
    started = time.perf_counter()
    steps = plan(spec)
    stage_names = steps + ["analysis"] + (["sensitivity"] if spec.sensitivity or spec.mixed_precision.target_drop
                                          else []) + (["mixed_precision"] if spec.mixed_precision.target_drop
                                                      else []) + ["save"]
    stages = Stages(ctx, stage_names)
    ladder = Ladder(ctx, steps)
    ctx.log("ladder plan: " + ", ".join(steps))

    # --- source, data, model ----------------------------------------------------------------------------------------
    workspace = resolve_workspace(None, ctx)
    origin = source.resolve(spec.source.run, spec.model, spec.dataset, workspace)
    device = resolve_device(spec.device)
    dataset = load_dataset(origin.dataset, ctx=ctx)
    dataset.normalization(progress=ctx.progress)
    # Auto (0) classes become the dataset's count here, so the saved quantized model's spec is complete.
    origin.model = resolve_num_classes(origin.model, len(dataset.classes), ctx.log)
    model = build_model(origin.model, input_shape=dataset.sample_shape, log=ctx.log, pretrained=False)
    model.eval().to(device)
    ctx.log(f"quantizing {origin.model.name} from {origin.checkpoint} on {device}: weights W{spec.weights.bits} "
            f"{spec.weights.granularity} {spec.weights.range}, activations A{spec.activations.bits} "
            f"{spec.activations.range}")
    calibration = calibration_batches(dataset, spec.calibration.samples, spec.calibration.seed,
                                      batch_size=spec.batch_size, device=device, log=ctx.log)
    held_out = held_out_batches(dataset, spec.eval_samples, batch_size=spec.batch_size, device=device)
    ctx.log(f"calibrating on {calibration.samples:,} training samples (seed {spec.calibration.seed}), measuring on "
            f"{held_out.samples:,} samples of the {held_out.what}")

    # --- FP32 ---------------------------------------------------------------------------------------------------
    stages.start("fp32", "measuring the FP32 model")
    fp32 = evaluate(model, held_out, ctx.check_stop)
    reference_logits = fp32["logits"]
    ladder.add("fp32", fp32)

    gm = trace(model, origin.model.name)
    folded: dict[str, dict] = {}
    if spec.fold_bn:
        stages.start("fold_bn", "folding BatchNorms")
        folded = fold_batchnorms(gm)
        ctx.log(f"folded {len(folded)} BatchNorm(s): " + (", ".join(f"{v['bn']} into {k}" for k, v in folded.items())
                                                          or "none follow a conv or linear layer"))
        ladder.add("fold_bn", evaluate(gm, held_out, ctx.check_stop))
    structure = find_structure(gm)
    modules = {name: layer.module for name, layer in structure.layers.items()}
    arrays: dict[str, tuple[np.ndarray, dict]] = {}  # name: (array, what it holds), as sent and as saved

    cle_report = None
    if spec.cle:
        stages.start("cle", "cross-layer equalisation")
        pairs = cle_pairs(gm, structure)
        touched = {p.first for p in pairs} | {p.second for p in pairs}
        before = {name: cle.output_ranges(modules[name]).cpu() for name in touched}
        scales = cle.equalize(modules, pairs, folded, check_stop=ctx.check_stop)
        absorbed = cle.absorb_biases(modules, pairs, folded)
        for name in sorted(touched, key=list(structure.layers).index):
            after = cle.output_ranges(modules[name]).cpu()
            both = torch.stack([before[name], after]).numpy().astype(np.float64)
            _emit_arrays(ctx, {f"{name}:weight:cle_ranges": (both, {"layer": name, "rows": ["before", "after"],
                                                                   "columns": ["min", "max"]})}, arrays)
        cle_report = {"pairs": [[p.first, p.second] for p in pairs], "absorbed": absorbed,
                      "scale_spread": {k: [float(v.min()), float(v.max())] for k, v in scales.items()}}
        ctx.log(f"equalised {len(pairs)} layer pair(s)" + (f", absorbed biases of {len(absorbed)}" if absorbed else "")
                + ("" if pairs else ": no conv/linear pairs joined only by ReLU or pooling"))
        ladder.add("cle", evaluate(gm, held_out, ctx.check_stop))

    if spec.bias_correction != "none":
        for module in modules.values():
            cle.ensure_bias(module)  # the correction needs a bias to go into
    sim = QuantSim(gm, structure, folded, weights=spec.weights, activations=spec.activations,
                   bits={item["name"]: item["bits"] for item in spec.mixed_precision.layers})
    sim.to(device)

    stages.start("weight_ranges", "setting weight ranges")
    sim.set_weight_ranges(ctx.check_stop)
    sim.all(activations=False)
    ladder.add("weight_ranges", evaluate(sim, held_out, ctx.check_stop))

    if spec.adaround.enabled:
        stages.start("adaround", "AdaRound")
        names = list(sim.weights)
        for k, name in enumerate(names):
            stages.within("adaround", k, len(names), f"AdaRound {name} ({k + 1}/{len(names)})")
            _adaround_layer(sim, name, calibration, spec.adaround.iterations, spec.calibration.seed + k,
                            ctx.check_stop)
        sim.all(activations=False)
        ladder.add("adaround", evaluate(sim, held_out, ctx.check_stop))

    corrections = None
    if spec.bias_correction == "empirical":
        stages.start("bias_correction", "empirical bias correction")
        corrections = bias.empirical(sim, calibration, ctx.check_stop,
                                     lambda d, t: stages.within("bias_correction", d, t, "empirical bias correction"))
        sim.all(activations=False)
        ladder.add("bias_correction", evaluate(sim, held_out, ctx.check_stop))
    elif spec.bias_correction == "analytical":
        stages.start("bias_correction", "analytical bias correction")
        corrections = bias.analytical(sim, calibration, ctx.check_stop)
        sim.all(activations=False)
        ladder.add("bias_correction", evaluate(sim, held_out, ctx.check_stop))

    stages.start("activation_ranges", "setting activation ranges")
    sim.calibrate(calibration, seed=spec.calibration.seed, check_stop=ctx.check_stop,
                  progress=lambda d, t: stages.within("activation_ranges", d, t, "calibrating activations"))
    sim.all()
    quantized = evaluate(sim, held_out, ctx.check_stop)
    ladder.add("activation_ranges", quantized)

    qat_report = None
    if spec.qat.epochs:
        stages.start("qat", f"quantization-aware training for {spec.qat.epochs} epoch(s)")
        train_spec = qat.training_spec(spec, origin.train, origin.model, origin.dataset)
        ctx.log(f"quantization-aware training: {train_spec.epochs} epoch(s) at lr {train_spec.lr:g}, "
                f"{train_spec.optimizer}, batch {train_spec.batch_size}, ranges fixed")
        summary = qat.run_qat(sim, train_spec, dataset, device, ctx)
        quantized = evaluate(sim, held_out, ctx.check_stop)
        ladder.add("qat", quantized)
        qat_report = {"epochs": summary["epochs_completed"], "lr": train_spec.lr,
                      "checkpoint": str(run.checkpoints_dir / "model.pt")}

    # --- analysis -----------------------------------------------------------------------------------------------
    stages.start("analysis", "per-layer analysis")
    layers = parallel_map(analysis.weight_entry, sim.weights.values(), device, ctx.check_stop)
    layers += parallel_map(lambda state: analysis.activation_entry(sim, state), sim.points.values(), device,
                           ctx.check_stop)
    subset = min(held_out.samples, calibration.samples)
    errors = {"calibration": analysis.layer_errors(sim, calibration, ctx.check_stop),
              "held_out": analysis.layer_errors(sim, held_out.head(subset), ctx.check_stop)}
    for entry in layers:
        if entry["tensor"] == "activation":
            entry["error"] = {where: errors[where][entry["name"]] for where in errors}
    stages.within("analysis", 0, 1, "histograms and every estimator's range")
    for entry, tensor_arrays in zip(layers, parallel_map(lambda e: analysis.tensor_arrays(sim, e), layers, device,
                                                         ctx.check_stop)):
        _emit_arrays(ctx, tensor_arrays, arrays)
        key = f"{entry['name']}:{entry['tensor']}"
        ctx.histogram(f"quant/{key}", arrays[f"{key}:counts"][0], arrays[f"{key}:edges"][0], layer=entry["name"],
                      tensor=entry["tensor"])
    sim.all()

    report: dict = {
        "fp32": {"accuracy": fp32["accuracy"], "loss": fp32["loss"]},
        "quantized": {"accuracy": quantized["accuracy"], "loss": quantized["loss"],
                      "logit_sqnr_db": _logit_sqnr(reference_logits, quantized["logits"])},
        "steps": ladder.steps,
        "layers": layers,
    }

    sensitivity_rows = None
    if spec.sensitivity or spec.mixed_precision.target_drop:
        stages.start("sensitivity", "sensitivity sweeps")
        sensitivity_rows = mixed.sensitivity(sim, held_out, check_stop=ctx.check_stop,
                                             progress=lambda d, t, text: stages.within("sensitivity", d, t, text))
        report["sensitivity"] = sensitivity_rows
        sim.all()
    if spec.mixed_precision.target_drop:
        stages.start("mixed_precision", "mixed-precision proposal")
        proposal = mixed.propose(sim, sensitivity_rows, fp32_accuracy=fp32["accuracy"],
                                 quantized_accuracy=quantized["accuracy"],
                                 target_drop=spec.mixed_precision.target_drop, batches=held_out,
                                 check_stop=ctx.check_stop,
                                 progress=lambda d, t, text: stages.within("mixed_precision", d, t, text))
        report["mixed_precision"] = proposal
        ctx.log(f"mixed precision: {len(proposal['layers'])} layer(s) kept wider, accuracy "
                f"{proposal['accuracy']:.2%}, {proposal['size_bytes']:,} bytes"
                + ("" if proposal["met"] else f" (the target drop of {spec.mixed_precision.target_drop:.2%} is not "
                   "reached even with every layer at 16 bits)"))
        sim.all()

    # --- artifacts ----------------------------------------------------------------------------------------------
    stages.start("save", "saving the quantized model")
    folder = run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    weights_path, params_path = artifacts.save_quantized(sim, folder, model_spec=origin.model.to_dict(),
                                                         checkpoint=str(origin.checkpoint))
    histograms_path = folder / artifacts.HISTOGRAMS_FILE
    artifacts.save_arrays(histograms_path, arrays)
    for name, path, kind in (("quantized weights", weights_path, "state_dict"),
                             ("quantization parameters", params_path, "quant_params"),
                             ("histograms", histograms_path, "arrays")):
        ctx.artifact(name, path, kind=kind)
    ctx.progress(len(stage_names), len(stage_names), "done", force=True)
    report.update({
        "source": origin.describe(),
        "device": str(device),
        "calibration": {"samples": calibration.samples, "seed": spec.calibration.seed},
        "held_out": {"samples": held_out.samples, "split": held_out.what, "layer_error_samples": subset},
        "cle": cle_report,
        "qat": qat_report,
        "bias_correction": corrections,
        "artifacts": {"weights": str(weights_path), "params": str(params_path), "histograms": str(histograms_path)},
        "elapsed_analysis_s": round(time.perf_counter() - started, 3),
    })
    return report


def _adaround_layer(sim: QuantSim, name: str, calibration, iterations: int, seed: int, check_stop) -> None:
    """AdaRound one layer: inputs from the network with the layers before it quantized, FP32 outputs as targets."""
    wq = sim.weights[name]
    layer = sim.structure.layers[name]
    done = list(sim.weights)[:list(sim.weights).index(name)]
    with sim.keeping():
        sim.set(weights=done)
        inputs = torch.cat(collect(sim, wq.module, calibration, inputs=True, check_stop=check_stop))
        sim.fp32()
        tail = tail_function(sim.gm, layer)
        targets = torch.cat([tail(t) for t in collect(sim, wq.module, calibration, inputs=False,
                                                      check_stop=check_stop)])
    bias_value = wq.b_q if wq.b_q is not None else wq.b_fp

    def forward(weight, x):
        params = {"weight": weight} if bias_value is None else {"weight": weight, "bias": bias_value}
        return tail(functional_call(wq.module, params, (x,)))

    wq.codes = adaround_mod.adaround(wq.w_fp, wq.qp, inputs, targets, forward, iterations=iterations, seed=seed,
                                     check_stop=check_stop)
    wq.rounding = "adaround"
    sim.refresh()


__all__ = ["plan", "run_quantization"]
