"""The quant.analyze job from spec to report: load the source model and data, run the paper's PTQ ladder (BN
folding, CLE with bias absorption, weight ranges, AdaRound, bias correction, activation ranges, QAT), a rung
per step, then the per-layer analysis, sensitivity, mixed precision and the artifacts. Worker side; never Qt.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import fx
from torch.func import functional_call

from workbench.errors import JobError, SpecError
from workbench.specs import QuantSpec
from workbench.worker.data import load_dataset
from workbench.worker.detection_source import detection_run
from workbench.worker.devices import resolve_device
from workbench.worker.models import build_model
from workbench.worker.models.build import resolve_num_classes
from workbench.worker.models.registry import LIGHTNING, model_trainer
from workbench.worker.objectives.base import json_safe
from workbench.worker.objectives.of_run import first_input, measured_task, objective_for
from workbench.worker.quant import adaround as adaround_mod
from workbench.worker.quant import analysis, artifacts, bias, cle, mixed, module_level, qat, relu6
from workbench.worker.quant.coverage import coverage as coverage_of
from workbench.worker.quant.coverage import warning as coverage_warning
from workbench.worker.quant.data import (
    Batches,
    calibration_batches,
    evaluate,
    held_out_batches,
    held_out_split,
)
from workbench.worker.quant.graph import (
    Structure,
    Untraceable,
    cle_chains,
    cle_pairs,
    cle_triplets,
    find_structure,
    fold_batchnorms,
    trace,
)
from workbench.worker.quant.measure import sqnr_db
from workbench.worker.quant.sim import QuantSim, parallel_map
from workbench.worker.quant.taps import collect, tail_function
from workbench.worker.source import Source, trained_source

SHARE_MONITORS = {"acc": "accuracy", "miou": "mIoU", "map": "mean AP", "f1": "F1"}  # measured from 0 to 1


def check_target_drop(target_drop: float, objective, metric: dict | None = None) -> None:
    """A drop of a share (accuracy, mIoU, mean AP) is a fraction: 1 meant as 1 % would allow a drop of 100
    points. Above half, it is refused with the unit it takes; another monitor's drop is in its own units (an
    MAE). `metric`: a LightningModule's own monitor block, which decides instead of the objective: a loss
    (lower is better) rises in its own units; a name holding acc, miou, map or f1 is a share."""
    monitor = "acc" if objective is None else objective.monitor
    if metric is not None:
        name = str(metric.get("name", "")).lower()
        shares = [key for key in SHARE_MONITORS if key in name]
        if not metric.get("higher_is_better") or not shares:
            return
        monitor = shares[0]
    if target_drop <= 0.5 or monitor not in SHARE_MONITORS:
        return
    raise SpecError(
        f"mixed_precision.target_drop: {target_drop:g} is a fraction of {SHARE_MONITORS[monitor]}: 0.01 "
        f"allows a drop of one percentage point, so {target_drop:g} would allow {target_drop * 100:g} "
        "points; for 1 %, set 0.01"
    )


def metric_block(objective, split: str = "test") -> dict | None:
    """What the ladder, the sweeps and the proposal measure, for a task other than classification: the run's
    monitor, labelled with the split it is measured on ("test mIoU"), and its direction. None for
    classification, whose numbers are accuracy as they have always been (the GUI and the report then say
    "accuracy")."""
    if objective is None or objective.task == "classification":
        return None
    return {
        "name": objective.monitor,
        "label": f"{split} {objective.monitor_label}",
        "split": split,
        "higher_is_better": bool(objective.higher_is_better),
    }


def metric_text(metric: dict | None, value: float) -> str:
    """ "accuracy 93.12%" for classification, "test MAE 0.1234" for another task's monitor."""
    if metric is None:
        return f"accuracy {value:.2%}"
    return f"{metric['label']} {value:.4f}"


class Ladder:
    """The accuracy ladder: one {step, accuracy, loss} per pipeline step, sent the moment the step finishes as
    a metric (quant/accuracy, quant/loss at the rung's index), the whole ladder so far as the array
    quant/ladder ((k, 2): accuracy, loss; its `steps` metadata names the rungs) and a log line. For a task
    other than classification "accuracy" holds the task's monitor value, and `metric` (metric_block) names
    it."""

    def __init__(self, ctx, planned: list[str], metric: dict | None = None):
        self.ctx = ctx
        self.planned = planned
        self.metric = metric
        self.steps: list[dict] = []
        # what the chart says under the rungs (e.g. which ops module-level left float)
        self.notes: list[str] = []

    def add(self, step: str, result: dict) -> None:
        index = len(self.steps)
        self.steps.append({"step": step, "accuracy": result["accuracy"], "loss": result["loss"]})
        self.ctx.metrics(index, {"quant/accuracy": result["accuracy"], "quant/loss": result["loss"]})
        self.ctx.flush()
        ladder = np.asarray([[s["accuracy"], s["loss"]] for s in self.steps], dtype=np.float64)
        extra = {} if self.metric is None else {"metric": self.metric}
        if self.notes:
            extra["notes"] = list(self.notes)
        self.ctx.array(
            "quant/ladder",
            ladder,
            steps=[s["step"] for s in self.steps],
            planned=self.planned,
            columns=["accuracy", "loss"],
            **extra,
        )
        self.ctx.log(
            f"step {index + 1}/{len(self.planned)} {step}: {metric_text(self.metric, result['accuracy'])}, "
            f"loss {result['loss']:.4f}"
        )


