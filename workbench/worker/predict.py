"""Try it (`predict.model`, `workbench predict`): a training or quantize run's model on one image file or one
sample of its dataset, read and normalised as the run's dataset reads its images; the top-k classes
(multilabel: labels, regression: values, segmentation: the predicted mask and each class's share,
predict_masks), and for a quantize run the FP32 model's beside the quantized one's. Worker side; never Qt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from workbench.errors import JobError, WorkbenchError
from workbench.specs import DataSpec, ModelSpec, PredictSpec
from workbench.worker.detection_source import detection_quant_run, detection_run

# More pixels than a camera's photo needs to say what it shows, and about 150 MB decoded as RGB: the image is
# shrunk to the model's input anyway. The header says the size, so a bigger file is refused before a pixel is
# decoded.
MAX_INPUT_PIXELS = 50_000_000
TASKS = ("classification", "multilabel", "regression", "segmentation")  # what a prediction here can show
MAX_VALUES = 1000  # regression outputs listed at most (a per-pixel regression map is not one sample's answer)
STEPS = 4


@dataclass
class Loaded:
    """What one predict needs from its run: the model(s), the dataset that says how inputs are read, the
    task."""

    kind: str  # "train" or "quantize"
    run_dir: Path
    model_spec: ModelSpec
    data: DataSpec
    task: str
    dataset: object = None  # a LoadedDataset or a UserDataset
    quantized: object = None  # a QuantSim (quantize runs)
    # the FP32 model: the training run's, or the float checkpoint the quantize run started from
    fp32: object = None
    checkpoint: Path | None = None
    quant_run: object = None  # the QuantRun (onnx_qdq.read_quant_run) of a quantize run
    true_mask: object = None  # a segmentation sample's (H, W) uint8 true mask
    notes: list[str] = field(default_factory=list)


def run_predict(spec: PredictSpec, ctx) -> dict:
    from workbench.worker.devices import resolve_device

    if not spec.source.run:
        raise JobError(
            "source.run: name the training or quantize run to try (its id, a unique id prefix or its "
            "folder), e.g. --set source.run=<run id>"
        )
    if not spec.input and not spec.sample.split:
        raise JobError(
            "input: name an image file (input=<path.png>), or a sample of the run's dataset "
            "(sample.split=test and sample.index=0)"
        )
    detection = detection_run(spec.source.run, ctx.workspace)
    if detection is not None:  # boxes, not classes: the detector on the image
        from workbench.worker.predict_boxes import run_detection_predict

        run_dir, trained = detection
        return run_detection_predict(spec, ctx, trained, run_dir)
    quantized = detection_quant_run(spec.source.run, ctx.workspace)
    if quantized is not None:  # a detection quantize run: FP32 boxes beside quantized ones
        from workbench.worker.predict_boxes import run_detection_quant_predict

        return run_detection_quant_predict(spec, ctx, quantized)
    device = resolve_device(spec.device)
    ctx.progress(0, STEPS, "reading the run", force=True)
    loaded = _load_run(spec, ctx)
    try:
        ctx.check_stop()
        ctx.progress(1, STEPS, "reading the input", force=True)
        x, info, truth, preview = _read_input(spec, loaded, ctx)
        ctx.check_stop()
        ctx.progress(2, STEPS, "building the model", force=True)
        _build_models(loaded, x, ctx)
        ctx.check_stop()
        ctx.progress(3, STEPS, "predicting", force=True)
        classes = list(getattr(loaded.dataset, "classes", None) or [])
        result = {
            "run": loaded.run_dir.name,
            "run_kind": loaded.kind,
            "model": loaded.model_spec.name,
            "dataset": loaded.data.name,
            "task": loaded.task,
            "top_k": spec.top_k,
            "device": str(device),
            "input": info,
            "notes": loaded.notes,
        }
        if loaded.checkpoint is not None:
            result["checkpoint"] = str(loaded.checkpoint)
        if truth is not None:
            result["truth"] = truth
        if loaded.task == "segmentation":
            result.update(_segmentation_result(loaded, x, device, classes, as_arrays=spec.preview))
        else:
            result.update(_ranked_result(loaded, x, device, classes, spec.top_k))
        if spec.preview and preview is not None:
            result["preview"] = preview
        ctx.log(_summary(result))
        ctx.progress(STEPS, STEPS, "done", force=True)
        return result
    finally:
        if loaded.dataset is not None and hasattr(loaded.dataset, "release"):
            loaded.dataset.release()


# --- the run ------------------------------------------------------------------------------------------------


def _run_task_of(ref: str, workspace) -> str:
    from workbench.runs import RunStore
    from workbench.workspace import default_workspace

    store = RunStore(workspace if workspace is not None else default_workspace())
    try:
        with store.open_run(ref) as run:  # read-only: trying a run never writes to it
            return run.task or ""
    except WorkbenchError as exc:
        raise JobError(f"source.run: {exc}") from None


def _load_run(spec: PredictSpec, ctx) -> Loaded:
    task = _run_task_of(spec.source.run, ctx.workspace)
    if task.startswith("train."):
        return _load_training_run(spec, ctx)
    if task == "quant.analyze":
        return _load_quant_run(spec, ctx)
    raise JobError(
        f"source.run: {spec.source.run} is a {task or 'unknown'} run; Try it takes a training run "
        "(train.model) or a quantize run (quant.analyze)"
    )


def _load_data(data: DataSpec, run_dir: Path, ctx):
    from workbench.worker.data import load_dataset

    try:
        return load_dataset(data, ctx=ctx)
    except JobError as exc:
        raise JobError(
            f"source.run: the dataset of run {run_dir.name} ({data.name}) cannot be read ({exc}); Try it "
            "needs it for the class names and to normalise the input as training did"
        ) from None


def _check_task(task: str, run_dir: Path) -> None:
    if task not in TASKS:
        raise JobError(
            f"source.run: run {run_dir.name} is a {task} run; Try it shows classification (the top-k "
            "classes), multilabel (each label's probability), regression (the values) and segmentation "
            "(the predicted mask) predictions; for this run use the Training tab's Evaluation view"
        )


def _load_training_run(spec: PredictSpec, ctx) -> Loaded:
    from workbench.worker.objectives.of_run import measured_task
    from workbench.worker.source import read_training_run, run_checkpoint

    run_dir, trained = read_training_run(
        spec.source.run, ctx.workspace, refusal="Try it takes a training run"
    )
    checkpoint = run_checkpoint(run_dir)
    dataset = _load_data(trained.dataset, run_dir, ctx)
    loaded = Loaded(
        "train",
        run_dir,
        trained.model,
        trained.dataset,
        measured_task(trained, dataset),
        dataset,
        checkpoint=checkpoint,
    )
    _check_task(loaded.task, run_dir)
    return loaded


def _load_quant_run(spec: PredictSpec, ctx) -> Loaded:
    from workbench.worker.export.onnx_qdq import read_quant_run
    from workbench.worker.objectives.of_run import measured_task

    notes: list[str] = []

    def say(text: str, level: str = "info") -> None:
        if level != "info":
            notes.append(text)
        ctx.log(text, level)

    run = read_quant_run(spec.source.run, ctx.workspace, say=say)
    dataset = _load_data(run.dataset, run.dir, ctx)
    task = measured_task(run.train, dataset) if run.train is not None else "classification"
    loaded = Loaded("quantize", run.dir, run.model, run.dataset, task, dataset, quant_run=run, notes=notes)
    _check_task(task, run.dir)
    return loaded


def _build_models(loaded: Loaded, x, ctx) -> None:
    """The model(s) on the CPU in eval mode: the training run's with its checkpoint; for a quantize run its
    simulated quantized model and, where its float checkpoint is still there, the FP32 model it started
    from."""
    from workbench.worker.models import build_model, load_checkpoint
    from workbench.worker.objectives.of_run import first_input

    shape = tuple(loaded.model_spec.input_shape) or tuple(loaded.dataset.sample_shape)
    example = first_input(loaded.dataset)

    def fp32_from(checkpoint: Path, what: str):
        # The checkpoint holds every weight: no pretrained download, no starting checkpoint, no freezing.
        model_spec = dataclasses.replace(loaded.model_spec, checkpoint="", weights="", freeze=[])
        model = build_model(
            model_spec,
            input_shape=shape,
            log=ctx.log,
            pretrained=False,
            checkpoint=False,
            task=loaded.task,
            example=example,
        )
        load_checkpoint(model, checkpoint, what=what)
        return model.eval()

    if loaded.kind == "train":
        loaded.fp32 = fp32_from(loaded.checkpoint, "source.run")
        return
    from workbench.worker.export.onnx_qdq import load_sim

    run = loaded.quant_run
    loaded.quantized = load_sim(run, say=ctx.log, input_shape=shape, example=example)
    # The float weights the quantize run started from (its params name the file): the FP32 side of the
    # comparison. A quantize run keeps only its quantized weights, so without that file there is no FP32 model
    # to show.
    checkpoint = run.fp32_checkpoint()
    if checkpoint is None:
        loaded.notes.append(
            f"the FP32 checkpoint that quantize run {run.id} started from ({run.recorded_checkpoint}) is "
            "gone, so only the quantized model's predictions are shown"
        )
        ctx.log(loaded.notes[-1], "warning")
        return
    loaded.checkpoint = checkpoint
    loaded.fp32 = fp32_from(checkpoint, f"the FP32 checkpoint of quantize run {run.id}")


# --- the input ----------------------------------------------------------------------------------------------


def _read_input(spec: PredictSpec, loaded: Loaded, ctx):
    """(the model's input batch of one, what was done to it, the sample's true target or None, the uint8 H×W×C
    image the model saw before normalisation or None)."""
    from workbench.worker.objectives.of_run import is_user_data

    dataset = loaded.dataset
    if is_user_data(dataset):
        if spec.input:
            raise JobError(
                f"input: run {loaded.run_dir.name} trained on {dataset.name}, a Dataset of your own whose "
                "inputs its own code makes; Try it cannot turn an image file into one. Pick a sample of "
                "that dataset instead (sample.split=test, sample.index=0)"
            )
        return _user_sample(spec, loaded)
    channels, height, width = (int(v) for v in dataset.sample_shape)
    if spec.input:
        image, info = read_image(spec.input, channels, (height, width))
        truth = None
    else:
        split = _split(dataset, spec.sample.split, loaded)
        index = spec.sample.index
        if index >= len(split):
            raise JobError(
                f"sample.index: {index} is past the end of the {split.name} split of {dataset.name} "
                f"({len(split):,} samples: 0 to {len(split) - 1})"
            )
        image = split.images([index])[0]
        label = int(split.labels[index])
        classes = list(dataset.classes)
        truth = {"class": label, "label": classes[label] if label < len(classes) else str(label)}
        info = {
            "kind": "sample",
            "split": split.name,
            "index": index,
            "model_size": [height, width],
            "channels": channels,
        }
    mean, std = dataset.normalization(progress=ctx.progress)
    mean_t = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    # Scaled to 0..1, then normalised: the two passes evaluation makes (loaded.Split._stream, scale_first).
    x = image.unsqueeze(0).to(torch.float32).div_(255).sub_(mean_t).div_(std_t)
    info["normalize"] = {
        "mean": [round(v, 6) for v in mean],
        "std": [round(v, 6) for v in std],
        "how": dataset.spec.normalize if isinstance(dataset.spec.normalize, str) else "table",
    }
    preview = np.ascontiguousarray(image.movedim(0, -1).numpy())
    return x, info, truth, preview


def _split(dataset, name: str, loaded: Loaded):
    split = dataset.splits.get(name)
    if split is None or len(split) == 0:
        have = [n for n, s in dataset.splits.items() if len(s)]
        raise JobError(
            f"sample.split: the {name} split of {dataset.name} (run {loaded.run_dir.name}) is empty; "
            f"choose one of {', '.join(have)}"
        )
    return split


def _user_sample(spec: PredictSpec, loaded: Loaded):
    from torch.utils.data import default_collate

    dataset = loaded.dataset
    if not spec.sample.split:
        raise JobError("sample.split: name the split of the sample to try")
    split = _split(dataset, spec.sample.split, loaded)
    index = spec.sample.index
    if index >= len(split):
        raise JobError(
            f"sample.index: {index} is past the end of the {split.name} split of {dataset.name} "
            f"({len(split):,} samples: 0 to {len(split) - 1})"
        )
    x, y = split.sample(index)
    truth = None
    if loaded.task == "segmentation":
        from workbench.worker.predict_masks import true_mask

        # The mask is drawn and scored, not listed as values.
        loaded.true_mask = true_mask(y)
    elif isinstance(y, torch.Tensor) and y.numel() <= MAX_VALUES:
        truth = {"value": y.tolist()}
    info = {
        "kind": "sample",
        "split": split.name,
        "index": index,
        "note": "the input as the dataset's own code made it (its transforms normalise it)",
    }
    return default_collate([x]), info, _user_truth(truth, y, loaded), _user_input(x, split, info)


def _user_truth(truth: dict | None, y, loaded: Loaded) -> dict | None:
    """A classification sample's true class by name, as a built-in set's sample gives it."""
    if truth is None or loaded.task != "classification" or y.dim() != 0 or y.is_floating_point():
        return truth
    classes = list(getattr(loaded.dataset, "classes", None) or [])
    label = int(y)
    return {**truth, "class": label, "label": classes[label] if 0 <= label < len(classes) else str(label)}


def _user_input(x, split, info: dict):
    """The sample as the window shows it: an image's uint8 H×W×C preview, or (returned in `info`) a token
    sequence's ids and decoded text, a signal's or a row's values, made by the Dataset's own decode in
    here."""
    from workbench.worker.data.imageops import to_hwc
    from workbench.worker.data.sequence_views import Describer
    from workbench.worker.data.user_views import image_uint8, is_image

    if is_image(x):
        return np.ascontiguousarray(to_hwc(image_uint8(x)))
    info["sample"] = Describer(getattr(split, "source", None)).describe(x)
    return None


def read_image(path_text: str, channels: int, size: tuple[int, int]) -> tuple[torch.Tensor, dict]:
    """An image file as uint8 (C,H,W) at the model's channels and size, read as the imagefolder dataset reads
    its files (imagefolder.convert_image), with what was done to it; JobErrors name `input` and say what to
    do."""
    from PIL import Image, UnidentifiedImageError

    from workbench.worker.data.imagefolder import _reason, convert_image, is_sixteen_bit

    path = Path(path_text).expanduser()
    if not path.exists():
        raise JobError(f"input: {path} does not exist; give the path of an image file (PNG, JPEG, BMP, ...)")
    if path.is_dir():
        raise JobError(f"input: {path} is a folder; give the path of one image file in it")
    if not path.is_file():  # a FIFO, socket or device: opening it could wait forever for a writer
        raise JobError(
            f"input: {path} is not a regular file (a pipe, socket or device); give the path of an image file"
        )
    mode = "L" if channels == 1 else "RGB"
    if channels not in (1, 3):
        raise JobError(
            f"input: the model takes {channels}-channel images, and an image file gives 1 (grayscale) or "
            "3 (RGB); try a sample of the run's dataset instead (sample.split, sample.index)"
        )
    try:
        with Image.open(path) as img:
            width, height = img.size
            if width * height > MAX_INPUT_PIXELS:  # from the header, before any pixel is decoded
                raise JobError(
                    f"input: {path} is {width}x{height} pixels ({width * height / 1e6:,.0f} megapixels), "
                    f"more than the {MAX_INPUT_PIXELS / 1e6:.0f} megapixels Try it decodes; shrink it "
                    f"(the model sees {size[1]}x{size[0]} anyway)"
                )
            info = {
                "kind": "file",
                "path": str(path),
                "format": img.format,
                "mode": img.mode,
                "size": [width, height],
                "model_size": [size[0], size[1]],
                "channels": channels,
                "converted_to": mode,
                "notes": [],
            }
            notes = info["notes"]
            if getattr(img, "n_frames", 1) > 1:
                notes.append(f"the first of its {img.n_frames} frames")
            if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
                notes.append("its alpha channel dropped, as the dataset loader drops it")
            if is_sixteen_bit(img):  # convert_image scales them, as the dataset loader does
                notes.append("16-bit values scaled to 8 bits (divided by 257)")
            elif img.mode == "F":
                notes.append("floating-point pixels clipped to 0..255")
            if info["mode"] != mode:
                notes.append(f"{info['mode']} converted to {'grayscale (L)' if mode == 'L' else 'RGB'}")
            if (width, height) != (size[1], size[0]):
                notes.append(f"resized from {width}x{height} to {size[1]}x{size[0]} (bilinear, antialiased)")
            pixels = convert_image(img, mode, size)
    except JobError:
        raise
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError, SyntaxError) as exc:
        raise JobError(
            f"input: {path}: {_reason(str(path), exc)}; give a PNG, JPEG, BMP, GIF, TIFF or WebP image"
        ) from None
    image = torch.from_numpy(pixels)
    image = image.unsqueeze(0) if image.dim() == 2 else image.permute(2, 0, 1)
    return image.contiguous(), info


# --- the answer ---------------------------------------------------------------------------------------------


def _ranked_result(loaded: Loaded, x, device, classes: list[str], top_k: int) -> dict:
    """The result's ranked rows (classes, labels or values); for a quantize run FP32 beside quantized."""
    fp32 = _answer(loaded.fp32, x, device, loaded.task, classes, top_k) if loaded.fp32 is not None else None
    if loaded.kind != "quantize":
        return {"predictions": fp32}
    quantized = _answer(loaded.quantized, x, device, loaded.task, classes, top_k)
    agree = (
        None if fp32 is None or loaded.task != "classification" else fp32[0]["class"] == quantized[0]["class"]
    )
    return {"predictions": quantized, "quantized": quantized, "fp32": fp32, "agree": agree}


