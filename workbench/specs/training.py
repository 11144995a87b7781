"""The specs of data, models and training: DataSpec, ModelSpec, TrainSpec and LrFindSpec, with the names and
bounds every job spec shares. No torch, no Qt.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, Literal

from workbench.errors import SpecError

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - Python 3.10 has no tomllib
    pass

from workbench.specs.schema import Spec, _check_normalize, option

# --- the specs -------------------------------------------------------------------------------------
# One line per field keeps each spec readable as a table, so the formatter is told to leave them alone.
# fmt: off

DATASETS = ("digits", "mnist", "fashion_mnist", "kmnist", "cifar10", "cifar100", "svhn", "imagefolder",
            "fake", "coco", "voc", "yolo", "shapes_detection")
AUGMENTATIONS = ("random_crop", "hflip", "vflip", "rotation", "color_jitter", "random_erasing")
BENCH_BACKENDS = ("eager", "compile", "torchscript", "exported_program", "onnxruntime", "onnxruntime_int8",
                  "tensorrt")
DEVICE_PATTERN = r"auto|cpu|mps|cuda(:\d+)?"
MODEL_PATTERN = (r"mlp|cnn|torchvision:[A-Za-z_][A-Za-z0-9_]*|file:.+\.py:[A-Za-z_][A-Za-z0-9_]*"
                 # hf: a folder or hub id; timm: a name, maybe .tag
                 r"|hf:.+|timm:[A-Za-z0-9_][A-Za-z0-9_.\-]*")
# a torch Dataset class, or a function returning one
USER_DATASET_PATTERN = r"file:.+\.py:[A-Za-z_][A-Za-z0-9_]*"
USER_FUNCTION_PATTERN = USER_DATASET_PATTERN  # loss=, metrics= (task=custom): a function in the user's file
# a LightningModule or LightningDataModule class
LIGHTNING_PATTERN = r"lightning:.+\.py:[A-Za-z_][A-Za-z0-9_]*"
TASKS = ("auto", "classification", "multilabel", "regression", "segmentation", "detection", "custom")
Task = Literal["auto", "classification", "multilabel", "regression", "segmentation", "detection", "custom"]
LOSSES = ("auto", "cross_entropy", "nll", "mse", "l1", "smooth_l1", "bce")

Amp = Literal["none", "bf16", "fp16"]

# Upper bounds for values that can only be typos (an extra 0, 1e308 for 1e-3): past them a job does not run
# slowly, it fails deep inside torch (dataset.image_size=100000 asked for 17 TB; lr=1e308 overflowed). Each
# sits far above any real use on one machine, and all ints fit the GUI's spin boxes (at most 2**31 - 1).
MAX_IMAGE_SIDE = 4096  # pixels; a 4096x4096 RGB image is already 50 MB as uint8
MAX_SAMPLE_VALUES = 2**28  # values in one input sample (1 GiB as float32): model.input_shape multiplied out
MAX_CLASSES = 1_000_000
MAX_SAMPLES = 100_000_000
MAX_SEED = 2**63 - 1  # torch.manual_seed and numpy take a signed 64-bit seed; more overflows deep in torch
MAX_BATCH = 2**20
MAX_ACCUM = 65_536
MAX_EPOCHS = 100_000
MAX_STEPS = 10_000_000
MAX_PROFILE_STEPS = 10_000  # a profiler trace grows with every step; thousands already make one hard to open
MAX_PROCESSES = 1024  # loader workers, DDP processes or threads on one machine
MAX_LR = 10  # also bounds gamma: no optimiser here trains at a rate above 10, and 1e308 overflows
MAX_WEIGHT_DECAY = 1  # decay above 1 shrinks the weights faster than any gradient can move them


def _device(default: str, help: str) -> Any:
    return option(default, help, pattern=DEVICE_PATTERN, pattern_help="auto, cpu, mps, cuda or cuda:N")


@dataclass
class DataSpec(Spec):
    """Which dataset to load and how to split, resize, normalise and augment it."""

    name: str = option("digits", (
        "Dataset to load; 'fake' makes random images, 'imagefolder' reads class folders under root, "
        "file:<path.py>:<Name> is your own torch Dataset class (or a function returning one), run with your "
        "permissions."
    ), choices=DATASETS, pattern=USER_DATASET_PATTERN + "|" + LIGHTNING_PATTERN, pattern_help=(
        "file:<path.py>:<DatasetClassOrFunction> or lightning:<path.py>:<LightningDataModule>"
    ))
    root: str = option("", "Folder holding the dataset files; empty means the workspace's data folder.")
    annotations: str = option("", (
        "name = \"coco\": the COCO instances JSON describing root's images (a path, or a name under root); "
        "name = \"yolo\": the class names file (data.yaml or classes.txt; empty: found in root)."
    ))
    download: bool = option(False, "Download the dataset when it is not already under root.")
    val_fraction: float = option(0.1, "Fraction of the training split held out for validation.", min=0, max=1,
                                 max_exclusive=True)
    test_fraction: float = option(0.1, (
        "Fraction held out for testing, used only where the dataset has no test split of its own."
    ), min=0, max=1, max_exclusive=True)
    seed: int = option(0, "Seed of the random train/validation/test split.", min=0, max=MAX_SEED)
    image_size: list[int] = option([], (
        "Resize images: empty keeps their size, one value makes a square, two values are height,width."
    ), min=1, max=MAX_IMAGE_SIDE, max_items=2)
    normalize: str | dict = option("auto", (
        "Normalisation: 'auto' uses the dataset's statistics, 'none' skips it, or a table {mean=[...], "
        "std=[...]}."
    ))
    augment: list[dict] = option([], (
        "Training augmentations, each a table with a name and its parameters, e.g. {name='rotation', "
        "degrees=15}."
    ), str_key="name")
    num_workers: int | Literal["auto"] = option("auto", (
        "Background workers that load batches ahead of the step; 0 loads them in the job's own process. "
        "auto: the machine's cores (up to 8) where data streams from files, 0 where it is held in memory."
    ), min=0, max=MAX_PROCESSES)
    pin_memory: bool = option(False, "Pin host memory so batches copy to a CUDA device faster.")
    on_device: bool | Literal["auto"] = option("auto", (
        "Keep the whole dataset (uint8) on the training device and gather, augment and normalise batches "
        "there: auto does so on CUDA when it fits in a quarter of the free device memory; false stages each "
        "batch through host memory."
    ))
    size: int = option(1000, "Samples 'fake' (images 'shapes_detection') generates.", min=1, max=MAX_SAMPLES)
    num_classes: int = option(10, "Number of classes the 'fake' dataset generates.", min=2, max=MAX_CLASSES)
    args: dict = option({}, "Keyword arguments for a file: dataset's class or function, e.g. {size=500}.")
    stratify: bool = option(True, (
        "Split by class: every class is cut into train, validation and test in the same proportions, so a "
        "small test split keeps every class (a registered or image-folder dataset; a file: dataset is split "
        "plainly). false: the plain seeded split, which runs made before this option keep."
    ))

    def validate(self) -> None:
        total = self.val_fraction + self.test_fraction
        if total >= 1:
            raise SpecError(
                f"val_fraction: {self.val_fraction!r} plus test_fraction {self.test_fraction!r} is "
                f"{total:g}; the sum must be < 1"
            )
        self.normalize = _check_normalize(self.normalize)
        for i, item in enumerate(self.augment):
            name = item.get("name")
            if name not in AUGMENTATIONS:
                what = f"{name!r} is not allowed" if "name" in item else f"{item!r} has no name"
                raise SpecError(f"augment[{i}].name: {what}; choose one of: {', '.join(AUGMENTATIONS)}")


INPUT_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8",
                "bool")


def _check_input_spec(input_spec: dict) -> None:
    """model.input_spec: {name: {shape: [batch, ...], dtype, low, high}}, each entry checked with its path."""
    for name, entry in input_spec.items():
        where = f"input_spec.{name}"
        if not isinstance(entry, dict):
            raise SpecError(
                f"{where}: {entry!r} is not a table; write {{shape = [1, 48], dtype = \"int64\"}}"
            )
        unknown = sorted(set(entry) - {"shape", "dtype", "low", "high"})
        if unknown:
            raise SpecError(f"{where}: unknown key {unknown[0]!r}; allowed: shape, dtype, low, high")
        shape = entry.get("shape")
        if (not isinstance(shape, list) or not shape or len(shape) > 8
                or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
            raise SpecError(f"{where}.shape: {shape!r} must be a list of 1 to 8 positive integers, the batch "
                            "first, e.g. [1, 48]")
        if math.prod(shape) > MAX_SAMPLE_VALUES:
            raise SpecError(
                f"{where}.shape: {shape!r} is {math.prod(shape):,} values; at most {MAX_SAMPLE_VALUES:,}"
            )
        dtype = entry.get("dtype", "float32")
        if dtype not in INPUT_DTYPES:
            raise SpecError(
                f"{where}.dtype: {dtype!r} is not allowed; choose one of: {', '.join(INPUT_DTYPES)}"
            )
        for key in ("low", "high"):
            value = entry.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise SpecError(f"{where}.{key}: {value!r} is not a finite number")
        if entry.get("low") is not None and entry.get("high") is not None and entry["low"] > entry["high"]:
            raise SpecError(f"{where}: low {entry['low']} is above high {entry['high']}")


@dataclass
class ModelSpec(Spec):
    """Which model to build and which weights to start from."""

    name: str = option("cnn", (
        "Model to build: mlp, cnn, torchvision:<arch>, file:<path.py>:<ClassOrFactory>, hf:<folder or hub "
        "id> (a Hugging Face transformers classifier, loaded offline from a local folder or the cache; pip "
        "install 'torch-workbench[hf]') or timm:<name> (untrained unless model.weights names a local file; "
        "pip install 'torch-workbench[timm]'); lightning:<path.py>:<LightningModule> is trained by "
        "Lightning's own Trainer."
    ), pattern=MODEL_PATTERN + "|" + LIGHTNING_PATTERN, pattern_help=(
        "mlp, cnn, torchvision:<arch>, file:<path.py>:<ClassOrFactory>, hf:<folder or hub id>, timm:<name> "
        "or lightning:<path.py>:<LightningModule>"
    ))
    num_classes: int = option(0, (
        "Number of outputs of the classifier; 0 (auto) takes the dataset's class count."
    ), min=0, max=MAX_CLASSES)
    input_shape: list[int] = option([], (
        "Shape of one input without the batch dimension, e.g. 1,28,28; empty takes it from the dataset."
    ), min=1, max_items=3)
    input_spec: dict = option({}, (
        "The model's inputs by name, for a job with no dataset to take real samples from: {name = {shape = "
        "[batch, ...], dtype = \"int64\", low = 0, high = 200}}; e.g. {ids = {shape = [1, 48], dtype = "
        "\"int64\", low = 0, high = 200}}. Empty: inputs come from the dataset, else model.input_shape."
    ))
    checkpoint: str = option("", "Weights file to load before the job starts; empty loads none.")
    weights: str = option("", (
        "Pretrained weights to start from, e.g. DEFAULT for a torchvision model; empty means none."
    ))
    replace_head: bool = option(False, (
        "Replace the classifier head so it has num_classes outputs, e.g. to fine-tune pretrained weights."
    ))
    freeze: list[str] = option([], (
        "Module-name prefixes whose parameters are not trained, or the word 'backbone' for all but the head."
    ))
    args: dict = option({}, (
        "Keyword arguments for a file: model's class or factory (num_classes is passed apart, where it takes "
        "one), a lightning: module's class, timm.create_model for a timm: model, or from_pretrained for an "
        "hf: model (plus task = \"sequence-classification\", \"token-classification\" or "
        "\"image-classification\", and local_files_only = false to allow downloads), e.g. {hidden=64, "
        "lr=0.01}."
    ))

    def validate(self) -> None:
        if self.args and not self.name.startswith(("file:", "lightning:", "hf:", "timm:", "torchvision:")):
            raise SpecError(f"args: {self.name} is a built-in model and takes no arguments; only file:, "
                            "lightning:, hf:, timm: and torchvision: (detector) models do")
        _check_input_spec(self.input_spec)
        values = math.prod(self.input_shape)
        if values > MAX_SAMPLE_VALUES:
            # Each side may be plausible alone (a 1-D input of 150,528 features is); their product is what
            # the dry forward pass would allocate.
            raise SpecError(
                f"input_shape: {','.join(map(str, self.input_shape))} is {values:,} values per sample; "
                f"must be at most {MAX_SAMPLE_VALUES:,}"
            )


@dataclass
class TrainSpec(Spec):
    """A training run: data, model, optimiser, schedule, precision and where it runs."""

    dataset: DataSpec = option(DataSpec(), "The data to train and validate on.")
    model: ModelSpec = option(ModelSpec(), "The model to train.")
    epochs: int = option(10, "Number of passes over the training split.", min=1, max=MAX_EPOCHS)
    batch_size: int = option(64, "Samples per optimiser step (before gradient accumulation).", min=1,
                             max=MAX_BATCH)
    lr: float = option(1e-3, "Learning rate (the peak rate for onecycle).", min=0, min_exclusive=True,
                       max=MAX_LR)
    optimizer: Literal["sgd", "adam", "adamw", "rmsprop"] = option("adam", "Optimisation algorithm.")
    momentum: float = option(0.9, "Momentum for sgd and rmsprop.", min=0, max=1)
    weight_decay: float = option(0.0, "L2 weight decay (decoupled for adamw); 0 turns it off.", min=0,
                                 max=MAX_WEIGHT_DECAY)
    no_decay_bias_norm: bool = option(True, "Exempt biases and normalisation weights from weight decay.")
    scheduler: Literal["none", "step", "cosine", "onecycle"] = option("none", "Learning-rate schedule.")
    step_size: int = option(5, "Epochs between learning-rate drops for the step schedule.", min=1,
                            max=MAX_EPOCHS)
    gamma: float = option(0.1, "Factor the step schedule multiplies the learning rate by.", min=0,
                          min_exclusive=True, max=MAX_LR)
    task: Task = option("auto", (
        "What the model learns: auto decides from the first sample (integer labels: classification; float "
        "targets: regression; an integer map the input's size: segmentation; a 0/1 vector: multilabel)."
    ))
    loss: str = option("auto", (
        "Loss function; auto is the task's own (cross_entropy for classification and segmentation, mse for "
        "regression, bce for multilabel). file:<path.py>:<fn> is your own fn(outputs, target) -> scalar "
        "tensor, run with your permissions (task=custom; task=auto with a file: loss means custom)."
    ), choices=LOSSES, pattern=USER_FUNCTION_PATTERN, pattern_help=(
        "file:<path.py>:<function> (your own loss, task=custom)"
    ))
    metrics: str = option("", (
        "task=custom: file:<path.py>:<fn>, your fn(outputs, target) -> {name: number} per batch; each is "
        "averaged over the epoch weighted by batch size and logged as train_<name> and val_<name>. Empty: "
        "the loss only."
    ), pattern=r"|" + USER_FUNCTION_PATTERN, pattern_help=(
        "empty, or file:<path.py>:<function> returning {name: number}"
    ))
    monitor: str = option("", (
        "task=custom: the validation metric that picks the best checkpoint and early stopping: a name the "
        "metrics function returns, or loss. Empty: loss."
    ))
    monitor_mode: Literal["auto", "max", "min"] = option("auto", (
        "task=custom: whether a higher (max) or lower (min) monitor is better; auto is min for monitor=loss "
        "and must be set for any other monitor."
    ))
    label_smoothing: float = option(0.0, "Label smoothing for cross_entropy; 0 turns it off.", min=0, max=1,
                                    max_exclusive=True)
    amp: Amp = option("none", "Mixed precision: autocast to bf16 or fp16, or none for full precision.")
    grad_accum_steps: int = option(1, "Batches whose gradients add up before each optimiser step.", min=1,
                                   max=MAX_ACCUM)
    clip_grad_norm: float = option(0.0, "Clip the gradient norm to this value; 0 turns it off.", min=0)
    clip_grad_value: float = option(0.0, (
        "Clip each gradient element to plus or minus this value; 0 turns it off."
    ), min=0)
    seed: int = option(0, "Seed for weight initialisation and data shuffling.", min=0, max=MAX_SEED)
    deterministic: bool = option(False, (
        "Use deterministic algorithms so reruns match exactly, at some cost in speed."
    ))
    compile: Literal["off", "default", "reduce-overhead", "max-autotune"] = option("off", (
        "torch.compile mode, or off to run eagerly."
    ))
    channels_last: bool | Literal["auto"] = option("auto", (
        "Memory layout of image tensors: true is channels-last, false contiguous; auto times both once per "
        "model and device (remembered in the workspace) and keeps the faster. Same precision either way."
    ))
    checkpoint_every: int = option(1, "Save a checkpoint every this many epochs; 0 saves only at the end.",
                                   min=0, max=MAX_EPOCHS)
    keep_best: bool = option(True, "Also keep the checkpoint with the best validation score.")
    early_stop_patience: int = option(0, (
        "Stop after this many epochs without validation improvement; 0 turns it off."
    ), min=0, max=MAX_EPOCHS)
    device: str = _device("auto", "Where to train: auto, cpu, mps, cuda or cuda:N.")
    distributed: Literal["none", "ddp"] = option("none",
                                                 "Distributed training across processes: none or ddp.")
    nproc: int = option(1, "Number of processes for ddp; must be 1 without it.", min=1, max=MAX_PROCESSES)
    profile_steps: int = option(0, "Record a torch profiler trace of this many steps; 0 turns it off.", min=0,
                                max=MAX_PROFILE_STEPS)
    log_every_steps: int = option(20, "How often, in steps, the loop reads losses back from the device.",
                                  min=1, max=MAX_STEPS)
    layer_stats_every: int = option(50, (
        "How often, in steps, to record each layer's weight, gradient and activation statistics and "
        "histograms (the Training tab's Layers view); the first step is always recorded. 0 turns it off."
    ), min=0, max=MAX_STEPS)
    tensorboard: bool = option(False, (
        "Also write TensorBoard event files into the run's tensorboard/ folder as it trains: every metric at "
        "every step, the spec and the model graph. Needs the tensorboard package (pip install "
        "'torch-workbench[tensorboard]')."
    ))

    def validate(self) -> None:
        if self.distributed == "none" and self.nproc != 1:
            raise SpecError(
                f"nproc: {self.nproc} needs distributed=ddp; with distributed=none nproc must be 1"
            )
        self._check_custom()

    def _check_custom(self) -> None:
        """task=custom and its fields (loss=file:, metrics, monitor, monitor_mode) go together; task=auto with
        a file: loss becomes custom, since no other task takes the user's loss."""
        user_loss = self.loss.startswith("file:")
        if self.model.name.startswith("lightning:"):
            # A LightningModule computes its own loss in training_step and logs its own metrics; its callbacks
            # name the monitor. Whatever task it records, these fields would be silently ignored: say so.
            for name, unset in (("metrics", ""), ("monitor", ""), ("monitor_mode", "auto")):
                if getattr(self, name) != unset:
                    raise SpecError(f"{name}: {getattr(self, name)!r} is not used by a LightningModule "
                                    "(model.name=lightning:...): it logs its own metrics and its "
                                    "ModelCheckpoint names the monitor")
            if user_loss:
                raise SpecError(f"loss: {self.loss!r} is not used by a LightningModule: its training_step "
                                "computes the loss")
            return
        if user_loss and self.task == "auto":
            self.task = "custom"
        self.monitor = self.monitor.strip()
        if self.task != "custom":
            if user_loss:
                raise SpecError(f"loss: {self.loss!r} is a custom loss; set task=custom (or auto), or choose "
                                f"one of: {', '.join(LOSSES)}")
            for name, unset in (("metrics", ""), ("monitor", ""), ("monitor_mode", "auto")):
                if getattr(self, name) != unset:
                    raise SpecError(f"{name}: {getattr(self, name)!r} is for task=custom (with "
                                    f"loss=file:<path.py>:<fn>); task={self.task} has its own metrics and "
                                    "monitor")
            return
        if not user_loss:
            raise SpecError("loss: task=custom needs loss=file:<path.py>:<fn> (your fn(outputs, target) -> "
                            f"scalar tensor), not {self.loss!r}; for a built-in loss choose its task (or "
                            "auto)")
        if self.monitor in ("", "loss"):
            if self.monitor_mode == "max":
                raise SpecError("monitor_mode: max would keep the epoch with the highest validation loss; "
                                "use min (or auto), or set monitor to a metric that is better when higher")
        else:
            if not self.metrics:
                raise SpecError(f"monitor: {self.monitor!r} names a metric, but there is no metrics "
                                "function; set metrics=file:<path.py>:<fn> returning it, or monitor=loss")
            if self.monitor_mode == "auto":
                raise SpecError(f"monitor_mode: auto cannot tell whether a higher or a lower {self.monitor} "
                                "is better; set monitor_mode=max or monitor_mode=min")