class Stages:
    """Progress over the job's stages, with a line of text for each, and the seconds each took ("setup":
    loading the source, the data and the model before the first)."""

    def __init__(self, ctx, names: list[str]):
        self.ctx = ctx
        self.names = names
        self.done = 0
        self.seconds: dict[str, float] = {}
        self._current, self._since = "setup", time.perf_counter()

    def _close(self) -> None:
        now = time.perf_counter()
        self.seconds[self._current] = self.seconds.get(self._current, 0.0) + now - self._since
        self._since = now

    def start(self, name: str, text: str) -> None:
        self._close()
        self._current = name
        self.ctx.check_stop()
        self.ctx.progress(self.names.index(name), len(self.names), text, force=True)

    def timings(self) -> dict[str, float]:
        """{stage: seconds} so far, the stage running now included, in the order they ran."""
        self._close()
        return {name: round(seconds, 3) for name, seconds in self.seconds.items()}

    def within(self, name: str, done: int, total: int, text: str = "") -> None:
        base = self.names.index(name)
        self.ctx.progress(base + done / max(total, 1), len(self.names), text)


def plan(spec: QuantSpec) -> list[str]:
    """The ladder's steps for `spec`, in the order they run: one rung each."""
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
    if spec.doctor.apply:
        steps.append("doctor")  # the fixes the doctor verified, applied (quant/doctor/run.py)
    return steps


def stage_names(spec: QuantSpec, steps: list[str]) -> list[str]:
    """The job's progress stages: the ladder's steps, the analysis, the sweeps `spec` asks for and the
    save."""
    sweeps = ["sensitivity"] if spec.sensitivity or spec.mixed_precision.target_drop else []
    if spec.mixed_precision.target_drop:
        sweeps.append("mixed_precision")
    doctor = ["doctor"] if spec.doctor.enabled else []  # after the sweeps, whose rows it reads
    return [s for s in steps if s != "doctor"] + ["analysis"] + sweeps + doctor + ["save"]


def _logit_sqnr(reference: torch.Tensor, logits: torch.Tensor) -> float | None:
    return sqnr_db(
        float(reference.double().pow(2).sum()), float((reference.double() - logits.double()).pow(2).sum())
    )


def _emit_arrays(ctx, arrays: dict, store: dict) -> None:
    for name, (array, meta) in arrays.items():
        store[name] = (array, meta)
        ctx.array(f"quant/{name}", array, **meta)


def run_quantization(spec: QuantSpec, ctx) -> dict:
    """The quant.analyze job as its route of steps; each step is a QuantJob method that sends its own rung,
    progress, arrays and log lines."""
    detection = detection_run(spec.source.run, ctx.workspace)
    if detection is not None:  # a list of images in, boxes out: measured by mAP, module by module
        from workbench.worker.quant.detection import run_detection_quantization

        if ctx.run is None:
            raise JobError("quantize needs a run folder for its report: run it with a workspace")
        train_dir, trained = detection
        return run_detection_quantization(spec, ctx, trained, train_dir)
    job = QuantJob.open(spec, ctx)
    job.load_source_and_data()
    job.choose_objective()
    job.prepare_model()
    job.use_own_monitor()
    job.draw_batches()

    # The ladder: one rung per step, in plan()'s order.
    job.measure_fp32()
    job.trace_graph()
    if spec.fold_bn:
        job.fold_batchnorms()
    job.find_layers()
    if spec.cle:
        job.equalize()
    job.build_sim()
    job.set_weight_ranges()
    if spec.adaround.enabled:
        job.adaround()
    if spec.bias_correction != "none":
        job.correct_biases()
    job.set_activation_ranges()
    if spec.qat.epochs:
        job.train_qat()

    # After the ladder, on the fully quantized model.
    job.analyze_layers()
    if spec.sensitivity or spec.mixed_precision.target_drop:  # the proposal ranks layers by their sensitivity
        job.sweep_sensitivity()
    if spec.mixed_precision.target_drop:
        job.propose_mixed_precision()
    if spec.doctor.enabled:
        job.diagnose()
    return job.save()