def _segmentation_result(loaded: Loaded, x, device, classes: list[str], as_arrays: bool) -> dict:
    """The result's segmentation part: each model's class shares as its predictions, its mask, and with a true
    mask that image's scores; for a quantize run FP32 beside quantized and the share of pixels they agree on.
    Masks are uint8 arrays for the window (raw buffers), lists of rows for the command line's JSON."""
    from workbench.worker.predict_masks import segmentation_answer

    models = (
        [("fp32", loaded.fp32), ("quantized", loaded.quantized)]
        if loaded.kind == "quantize"
        else [("fp32", loaded.fp32)]
    )
    answers = {
        name: segmentation_answer(_forward(model, x, device), classes, loaded.true_mask)
        for name, model in models
        if model is not None
    }
    out: dict = {"masks": {name: a["mask"] for name, a in answers.items()}}
    if loaded.true_mask is not None:
        out["true_mask"] = loaded.true_mask
        out["scores"] = {name: a["scores"] for name, a in answers.items()}
    count = len(next(iter(answers.values()))["shares"])
    out["classes"] = [classes[k] if k < len(classes) else str(k) for k in range(count)]
    main = "quantized" if loaded.kind == "quantize" else "fp32"
    out.update(predictions=answers[main]["shares"], mask=answers[main]["mask"])
    if loaded.kind == "quantize":
        out.update(
            fp32=answers["fp32"]["shares"] if "fp32" in answers else None,
            quantized=answers["quantized"]["shares"],
            agree=None,
        )
        if "fp32" in answers:
            out["mask_agreement"] = float((answers["fp32"]["mask"] == answers["quantized"]["mask"]).mean())
    if not as_arrays:
        for key in ("mask", "true_mask"):
            if key in out:
                out[key] = out[key].tolist()
        out["masks"] = {name: mask.tolist() for name, mask in out["masks"].items()}
    return out


