"""The specs of the jobs that take a model: quantize (with its scheme and pipeline parts), export, bench,
graph, data info and predict, their shared `source` part, and `spec_for` (a CLI verb to its spec). No torch,
no Qt.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

from workbench.errors import SpecError

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - Python 3.10 has no tomllib
    pass

from workbench.specs.schema import Spec, _coerce, option
from workbench.specs.training import (
    BENCH_BACKENDS,
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_LR,
    MAX_PROCESSES,
    MAX_SAMPLES,
    MAX_SEED,
    MAX_STEPS,
    DataSpec,
    LrFindSpec,
    ModelSpec,
    TrainSpec,
    _device,
)

# fmt: off

@dataclass
class SourceSpec(Spec):
    """Where a job's model comes from: a run of the workspace, or an exported model file (one spec part,
    shared by quantize, graph, export and bench)."""

    run: str = option("", (
        "A run (its id, a unique id prefix or its folder): a training run gives its model spec, its best "
        "(else last) checkpoint and its dataset; a quantize run also its scales. Empty: no run."
    ))
    file: str = option("", (
        "An exported model file (.onnx, .pt2 or TorchScript .pt) to read instead of a run. Empty: no file."
    ))

    def validate(self) -> None:
        self.run, self.file = self.run.strip(), self.file.strip()
        if self.run and self.file:
            raise SpecError(
                f"run: {self.run!r} and file {self.file!r} are both given; name the model one way, not both"
            )


WEIGHT_RANGES = ("minmax", "mse", "percentile")
ACTIVATION_RANGES = ("minmax", "mse", "percentile", "cross_entropy", "bn")
MIXED_BITS = (8, 16)


@dataclass
class WeightQuantSpec(Spec):
    """How weights are quantized: bit width, one scale per tensor or per output channel, grid and range."""

    bits: int = option(8, "Bit width of the weights, 2 to 16.", min=2, max=16)
    granularity: Literal["per_tensor", "per_channel"] = option("per_channel", (
        "One scale for the whole tensor (per_tensor) or one per output channel (per_channel)."
    ))
    symmetric: bool = option(True, (
        "Symmetric signed grid with zero point 0; false: an asymmetric unsigned grid 0..2^bits-1 with a "
        "fitted zero point."
    ))
    restricted: bool = option(True, (
        "For symmetric weights: the restricted grid +-(2^(bits-1)-1) that ONNX and TensorRT use; false adds "
        "-2^(bits-1)."
    ))
    range: str = option("mse", (
        "How the clipping range is chosen: minmax (no clipping), mse (the range with the least squared "
        "error, by grid search) or percentile."
    ), choices=WEIGHT_RANGES)
    percentile: float = option(99.99, (
        "For range=percentile: the percentile of the values that bounds the range."
    ), min=50, min_exclusive=True, max=100)


@dataclass
class ActivationQuantSpec(Spec):
    """How activations (the input and each layer's output) are quantized: bit width, grid and range."""

    bits: int = option(8, "Bit width of the activations, 2 to 16.", min=2, max=16)
    symmetric: bool = option(False, (
        "Symmetric grid with zero point 0 (unsigned for a tensor with no negative values, as after a ReLU); "
        "false: asymmetric with a fitted zero point."
    ))
    range: str = option("mse", (
        "How clipping ranges are set on the calibration data: minmax, mse, percentile, cross_entropy (mse, "
        "and for the logits the range that best keeps their softmax, paper section 3.4) or bn (from the "
        "BatchNorm before each activation, section 3.5; mse where there is none)."
    ), choices=ACTIVATION_RANGES)
    percentile: float = option(99.99, (
        "For range=percentile: the percentile of the values that bounds the range."
    ), min=50, min_exclusive=True, max=100)


@dataclass
class AdaRoundSpec(Spec):
    """AdaRound (Nagel et al. 2020): learn, layer by layer on the calibration set, whether each weight rounds
    up or down."""

    enabled: bool = option(False, (
        "Learn the rounding of each weight instead of rounding to nearest: Adam at learning rate 1e-2 on "
        "batches of 32 calibration samples (the paper and AIMET use 1e-3 over 10,000 steps; our budgets are "
        "hundreds to a thousand steps a layer, so each step moves further), on the weights' own grid: with "
        "weights.restricted (the default) [-127, 127] at 8 bits and [-7, 7] at 4, symmetric as ONNX and "
        "TensorRT int8 kernels take it, where AIMET uses [-8, 7]."
    ))
    iterations: int = option(1000, "Optimisation steps per layer.", min=1, max=MAX_STEPS)


@dataclass
class CalibrationSpec(Spec):
    """The calibration subset: training samples that ranges, AdaRound and bias correction are fitted on."""

    samples: int = option(256, "Training samples to calibrate on (the Data tab's calibration count).", min=1,
                          max=MAX_SAMPLES)
    seed: int = option(0, "Seed that picks the calibration samples (the Data tab's calibration seed).", min=0,
                       max=MAX_SEED)


@dataclass
class QatSpec(Spec):
    """Quantization-aware training after the post-training steps."""

    epochs: int = option(0, (
        "Epochs of fine-tuning with fake quantization (straight-through gradients); 0 skips it."
    ), min=0, max=MAX_EPOCHS)
    lr: float = option(1e-4, "Learning rate of the fine-tuning.", min=0, min_exclusive=True, max=MAX_LR)


@dataclass
class MixedPrecisionSpec(Spec):
    """Mixed precision: ask for a proposal of layers to keep at a higher bit width, or apply one."""

    target_drop: float = option(0.0, (
        "Accuracy drop from FP32 that a proposal may leave, as a fraction (0.01 is one percentage point); "
        "for another task it is the drop of its monitor (mIoU, mean AP), or the rise of one where lower is "
        "better (MAE), in the monitor's own units; 0 asks for no proposal."
    ), min=0, max=1)
    layers: list[dict] = option([], (
        "Layers kept at a higher bit width (a proposal, applied): tables {name=..., bits=8 or 16}; the "
        "layer's weights and its output activation use those bits."
    ))

    def validate(self) -> None:
        seen = set()
        for i, item in enumerate(self.layers):
            extra = sorted(set(item) - {"name", "bits"})
            if extra:
                raise SpecError(
                    f"layers[{i}].{extra[0]}: unknown field; a layer is a table {{name=..., bits=...}}"
                )
            name = item.get("name")
            if not isinstance(name, str) or not name.strip():
                raise SpecError(
                    f"layers[{i}].name: {name!r} is not a layer name; use the name the report lists"
                )
            if name in seen:
                raise SpecError(f"layers[{i}].name: {name!r} is listed twice")
            seen.add(name)
            bits = _coerce(item.get("bits"), int, f"layers[{i}].bits", {})
            if bits not in MIXED_BITS:
                raise SpecError(f"layers[{i}].bits: {bits!r} is not allowed; choose one of: 8, 16")
            item["bits"] = bits


DOCTOR_FIXES = ("cle", "cle_fanout", "per_channel", "smoothquant", "concat_rescale", "concat_requant",
                "mse_range",
                "percentile_range", "minmax_range", "bias_correction", "bits_16", "relu6_to_relu",
                "keep_float")


@dataclass
class DoctorSpec(Spec):
    """The quantization doctor: after the ladder, find why each layer hurts, try fixes and measure what each
    gains."""

    enabled: bool = option(False, (
        "Diagnose each layer after the ladder: the cause of its error, the fixes for it, each tried by "
        "re-quantizing and measured (logit SQNR and the monitor)."
    ))
    apply: bool = option(False, (
        "Apply the fixes that measurably helped and add a doctor rung to the ladder (needs enabled)."
    ))
    fixes: list[str] = option([], (
        "Only these fixes, each <layer>:<fix> as a finding names them (e.g. conv1:cle); empty: every "
        "finding's best fix. Only a fix whose measured gain is positive is applied."
    ))
    max_findings: int = option(12, "Fixes are tried for at most this many findings, the worst first.", min=1,
                               max=256)

    def validate(self) -> None:
        for i, item in enumerate(self.fixes):
            layer, sep, fix = str(item).rpartition(":")
            if not sep or not layer.strip():
                raise SpecError(f"fixes[{i}]: {item!r} is not <layer>:<fix>, e.g. conv1:cle")
            if fix not in DOCTOR_FIXES:
                raise SpecError(f"fixes[{i}]: {fix!r} is not a fix; choose one of: {', '.join(DOCTOR_FIXES)}")
        if self.apply and not self.enabled:
            self.enabled = True  # applying needs the diagnosis; asking for one asks for the other


@dataclass
class QuantSpec(Spec):
    """Post-training quantization (Nagel et al., arXiv 2106.08295): BN folding, cross-layer equalisation,
    weight ranges, AdaRound, bias correction and activation ranges, then per-layer analysis."""

    source: SourceSpec = option(SourceSpec(), (
        "The model to quantize: source.run takes a training run's model, its best (else last) checkpoint and "
        "its dataset."
    ))
    model: ModelSpec = option(ModelSpec(), (
        "The model to quantize when there is no source.run; model.checkpoint names its trained weights."
    ))
    dataset: DataSpec = option(DataSpec(), (
        "Calibration and evaluation data; with source.run, fields left at their defaults take the run's "
        "values."
    ))
    weights: WeightQuantSpec = option(WeightQuantSpec(), "How weights are quantized.")
    activations: ActivationQuantSpec = option(ActivationQuantSpec(), "How activations are quantized.")
    fold_bn: bool = option(True, "Fold each BatchNorm into the convolution or linear layer before it.")
    cle: bool = option(False, (
        "Cross-layer equalisation with bias absorption: rescale layers joined by ReLUs so their per-channel "
        "weight ranges match (the FP32 function is kept)."
    ))
    cle_relu6: Literal["relu", "keep"] = option("relu", (
        "With cle: relu replaces each ReLU6 (or Hardtanh(0, 6)) between two layers by a ReLU so CLE can "
        "rescale across it (the white paper's section 4.1; the float change is measured and reported); keep "
        "leaves those pairs unequalised."
    ))
    bias_correction: Literal["none", "empirical", "analytical"] = option("none", (
        "Correct the shift quantized weights cause in each layer's mean output: empirical (measured on the "
        "calibration set) or analytical (from BatchNorm statistics, measured where there are none)."
    ))
    adaround: AdaRoundSpec = option(AdaRoundSpec(), "Learned rounding of the weights.")
    calibration: CalibrationSpec = option(CalibrationSpec(), "The calibration subset.")
    qat: QatSpec = option(QatSpec(), "Quantization-aware training after the post-training steps.")
    sensitivity: bool = option(False, (
        "Measure each layer's accuracy with only it quantized and with all but it quantized."
    ))
    mixed_precision: MixedPrecisionSpec = option(MixedPrecisionSpec(), (
        "Mixed-precision proposal (target_drop) or per-layer bit widths to apply (layers)."
    ))
    doctor: DoctorSpec = option(DoctorSpec(), (
        "The quantization doctor: per layer, why it hurts, the fixes tried and their measured gain."
    ))
    eval_samples: int = option(0, (
        "Held-out (test split) samples that accuracy is measured on; 0 uses the whole test split."
    ), min=0, max=MAX_SAMPLES)
    batch_size: int = option(128, "Samples per forward pass when calibrating and evaluating.", min=1,
                             max=MAX_BATCH)
    device: str = _device("auto", "Where to calibrate and evaluate: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.file:
            raise SpecError(f"source.file: {self.source.file!r}: quantize works on a PyTorch model; give "
                            "source.run, or model with model.checkpoint")
        if self.source.run and self.model.checkpoint:
            raise SpecError(f"model.checkpoint: {self.model.checkpoint!r} and source.run {self.source.run!r} "
                            "are both given; the run gives the weights (its best, else last checkpoint), so "
                            "set only one")
        if self.source.run and self.model != ModelSpec():
            raise SpecError(f"model: source.run {self.source.run!r} gives the model spec, so leave model "
                            "unset, or drop source.run and set model with model.checkpoint")


@dataclass
class ExportSpec(Spec):
    """Export a model to one deployment format and check its outputs against eager PyTorch (parity)."""

    source: SourceSpec = option(SourceSpec(), (
        "The model to export: source.run takes a training run's model and its best (else last) checkpoint "
        "(for onnx_qdq, a quantize run: its scales and zero points). Empty: model.* describes it."
    ))
    model: ModelSpec = option(ModelSpec(), (
        "The model to export when there is no source.run (model.checkpoint names its weights, "
        "model.input_shape its input)."
    ))
    dataset: DataSpec = option(DataSpec(), (
        "Real samples for the parity check (and accuracy for onnx_qdq); with source.run, fields left at "
        "their defaults take the run's values."
    ))
    format: Literal["torchscript", "exported_program", "onnx", "onnx_qdq", "tensorrt"] = option("onnx", (
        "What to write: torchscript (.pt), exported_program (torch.export, .pt2), onnx, onnx_qdq "
        "(QuantizeLinear/DequantizeLinear from a quantize run) or tensorrt (torch_tensorrt)."
    ))
    script: bool = option(False, (
        "For torchscript: torch.jit.script instead of tracing (keeps data-dependent control flow)."
    ))
    opset: int = option(18, "ONNX opset version (onnx, onnx_qdq).", min=7, max=25)
    precision: Literal["fp32", "fp16", "int8"] = option("fp32", "For tensorrt: the engine's precision.")
    output: str = option("", "Where to write the exported file; empty writes it into the run's artifacts.")
    dynamic_batch: bool = option(True, "Let the exported model take any batch size.")
    dynamic_axes: list[str] = option([], (
        "Which input dimensions the exported model lets vary: batch (the first) and, for token sequences, "
        "sequence (the second dimension of every integer input). Empty: batch where dynamic_batch is true."
    ), choices=["batch", "sequence"], max_items=2)
    verify: bool = option(True, (
        "Check the export against eager PyTorch on random inputs and, where there is a dataset, real "
        "samples; when it fails, find the first layer whose output diverges."
    ))
    parity_samples: int = option(32, "Real samples (and random inputs) the parity check runs.", min=1,
                                 max=MAX_SAMPLES)
    device: str = _device("cpu", "Where to trace, export and check: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.run and self.model.checkpoint:
            raise SpecError(f"model.checkpoint: {self.model.checkpoint!r} and source.run {self.source.run!r} "
                            "are both given; the run gives the weights, so set only one")
        if self.format == "onnx_qdq" and not self.source.run:
            raise SpecError(
                "source.run: onnx_qdq takes its scales and zero points from a quantize run; name one"
            )


@dataclass
class BenchSpec(Spec):
    """Measure latency percentiles, throughput and peak memory of a model on one or more backends."""

    source: SourceSpec = option(SourceSpec(), (
        "The model to measure: source.run takes a training run's model and checkpoint (a quantize run also "
        "gives the QDQ model for onnxruntime_int8); source.file an exported file. Empty: model.* describes "
        "it."
    ))
    model: ModelSpec = option(ModelSpec(), (
        "The model to measure when there is no source (model.input_shape gives its input)."
    ))
    artifact: str = option("", (
        "An exported file to measure (.onnx, .pt2 or TorchScript .pt) beside or instead of the PyTorch model."
    ))
    backends: list[str] = option(["eager"], (
        "Backends to measure: eager, compile, torchscript, exported_program, onnxruntime, onnxruntime_int8 "
        "(QDQ) and/or tensorrt. One that cannot run here is reported as unavailable, with the reason."
    ), choices=BENCH_BACKENDS, min_items=1)
    batch_sizes: list[int] = option([1], "Batch sizes to measure, e.g. 1,8,64.", min=1, max=MAX_BATCH,
                                    min_items=1)
    dtype: Literal["float32", "float16", "bfloat16"] = option("float32", (
        "Input and weight dtype (float16 and bfloat16 change the numerics)."
    ))
    warmup: int = option(10, "Untimed iterations before measuring.", min=0, max=MAX_STEPS)
    iters: int = option(100, "Timed iterations per backend and batch size (at least; see min_time_s).", min=1,
                        max=MAX_STEPS)
    min_time_s: float = option(0.0, (
        "Keep timing until this many seconds have passed as well; 0 times exactly iters."
    ), min=0, max=86_400)
    threads: int = option(0, "CPU threads for inference (torch and onnxruntime); 0 keeps their defaults.",
                          min=0, max=MAX_PROCESSES)
    dataset: DataSpec = option(DataSpec(), (
        "Data whose sample shape the inputs take when model.input_shape is empty."
    ))
    device: str = _device("cpu", "Where to run: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        if self.source.file and self.artifact:
            raise SpecError(
                f"artifact: {self.artifact!r} and source.file {self.source.file!r} are both given; name the "
                "file once"
            )


@dataclass
class GraphSpec(Spec):
    """Show a model's graph in Model Explorer."""

    source: SourceSpec = option(SourceSpec(), (
        "Where the model comes from: source.run takes a training run's model and its best (else last) "
        "checkpoint; source.file reads a saved ExportedProgram (.pt2) or an ONNX file. Empty: model.* "
        "describes it."
    ))
    model: ModelSpec = option(ModelSpec(), (
        "The model whose graph to show when there is no source; with source.run, a non-empty "
        "model.input_shape overrides the run's."
    ))
    dataset: DataSpec = option(DataSpec(), (
        "Data whose sample shape the graph is traced at when model.input_shape is empty and there is no "
        "source.run."
    ))
    const_element_count_limit: int = option(16, (
        "Constants with more elements than this are shown without their values."
    ), min=0)
    port: int = option(0, (
        "On the command line: serve the built graph in Model Explorer on this port of 127.0.0.1 until "
        "Ctrl+C; 0 serves only with open_browser, on a free port."
    ), min=0, max=65535)
    open_browser: bool = option(False, (
        "On the command line: serve the built graph (see port) and open it in the system web browser."
    ))
    quant_run: str = option("", (
        "A quantize run (its id or folder) whose per-layer SQNR to paint on the graph; source.run defaults "
        "to that run's training run."
    ))

    def validate(self) -> None:
        self.quant_run = self.quant_run.strip()


@dataclass
class DataInfoSpec(Spec):
    """Describe a dataset: sizes, classes, shapes and statistics (`workbench data info`)."""

    dataset: DataSpec = option(DataSpec(), "The dataset to describe.")


MAX_TOP_K = 1000  # rows of a top-k table; a longer list is the whole output, which nobody reads one by one


@dataclass
class PredictSampleSpec(Spec):
    """A sample of the run's own dataset to predict instead of an image file (what the Data tab shows)."""

    split: str = option("", (
        "The split the sample comes from: train, val or test. Empty: no sample (input names an image file)."
    ))
    index: int = option(0, "The sample's index within its split (the Data tab shows it as #index).", min=0,
                        max=MAX_SAMPLES)

    def validate(self) -> None:
        self.split = self.split.strip()
        if self.split not in ("", "train", "val", "test"):
            raise SpecError(f"split: {self.split!r} is not a split; choose train, val or test (or leave it "
                            "empty and name an image file with input)")


@dataclass
class PredictSpec(Spec):
    """Try a run's model on one image (`workbench predict`): the top-k classes with their probabilities, and
    for a quantize run the FP32 model's beside the quantized model's."""

    source: SourceSpec = option(SourceSpec(), (
        "The model to try: source.run names a training run (its best, else last checkpoint) or a quantize "
        "run (its quantized model, beside the FP32 model it came from)."
    ))
    input: str = option("", (
        "An image file (PNG, JPEG, BMP, ...) to predict; it is converted to the model's channels, resized to "
        "its input size and normalised as the run's dataset was. Empty: use sample."
    ))
    sample: PredictSampleSpec = option(PredictSampleSpec(), (
        "A sample of the run's dataset to predict instead of an image file (sample.split and sample.index)."
    ))
    top_k: int = option(5, "How many of the most likely classes (or labels) to list.", min=1, max=MAX_TOP_K)
    preview: bool = option(False, (
        "Also return the image as the model saw it (resized, channels converted, before normalisation) as a "
        "uint8 array: for the window, not the command line."
    ))
    device: str = _device("cpu", "Where to run the model: auto, cpu, mps, cuda or cuda:N.")

    def validate(self) -> None:
        self.input = self.input.strip()
        if self.source.file:
            raise SpecError("source.file: Try it runs a run's model; name a training or quantize run with "
                            f"source.run instead of {self.source.file!r}")
        # A missing run or input is the job's error (the default spec must validate, so a form can start from
        # it).
        if self.input and self.sample.split:
            raise SpecError(f"input: {self.input!r} and sample.split {self.sample.split!r} are both given; "
                            "predict an image file or a sample of the dataset, not both")

# fmt: on

SPEC_TYPES: dict[str, type[Spec]] = {
    "train": TrainSpec,
    "quantize": QuantSpec,
    "export": ExportSpec,
    "bench": BenchSpec,
    "graph": GraphSpec,
    "data": DataInfoSpec,
    "lr-find": LrFindSpec,
    "predict": PredictSpec,
}


def spec_for(verb: str) -> type[Spec]:
    """The spec class of a job verb such as `train`."""
    try:
        return SPEC_TYPES[verb]
    except KeyError:
        raise SpecError(f"job: {verb!r} is not allowed; choose one of: {', '.join(SPEC_TYPES)}") from None