MAX_LR_FIND_STEPS = 10_000  # each step is one training step on one batch; a sweep needs about a hundred


@dataclass
class LrFindSpec(TrainSpec):
    """The learning-rate range test (`workbench lr-find`): a training spec (its data, model, batch size,
    optimiser, loss, precision and device) swept from min_lr to max_lr over `steps` optimiser steps. A
    TrainSpec subclass, so a training spec plus these three fields is one; lr, epochs, the schedule and the
    checkpoint fields go unused."""

    min_lr: float = option(1e-7, "Learning rate of the sweep's first step.", min=0, min_exclusive=True,
                           max=MAX_LR)
    max_lr: float = option(10.0, (
        "Learning rate of the sweep's last step; the rate grows exponentially from min_lr to it."
    ), min=0, min_exclusive=True, max=MAX_LR)
    steps: int = option(100, (
        "Optimiser steps of the sweep (one batch each); it stops early once the loss diverges."
    ), min=5, max=MAX_LR_FIND_STEPS)

    def validate(self) -> None:
        super().validate()
        if self.min_lr >= self.max_lr:
            raise SpecError(f"min_lr: {self.min_lr:g} must be below max_lr ({self.max_lr:g}); the sweep "
                            "raises the learning rate from min_lr to max_lr, e.g. min_lr=1e-7 and max_lr=10")
        if self.model.name.startswith("lightning:"):
            raise SpecError("model.name: a LightningModule's configure_optimizers sets its own learning "
                            "rate, so lr-find cannot sweep it; use Lightning's own Tuner.lr_find")
# fmt: on