@dataclass
class QuantJob:
    """What the steps of one quant.analyze job share; each step fills in the fields that later steps read."""

    spec: QuantSpec
    ctx: Any
    run: Any  # a workbench.runs.Run: the report's and the artifacts' folder
    stages: Stages
    ladder: Ladder
    started: float
    # The source and its data: load_source_and_data, prepare_model, draw_batches.
    origin: Source | None = None
    device: torch.device | None = None
    dataset: Any = None
    model: torch.nn.Module | None = None
    objective: Any = None  # the run's task objective (workbench.worker.objectives); None: classification
    own: Any = None  # a LightningModule's own validation (lightning/validate.py): its monitor is each rung's
    calibration: Batches | None = None
    held_out: Batches | None = None
    # The ladder's graph and simulation: trace_graph to set_activation_ranges.
    fp32: dict = field(default_factory=dict)
    quantized: dict = field(default_factory=dict)
    gm: fx.GraphModule | None = None
    folded: dict[str, dict] = field(default_factory=dict)
    structure: Structure | None = None
    modules: dict[str, torch.nn.Module] = field(default_factory=dict)
    sim: QuantSim | None = None
    # What the report and the artifacts gather as the steps go.
    # name: (array, meta), as sent and saved
    arrays: dict[str, tuple[np.ndarray, dict]] = field(default_factory=dict)
    cle_report: dict | None = None
    corrections: Any = None
    qat_report: dict | None = None
    layers: list[dict] = field(default_factory=list)
    layer_error_samples: int = 0
    sensitivity_rows: list[dict] | None = None
    proposal: dict | None = None
    coverage: dict = field(default_factory=dict)  # how much of the model is quantized (quant/coverage.py)
    module_level: dict | None = None  # {"reason", "float_ops"} where torch.fx could not trace the model
    doctor: dict | None = None  # the doctor's findings, fixes tried and applied (quant/doctor/)
    # With the doctor on, the float graph just before CLE and each equalised layer's weight output ranges
    # then: CLE removes outlier channels before the doctor looks, and the doctor still names them.
    pre_cle: dict | None = None
    doctored_sim: QuantSim | None = None  # the doctor rung's simulation, saved in place of the ladder's

    @classmethod
    def open(cls, spec: QuantSpec, ctx) -> QuantJob:
        """Check there is a run folder, plan the ladder and the stages, and log the plan."""
        if ctx.run is None:
            raise JobError(
                "quantize needs a run folder for its report and artifacts: run it with a workspace"
            )
        started = time.perf_counter()
        steps = plan(spec)
        job = cls(spec, ctx, ctx.run, Stages(ctx, stage_names(spec, steps)), Ladder(ctx, steps), started)
        ctx.log("ladder plan: " + ", ".join(steps))
        return job

    # --- measuring ------------------------------------------------------------------------------------------

    def measure(self, model) -> dict:
        """Accuracy (or the task's monitor), loss and logits of `model` on the held-out batches: the one
        measure every ladder rung takes. A LightningModule's rungs are its own monitor, from its
        validation_step."""
        result = evaluate(model, self.held_out, self.ctx.check_stop, self.objective)
        if self.own is not None:
            result = self.own.measure(model, result, self.ctx.check_stop)
            self.ladder.metric = self.own.metric or self.ladder.metric  # known after the first validation
        return result

    def sweep_measure(self) -> tuple[Any, Any]:
        """(measure, objective) for mixed's sweeps: the module's own monitor (its Monitor says the direction),
        or (None, the run's objective) for the workbench's measure."""
        if self.own is None or not self.own.active:
            return None, self.objective
        return (lambda model: self.own.value(model, self.ctx.check_stop)), self.own.monitor

    def rung(self, step: str, model) -> dict:
        """Measure `model` and send the result as the ladder's rung for `step`."""
        result = self.measure(model)
        self.ladder.add(step, result)
        return result

    # --- source, data, model --------------------------------------------------------------------------------

    def load_source_and_data(self) -> None:
        """Resolve the source (model spec, checkpoint, dataset) and the device, and load the dataset."""
        spec = self.spec
        origin = trained_source(
            spec.source,
            spec.model,
            spec.dataset,
            self.ctx,
            job="quantize takes a training run (train.model)",
            nothing="nothing to quantize: set source.run=<run id> (a training run of this "
            "workspace), or model.name and model.checkpoint=<weights file>",
        )
        # The saved quantized model names the weights it was made from; model.* names them itself.
        origin.model = origin.with_weights()
        origin.pretrained = False
        if origin.dataset is None:  # model.* with only an input shape or spec: calibration still needs data
            origin.dataset = spec.dataset
        self.origin = origin
        self.device = resolve_device(spec.device)
        self.dataset = load_dataset(self.origin.dataset, ctx=self.ctx)
        self.dataset.normalization(progress=self.ctx.progress)

    def choose_objective(self) -> None:
        """The run's task (recorded in its spec) decides what every rung measures: accuracy for classification
        (and for a model with no run), else the task's monitor metric, e.g. mIoU or MAE."""
        trained = self.origin.train
        # A LightningModule's target_drop is in its own monitor's unit, known after its first validation
        # (measure_fp32 checks it then).
        own = trained is not None and model_trainer(trained.model.name) == LIGHTNING
        # A LightningModule's run keeps task=auto (its own loss decided); its data's first sample says the
        # task.
        if trained is None or measured_task(trained, self.dataset) == "classification":
            if not own:
                check_target_drop(self.spec.mixed_precision.target_drop, None)
            return
        self.objective = objective_for(trained, self.dataset)
        if not own:
            check_target_drop(self.spec.mixed_precision.target_drop, self.objective)
        self.ladder.metric = metric = metric_block(self.objective, held_out_split(self.dataset))
        direction = "higher" if metric["higher_is_better"] else "lower"
        self.ctx.log(
            f"task {trained.task}: measuring {metric['label']} ({direction} is better) at every step"
        )

    def prepare_model(self) -> None:
        """Build the source model in eval mode on the device."""
        spec, origin = self.spec, self.origin
        # Auto (0) classes become the dataset's count here, so the saved quantized model's spec is complete.
        origin.model = resolve_num_classes(origin.model, len(self.dataset.classes), self.ctx.log)
        task = self.objective.task if self.objective is not None else "classification"
        self.model = build_model(
            origin.model,
            input_shape=self.dataset.sample_shape,
            log=self.ctx.log,
            pretrained=False,
            task=task,
            example=first_input(self.dataset),
        )
        self.model.eval().to(self.device)
        self.ctx.log(
            f"quantizing {origin.model.name} from {origin.checkpoint} on {self.device}: weights "
            f"W{spec.weights.bits} {spec.weights.granularity} {spec.weights.range}, activations "
            f"A{spec.activations.bits} {spec.activations.range}"
        )

    def use_own_monitor(self) -> None:
        """A run that trained a LightningModule is measured by its own validation_step and monitor."""
        from workbench.worker.lightning.validate import own_validation

        self.own = own_validation(
            self.model,
            self.origin.train,
            self.origin.dataset,
            self.device,
            self.ctx.log,
            root=str(self.run.dir),
        )

    def draw_batches(self) -> None:
        """The calibration subset of the training split and the held-out batches every rung is measured on."""
        spec = self.spec
        self.calibration = calibration_batches(
            self.dataset,
            spec.calibration.samples,
            spec.calibration.seed,
            batch_size=spec.batch_size,
            device=self.device,
            log=self.ctx.log,
        )
        self.held_out = held_out_batches(
            self.dataset, spec.eval_samples, batch_size=spec.batch_size, device=self.device
        )
        self.ctx.log(
            f"calibrating on {self.calibration.samples:,} training samples (seed {spec.calibration.seed}), "
            f"measuring on {self.held_out.samples:,} samples of the {self.held_out.what}"
        )

    # --- the ladder -----------------------------------------------------------------------------------------

    def measure_fp32(self) -> None:
        """The first rung: the model as trained; its logits are the reference of the quantized model's
        SQNR."""
        self.stages.start("fp32", "measuring the FP32 model")
        self.fp32 = self.rung("fp32", self.model)
        if self.own is not None:  # a LightningModule's own monitor is known now: it gives target_drop's unit
            check_target_drop(
                self.spec.mixed_precision.target_drop,
                self.objective,
                self.own.metric if self.own.active else None,
            )

    def trace_graph(self) -> None:
        """Trace the model into the graph that every later step rewrites or simulates; a model torch.fx cannot
        trace is quantized module by module instead (quant/module_level.py)."""
        try:
            self.gm = trace(self.model, self.origin.model.name)
        except Untraceable as exc:
            self.gm = module_level.prepare(self.model)
            self.structure, ops = module_level.find_structure(self.gm, next(iter(self.calibration))[0])
            self.module_level = {"reason": str(exc), "float_ops": [{"op": op, "calls": n} for op, n in ops]}
            self.ladder.notes.append(
                f"module-level: functional ops stay float ({module_level.float_ops_text(ops)})"
            )
            self.ctx.log(
                f"{exc}. Quantizing module by module instead: the input and each conv and linear layer's "
                "weights and output are quantized, and every op between them stays float: "
                f"{module_level.float_ops_text(ops)} (calls in one forward pass). BatchNorms are not "
                "folded, and CLE and the int32 biases of integer kernels need the graph, so they are "
                "left out",
                "warning",
            )

    def fold_batchnorms(self) -> None:
        """Fold each BatchNorm into the conv or linear layer before it."""
        self.stages.start("fold_bn", "folding BatchNorms")
        if self.module_level is not None:
            self.ctx.log(
                "BatchNorms stay unfolded: folding needs the graph to see which layer each one follows"
            )
            self.rung("fold_bn", self.gm)
            return
        self.folded = fold_batchnorms(self.gm)
        self.ctx.log(
            f"folded {len(self.folded)} BatchNorm(s): "
            + (
                ", ".join(f"{v['bn']} into {k}" for k, v in self.folded.items())
                or "none follow a conv or linear layer"
            )
        )
        self.rung("fold_bn", self.gm)

    def find_layers(self) -> None:
        """The quantizable layers and activation points of the (folded) graph."""
        if self.module_level is None:  # module-level quantization found its layers as it fell back
            self.structure = find_structure(self.gm)
        self.modules = {name: layer.module for name, layer in self.structure.layers.items()}

    def equalize(self) -> None:
        """Cross-layer equalisation with bias absorption; each touched layer's ranges before and after go
        out."""
        self.stages.start("cle", "cross-layer equalisation")
        structure, modules = self.structure, self.modules
        if self.module_level is not None:
            self.cle_report = {
                "pairs": [],
                "absorbed": [],
                "chains": [],
                "triplets": [],
                "clipped": [],
                "scale_spread": {},
                "relu6_replaced": [],
                "float_change": None,
                "skipped": "module-level quantization: no graph to find pairs in",
            }
            self.ctx.log("CLE left out: finding layer pairs needs the graph, which torch.fx could not trace")
            self.rung("cle", self.gm)
            return
        replaced, float_change = self.relu6_to_relu() if self.spec.cle_relu6 == "relu" else ([], None)
        structure, modules = self.structure, self.modules  # found again where ReLU6s became ReLUs
        clipped: list = []
        pairs = cle_pairs(self.gm, structure, clipped)
        touched = {p.first for p in pairs} | {p.second for p in pairs}
        before = {name: cle.output_ranges(modules[name]).cpu() for name in touched}
        if self.spec.doctor.enabled and pairs:
            self.pre_cle = {
                "gm": copy.deepcopy(self.gm),
                "ranges": before,
                "pairs": [(p.first, p.second) for p in pairs],
            }
        scales = cle.equalize(modules, pairs, self.folded, check_stop=self.ctx.check_stop)
        absorbed = cle.absorb_biases(modules, pairs, self.folded)
        for name in sorted(touched, key=list(structure.layers).index):
            after = cle.output_ranges(modules[name]).cpu()
            both = torch.stack([before[name], after]).numpy().astype(np.float64)
            _emit_arrays(
                self.ctx,
                {
                    f"{name}:weight:cle_ranges": (
                        both,
                        {"layer": name, "rows": ["before", "after"], "columns": ["min", "max"]},
                    )
                },
                self.arrays,
            )
        chains = cle_chains(pairs)
        self.cle_report = {
            "pairs": [[p.first, p.second] for p in pairs],
            "absorbed": absorbed,
            "chains": chains,
            "triplets": cle_triplets(pairs, structure),
            "clipped": [{"first": a, "second": b, "op": op} for a, b, op in clipped],
            "scale_spread": {k: [float(v.min()), float(v.max())] for k, v in scales.items()},
            "relu6_replaced": replaced,
            "float_change": float_change,
        }
        longer = [c for c in chains if len(c) > 2]
        self.ctx.log(
            f"equalised {len(pairs)} layer pair(s)"
            + (
                f" in {len(longer)} chain(s) of three or more, e.g. {' -> '.join(longer[0])}"
                if longer
                else ""
            )
            + (f", absorbed biases of {len(absorbed)}" if absorbed else "")
            + ("" if pairs else ": no conv/linear pairs joined only by ReLU or pooling")
        )
        if clipped:
            a, b, op = clipped[0]
            self.ctx.log(
                f"CLE left {len(clipped)} pair(s) as they are because a clipping activation (ReLU6 or "
                f"Hardtanh) joins them, e.g. {a} -> {op} -> {b}: scaling what enters it would move its "
                "fixed bound and change the network",
                "warning",
            )
        self.rung("cle", self.gm)

    def relu6_to_relu(self) -> tuple[list[str], dict | None]:
        """Replace each ReLU6 between two layers by a ReLU (white paper 4.1) so CLE can rescale across it, and
        measure what that changes in the float model: its monitor and logit SQNR against the model as
        loaded."""
        replaced = relu6.relu6_to_relu(self.gm, self.structure)
        if not replaced:
            return [], None
        self.find_layers()  # the activation points after a ReLU are now unsigned
        result = self.measure(self.gm)
        before, after = self.fp32.get("accuracy"), result.get("accuracy")  # accuracy, or the task's monitor
        logits = "logits" in result and "logits" in self.fp32
        sqnr = _logit_sqnr(self.fp32["logits"], result["logits"]) if logits else None
        change = {
            "measure": (self.ladder.metric or {"label": "accuracy"})["label"],
            "before": before,
            "after": after,
            "logit_sqnr_db": sqnr,
        }
        what = (
            f"float {metric_text(self.ladder.metric, before)} -> "
            + (f"{after:.2%}" if self.ladder.metric is None else f"{after:.4f}")
            if isinstance(before, float) and isinstance(after, float)
            else "no float measure to compare"
        )
        self.ctx.log(
            f"CLE: replaced {len(replaced)} ReLU6 by ReLU (white paper 4.1); {what}"
            + (
                f", logit SQNR {sqnr:.1f} dB against the float model"
                if sqnr is not None
                else ", logits unchanged"
                if logits
                else ""
            )
            + "; set cle_relu6 to keep to leave them"
        )
        return replaced, json_safe(change)

    def build_sim(self) -> None:
        """Wrap the graph in the quantization simulation, with any per-layer bit widths the spec applies."""
        spec = self.spec
        if spec.bias_correction != "none":
            for module in self.modules.values():
                cle.ensure_bias(module)  # the correction needs a bias to go into
        self.sim = QuantSim(
            self.gm,
            self.structure,
            self.folded,
            weights=spec.weights,
            activations=spec.activations,
            bits={item["name"]: item["bits"] for item in spec.mixed_precision.layers},
        )
        self.sim.to(self.device)
        example = next(iter(self.calibration))[0]  # one sample of it counts the FLOPs
        self.coverage = coverage_of(
            self.model, {layer.path for layer in self.structure.layers.values()}, self.folded, example=example
        )
        said = coverage_warning(self.coverage)
        flops = self.coverage.get("flops")
        self.ctx.log(
            said
            or f"{self.coverage['parameters']:.1%} of the model's parameters"
            + (f" and {flops:.1%} of its FLOPs" if flops is not None else "")
            + " are quantized",
            "warning" if said else "info",
        )

    def set_weight_ranges(self) -> None:
        """Set each weight quantizer's range; the rung quantizes weights only."""
        self.stages.start("weight_ranges", "setting weight ranges")
        self.sim.set_weight_ranges(self.ctx.check_stop)
        self.sim.all(activations=False)
        self.rung("weight_ranges", self.sim)

    def adaround(self) -> None:
        """AdaRound each layer's weights in turn, in graph order."""
        spec, sim = self.spec, self.sim
        self.stages.start("adaround", "AdaRound")
        names = list(sim.weights)
        for k, name in enumerate(names):
            self.stages.within("adaround", k, len(names), f"AdaRound {name} ({k + 1}/{len(names)})")
            _adaround_layer(
                sim,
                name,
                self.calibration,
                spec.adaround.iterations,
                spec.calibration.seed + k,
                self.ctx.check_stop,
            )
        sim.all(activations=False)
        self.rung("adaround", sim)

    def correct_biases(self) -> None:
        """Empirical or analytical bias correction, as the spec asks."""
        if self.spec.bias_correction == "empirical":
            self.stages.start("bias_correction", "empirical bias correction")
            self.corrections = bias.empirical(
                self.sim,
                self.calibration,
                self.ctx.check_stop,
                lambda d, t: self.stages.within("bias_correction", d, t, "empirical bias correction"),
            )
        else:
            self.stages.start("bias_correction", "analytical bias correction")
            self.corrections = bias.analytical(self.sim, self.calibration, self.ctx.check_stop)
        self.sim.all(activations=False)
        self.rung("bias_correction", self.sim)

    def set_activation_ranges(self) -> None:
        """Calibrate the activation ranges; this rung is the first with the whole model quantized."""
        self.stages.start("activation_ranges", "setting activation ranges")
        self.sim.calibrate(
            self.calibration,
            seed=self.spec.calibration.seed,
            check_stop=self.ctx.check_stop,
            progress=lambda d, t: self.stages.within("activation_ranges", d, t, "calibrating activations"),
        )
        self.sim.all()
        for name in self.sim.saturated_biases():
            self.ctx.log(
                f"{name}: its bias does not fit int32 on the grid of its input's scale times its weights' "
                "scale, so int8 kernels (and this simulation) saturate it; the activations before it span "
                "almost nothing: check the model's weights",
                "warning",
            )
        self.quantized = self.rung("activation_ranges", self.sim)

    def train_qat(self) -> None:
        """Quantization-aware training from the PTQ result, with the ranges fixed."""
        spec, origin = self.spec, self.origin
        self.stages.start("qat", f"quantization-aware training for {spec.qat.epochs} epoch(s)")
        train_spec = qat.training_spec(spec, origin.train, origin.model, origin.dataset)
        self.ctx.log(
            f"quantization-aware training: {train_spec.epochs} epoch(s) at lr {train_spec.lr:g}, "
            f"{train_spec.optimizer}, batch {train_spec.batch_size}, ranges fixed"
        )
        summary = qat.run_qat(self.sim, train_spec, self.dataset, self.device, self.ctx)
        self.quantized = self.rung("qat", self.sim)
        self.qat_report = {
            "epochs": summary["epochs_completed"],
            "lr": train_spec.lr,
            "checkpoint": str(self.run.checkpoints_dir / "model.pt"),
        }

    # --- after the ladder -----------------------------------------------------------------------------------

    def analyze_layers(self) -> None:
        """Per-quantizer statistics and layer errors, then every tensor's histogram and estimator ranges."""
        sim, device, check_stop = self.sim, self.device, self.ctx.check_stop
        self.stages.start("analysis", "per-layer analysis")
        layers = parallel_map(analysis.weight_entry, sim.weights.values(), device, check_stop)
        layers += parallel_map(
            lambda state: analysis.activation_entry(sim, state), sim.points.values(), device, check_stop
        )
        self.layer_error_samples = subset = min(self.held_out.samples, self.calibration.samples)
        errors = {
            "calibration": analysis.layer_errors(sim, self.calibration, check_stop),
            "held_out": analysis.layer_errors(sim, self.held_out.head(subset), check_stop),
        }
        for entry in layers:
            if entry["tensor"] == "activation":
                entry["error"] = {where: errors[where][entry["name"]] for where in errors}
        self.stages.within("analysis", 0, 1, "histograms and every estimator's range")
        for entry, tensor_arrays in zip(
            layers, parallel_map(lambda e: analysis.tensor_arrays(sim, e), layers, device, check_stop)
        ):
            _emit_arrays(self.ctx, tensor_arrays, self.arrays)
            key = f"{entry['name']}:{entry['tensor']}"
            self.ctx.histogram(
                f"quant/{key}",
                self.arrays[f"{key}:counts"][0],
                self.arrays[f"{key}:edges"][0],
                layer=entry["name"],
                tensor=entry["tensor"],
            )
        sim.all()
        self.layers = layers

    # mixed.sensitivity and mixed.propose measure with data.evaluate on the same held-out batches as
    # measure().

    def sweep_sensitivity(self) -> None:
        """Each layer's accuracy with only it quantized, and with all but it quantized."""
        self.stages.start("sensitivity", "sensitivity sweeps")
        measure, objective = self.sweep_measure()
        self.sensitivity_rows = mixed.sensitivity(
            self.sim,
            self.held_out,
            objective=objective,
            check_stop=self.ctx.check_stop,
            progress=lambda d, t, text: self.stages.within("sensitivity", d, t, text),
            measure=measure,
        )
        self.sim.all()

    def propose_mixed_precision(self) -> None:
        """The fewest layers to keep wider for the accuracy drop the spec allows (for a lower-is-better
        monitor, the rise it allows)."""
        target_drop = self.spec.mixed_precision.target_drop
        self.stages.start("mixed_precision", "mixed-precision proposal")
        measure, objective = self.sweep_measure()
        proposal = mixed.propose(
            self.sim,
            self.sensitivity_rows,
            fp32_accuracy=self.fp32["accuracy"],
            quantized_accuracy=self.quantized["accuracy"],
            target_drop=target_drop,
            batches=self.held_out,
            objective=objective,
            check_stop=self.ctx.check_stop,
            measure=measure,
            progress=lambda d, t, text: self.stages.within("mixed_precision", d, t, text),
        )
        self.proposal = proposal
        metric = self.ladder.metric
        allowed = (
            f"drop of {target_drop:.2%}"
            if metric is None
            else f"{'drop' if metric['higher_is_better'] else 'rise'} of {target_drop:g}"
        )
        self.ctx.log(
            f"mixed precision: {len(proposal['layers'])} layer(s) kept wider, "
            f"{metric_text(metric, proposal['accuracy'])}, {proposal['size_bytes']:,} bytes"
            + (
                ""
                if proposal["met"]
                else f" (the target {allowed} is not reached even with every layer at 16 bits)"
            )
        )
        self.sim.all()

    def diagnose(self) -> None:
        """The doctor: why each layer hurts, the fixes tried with their measured gain, the verified ones
        applied."""
        from workbench.worker.quant.doctor.run import run_doctor

        self.stages.start("doctor", "diagnosing each layer and trying fixes")
        with self.sim.keeping():
            self.doctor = run_doctor(self)

    def save(self) -> dict:
        """Save the quantized model, its parameters and every array sent; return the job's report."""
        self.stages.start("save", "saving the quantized model")
        folder = self.run.artifacts_dir
        folder.mkdir(parents=True, exist_ok=True)
        weights_path, params_path = artifacts.save_quantized(
            self.doctored_sim or self.sim,
            folder,
            model_spec=self.origin.model.to_dict(),
            checkpoint=str(self.origin.checkpoint),
        )
        histograms_path = folder / artifacts.HISTOGRAMS_FILE
        artifacts.save_arrays(histograms_path, self.arrays)
        for name, path, kind in (
            ("quantized weights", weights_path, "state_dict"),
            ("quantization parameters", params_path, "quant_params"),
            ("histograms", histograms_path, "arrays"),
        ):
            self.ctx.artifact(name, path, kind=kind)
        total = len(self.stages.names)
        self.ctx.progress(total, total, "done", force=True)
        return self.report(
            {"weights": str(weights_path), "params": str(params_path), "histograms": str(histograms_path)}
        )

    def report(self, saved: dict) -> dict:
        """The job's result, its keys in the order the report lists them."""
        fp32, quantized = self.fp32, self.quantized
        report: dict = {
            "fp32": {"accuracy": fp32["accuracy"], "loss": fp32["loss"]},
            "quantized": {
                "accuracy": quantized["accuracy"],
                "loss": quantized["loss"],
                "logit_sqnr_db": _logit_sqnr(fp32["logits"], quantized["logits"]),
            },
            "steps": self.ladder.steps,
            "layers": self.layers,
        }
        report["coverage"] = self.coverage
        if self.module_level is not None:
            report["module_level"] = self.module_level
        if self.sensitivity_rows is not None:
            report["sensitivity"] = self.sensitivity_rows
        if self.proposal is not None:
            report["mixed_precision"] = self.proposal
        if self.doctor is not None:
            report["doctor"] = self.doctor
        if self.ladder.metric is not None:
            # Every "accuracy" above holds this metric's value; each end's other metrics ride along.
            report["metric"] = self.ladder.metric
            report["fp32"]["metrics"] = json_safe(fp32["metrics"])
            report["quantized"]["metrics"] = json_safe(quantized["metrics"])
        report.update(
            {
                "source": self.origin.describe(label=False),
                "device": str(self.device),
                "calibration": {"samples": self.calibration.samples, "seed": self.spec.calibration.seed},
                "held_out": {
                    "samples": self.held_out.samples,
                    "split": self.held_out.what,
                    "layer_error_samples": self.layer_error_samples,
                },
                "cle": self.cle_report,
                "qat": self.qat_report,
                "bias_correction": self.corrections,
                "artifacts": saved,
                "elapsed_analysis_s": round(time.perf_counter() - self.started, 3),
                # where the time went (benchmarks/quant_speed.py prints the shares)
                "stage_s": self.stages.timings(),
            }
        )
        return report