def _forward(model, x, device) -> torch.Tensor:
    """The model's float scores for the one input, on the CPU; NaN or infinite scores are a clear error."""
    from workbench.worker.models.build import call_model, logits_of

    def to(value):
        if isinstance(value, dict):
            return {k: to(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(to(v) for v in value)
        return value.to(device)

    if hasattr(model, "to"):
        model.to(device)
    with torch.no_grad():
        scores = logits_of(call_model(model, to(x))).float().cpu()
    if not torch.isfinite(scores).all():
        raise JobError(
            "the model's output holds NaN or infinite values for this input; check the run's model (its "
            "Evaluation view) or try another image"
        )
    return scores


def _answer(model, x, device, task: str, classes: list[str], top_k: int) -> list[dict]:
    """The model's prediction for the one input: top-k classes (softmax), top-k labels (sigmoid, each also
    `positive` at the multilabel threshold) or the values (regression)."""
    scores = _forward(model, x, device)

    def label(i: int) -> str:
        return classes[i] if i < len(classes) else str(i)

    if task == "regression":
        values = scores.reshape(-1)[:MAX_VALUES].tolist()
        return [
            {"index": i, "label": label(i) if len(classes) == len(values) else f"output {i}", "value": v}
            for i, v in enumerate(values)
        ]
    row = scores.reshape(scores.shape[0], -1)[0] if scores.dim() > 1 else scores.reshape(-1)
    if task == "multilabel":
        from workbench.worker.objectives.multilabel import THRESHOLD

        probabilities = torch.sigmoid(row.double())
        order = probabilities.argsort(descending=True)[:top_k].tolist()
        return [
            {
                "class": i,
                "label": label(i),
                "probability": float(probabilities[i]),
                "positive": bool(probabilities[i] >= THRESHOLD),
            }
            for i in order
        ]
    probabilities = torch.softmax(row.double(), dim=0)
    order = probabilities.argsort(descending=True, stable=True)[:top_k].tolist()
    return [
        {"class": i, "label": label(i), "probability": float(probabilities[i]), "logit": float(row[i])}
        for i in order
    ]


def _summary(result: dict) -> str:
    def first(rows):
        if not rows:
            return "none"
        top = rows[0]
        if "share" in top:  # segmentation: the class covering most pixels other than the first (background)
            top = max(rows[1:] or rows, key=lambda row: row["share"])
            return f"{top['label']} on {top['share']:.1%} of the pixels"
        if "probability" in top:
            return f"{top['label']} ({top['probability']:.1%})"
        return f"{top['label']} = {top['value']:.4g}"

    if result["run_kind"] == "quantize":
        return (
            f"predicted with quantize run {result['run']}: quantized {first(result['quantized'])}, FP32 "
            f"{first(result['fp32'])}"
        )
    return f"predicted with run {result['run']}: {first(result['predictions'])}"


__all__ = ["MAX_INPUT_PIXELS", "read_image", "run_predict"]
