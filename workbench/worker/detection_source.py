"""Where a detection job's detector comes from: a detection training run (its spec says task = "detection"),
the detector rebuilt from that spec with the checkpoint its later jobs load, and the run's data; and a
detection quantize run's quantized detector beside its FP32 one. Quantize, export, bench and Try it take a
detector here, as every other model comes through source.py. Worker side; never imports Qt."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from workbench.errors import WorkbenchError
from workbench.runs import RunStore
from workbench.specs import TrainSpec
from workbench.task_ids import is_training
from workbench.worker.checkpoints import load_state_dict


@dataclass
class DetectionSource:
    run_dir: Path
    trained: TrainSpec
    model: torch.nn.Module  # in eval mode, on the job's device, with the run's checkpoint
    dataset: object
    checkpoint: Path


def _task_and_spec(ref: str, workspace) -> tuple[str, dict] | None:
    """(task, spec as data) of run `ref`, read without writing to it; None when it names no readable run."""
    from workbench.workspace import default_workspace

    if not ref:
        return None
    try:
        with RunStore(workspace if workspace is not None else default_workspace()).open_run(ref) as run:
            return run.task, run.read_spec()
    except WorkbenchError:
        return None


def _trained_a_detector(ref: str, workspace) -> bool:
    """Whether run `ref` is a training run whose spec says task = "detection" (its spec read, nothing
    more)."""
    found = _task_and_spec(ref, workspace)
    return found is not None and is_training(found[0]) and found[1].get("task") == "detection"


def detection_run(ref: str, workspace) -> tuple[Path, TrainSpec] | None:
    """(folder, spec) of training run `ref` when it trained a detector; None for any other run, or for a ref
    that names none (the job's usual source resolution then says what it is)."""
    from workbench.worker.source import read_training_run

    if not _trained_a_detector(ref, workspace):
        return None
    return read_training_run(ref, workspace, refusal="")  # its user code checked as for every later job


def first_split(dataset) -> str:
    """The split a job reads its example images from: test, else val, else train."""
    return next(s for s in ("test", "val", "train") if len(dataset.splits[s]))


def held_out_split(dataset) -> str:
    """The split quantize measures mAP on, and the QDQ export again: test, else val."""
    return "test" if len(dataset.splits["test"]) else "val"


def build_detection_model(spec: TrainSpec, dataset, log) -> torch.nn.Module:
    """The detector the spec names, with K + 1 classes (the background counted) when num_classes is auto;
    its checkpoint loaded when it names one."""
    from workbench.worker.models.registry import get_model

    model = get_model(
        spec.model.name,
        num_classes=spec.model.num_classes or len(dataset.classes) + 1,
        input_shape=tuple(dataset.sample_shape),
        weights=spec.model.weights,
        log=log,
        args=spec.model.args,
    )
    if spec.model.checkpoint:
        model.load_state_dict(load_state_dict(spec.model.checkpoint))
    return model


def load_detection_data(data, ctx):
    """A detection run's data: its dataset, or for a Lightning run its DataModule's batches as splits."""
    from workbench.worker.data.loader import load_dataset

    if data.name.startswith("lightning:"):
        from workbench.worker.lightning.detection_data import open_lightning_detection

        return open_lightning_detection(data, ctx)
    return load_dataset(data, ctx=ctx)


def load_detection_run(run_dir: Path, trained: TrainSpec, ctx, device="cpu") -> DetectionSource:
    """The run's data and its detector with the checkpoint later jobs load (best.pt, else model.pt), in eval
    mode on `device`."""
    from workbench.worker.source import run_checkpoint

    dataset = load_detection_data(trained.dataset, ctx)
    model = build_detection_model(trained, dataset, ctx.log)
    checkpoint = run_checkpoint(run_dir)
    model.load_state_dict(load_state_dict(checkpoint))
    return DetectionSource(run_dir, trained, model.eval().to(device), dataset, checkpoint)


@dataclass
class QuantizedDetector:
    """A detection quantize run's detectors on the CPU: its simulated quantized one (a QuantSim, everything
    quantized) and the FP32 one it started from (None where that checkpoint is gone), with the run's data."""

    sim: object
    fp32: torch.nn.Module | None
    dataset: object
    checkpoint: Path | None


def is_detection_quant(run) -> bool:
    """Whether a QuantRun (export/onnx_qdq.read_quant_run) quantized a detector."""
    return run.train is not None and getattr(run.train, "task", "") == "detection"


def load_detection_quant(run, ctx, dataset=None) -> QuantizedDetector:
    """Rebuild a detection quantize run's detector from its artifacts (load_quantized, module by module) and
    the FP32 detector from the checkpoint it quantized; `dataset`: the run's data where the job has read
    it."""
    import copy
    import dataclasses

    from workbench.errors import JobError
    from workbench.worker.quant.artifacts import load_quantized

    dataset = dataset if dataset is not None else load_detection_data(run.dataset, ctx)
    # Every weight comes from the artifacts or the checkpoint: no pretrained download, no starting checkpoint.
    bare = dataclasses.replace(run.train.model, checkpoint="", weights="")
    model = build_detection_model(dataclasses.replace(run.train, model=bare), dataset, ctx.log).eval()
    try:
        sim = load_quantized(copy.deepcopy(model), run.artifacts, params=run.params)
    except JobError:
        raise
    except (KeyError, RuntimeError, ValueError) as exc:  # a quantized.pt that does not fit this detector
        raise JobError(
            f"{run.artifacts}: the saved quantized detector does not fit {run.train.model.name} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); run the "
            "quantization again"
        ) from None
    checkpoint = run.fp32_checkpoint()
    fp32 = None
    if checkpoint is not None:
        model.load_state_dict(load_state_dict(checkpoint))
        fp32 = model
    return QuantizedDetector(sim, fp32, dataset, checkpoint)


def detection_quant_run(ref: str, workspace):
    """The QuantRun (export/onnx_qdq.read_quant_run) of quantize run `ref` when it quantized a detector; None
    for any other run, or a ref that names none."""
    from workbench.task_ids import QUANT_TASK

    found = _task_and_spec(ref, workspace)
    if found is None:
        return None
    task, data = found
    source = (data.get("source") or {}).get("run") if isinstance(data.get("source"), dict) else None
    if task != QUANT_TASK or not source or not _trained_a_detector(str(source), workspace):
        return None
    from workbench.worker.export.onnx_qdq import read_quant_run

    return read_quant_run(ref, workspace)