def _adaround_layer(sim: QuantSim, name: str, calibration, iterations: int, seed: int, check_stop) -> None:
    """AdaRound one layer: inputs from the network with the layers before it quantized, FP32 outputs as
    targets."""
    wq = sim.weights[name]
    layer = sim.structure.layers[name]
    done = list(sim.weights)[: list(sim.weights).index(name)]
    with sim.keeping():
        sim.set(weights=done)
        inputs = torch.cat(collect(sim, wq.module, calibration, inputs=True, check_stop=check_stop))
        sim.fp32()
        tail = tail_function(sim.gm, layer)
        targets = torch.cat(
            [tail(t) for t in collect(sim, wq.module, calibration, inputs=False, check_stop=check_stop)]
        )
    bias_value = wq.b_q if wq.b_q is not None else wq.b_fp

    def forward(weight, x):
        params = {"weight": weight} if bias_value is None else {"weight": weight, "bias": bias_value}
        with module_level.layer_alone():
            return tail(functional_call(wq.module, params, (x,)))

    wq.codes = adaround_mod.adaround(
        wq.w_fp, wq.qp, inputs, targets, forward, iterations=iterations, seed=seed, check_stop=check_stop
    )
    wq.rounding = "adaround"
    sim.refresh()


__all__ = ["plan", "run_quantization"]
