"""Quantizing a detector, detection-aware: its backbone, neck and head convolutions and linear layers are
quantized (weights and outputs, each its own quantizer, so the box-regression and class outputs never share a
range), while anchor generation, box decode and NMS stay float (module by module: no functional op is
quantized). The ladder measures COCO mAP (pycocotools) on the held-out split; the quantized detector is saved
as every quantize run's is. Worker side; never imports Qt."""

from __future__ import annotations

import math
import time

import torch

from workbench.worker.data.detection.records import Item
from workbench.worker.objectives import detection as coco
from workbench.worker.quant import module_level
from workbench.worker.quant.pipeline import Ladder
from workbench.worker.quant.sim import QuantSim

CALIBRATION_IMAGES = 32  # a detector's forward on a CPU is slow: at most this many calibration images
HELD_OUT_IMAGES = 64  # and at most this many held-out images per rung
BATCH = 4
FLOAT_PARTS = {
    "anchor_generator": "anchor generation",
    "box_coder": "box decode",
    "nms": "NMS",
    "transform": "resize and normalise (GeneralizedRCNNTransform)",
}


def first_images(split, count: int) -> list[tuple[torch.Tensor, dict]]:
    return [split[i] for i in range(min(count, len(split)))]


def ground_truth_of(samples, dataset) -> dict:
    """The COCO ground truth of (image, target) samples, from the samples themselves (read once)."""
    items = [Item.of_sample(t["image_id"], image, t) for image, t in samples]
    return coco.ground_truth(items, dataset.classes, dataset.category_ids)


@torch.no_grad()
def measure_map(model, samples, gt: dict, dataset, check_stop, device) -> dict:
    """COCO mAP of `model` (the detector or its simulation) on (image, target) samples whose ground truth is
    `gt`."""
    ids, outputs = [], []
    for start in range(0, len(samples), BATCH):
        check_stop()
        chunk = samples[start : start + BATCH]
        out = model([image.to(device) for image, _ in chunk])
        outputs += [{k: v.detach().cpu() for k, v in o.items()} for o in out]
        ids += [int(target["image_id"]) for _, target in chunk]
    found = coco.evaluate(gt, coco.predictions(ids, outputs, dataset.category_ids), dataset.classes)
    return {"accuracy": found["metrics"]["map"], "loss": math.nan, "metrics": found["metrics"]}


def float_parts(model) -> list[dict]:
    """What of the detector stays float, as the coverage's "float" entries ({type, modules, parameters,
    reason}): its transform, anchor generator, box coders and NMS."""
    found: dict[str, list[str]] = {}
    for name, module in model.named_modules():
        for key, said in FLOAT_PARTS.items():
            if name.endswith(key):
                found.setdefault(said, []).append(name)
        if getattr(module, "box_coder", None) is not None:
            found.setdefault("box decode", []).append(f"{name}.box_coder" if name else "box_coder")
    found.setdefault("NMS", []).append("torchvision.ops.batched_nms")
    return [
        {
            "type": said,
            "modules": ", ".join(names),
            "parameters": 0,
            "reason": "detection-aware: the post-processing stays float",
        }
        for said, names in found.items()
    ]


def _save(sim, ctx, trained, checkpoint) -> dict:
    """The quantized detector (its weights, scales and zero points) in the run's artifacts/, as every quantize
    run keeps it: Try it shows it beside the FP32 one and the onnx_qdq export writes it."""
    from workbench.worker.quant import artifacts

    folder = ctx.run.artifacts_dir
    folder.mkdir(parents=True, exist_ok=True)
    weights, params = artifacts.save_quantized(
        sim, folder, model_spec=trained.model.to_dict(), checkpoint=str(checkpoint)
    )
    ctx.artifact("quantized weights", weights, kind="state_dict")
    ctx.artifact("quantization parameters", params, kind="quant_params")
    return {"weights": str(weights), "params": str(params)}


def run_detection_quantization(spec, ctx, trained, train_dir) -> dict:
    """The quant.analyze job for a detection run: fp32, weights-only and W8A8 rungs, each measured by mAP."""
    from workbench.worker.detection_source import held_out_split, load_detection_run
    from workbench.worker.devices import resolve_device

    started = time.perf_counter()
    device = resolve_device(spec.device)
    source = load_detection_run(train_dir, trained, ctx, device)
    model, dataset, checkpoint = source.model, source.dataset, source.checkpoint
    held_split = held_out_split(dataset)
    held_out = first_images(dataset.splits[held_split], HELD_OUT_IMAGES)
    truth = ground_truth_of(held_out, dataset)
    calibration = first_images(dataset.splits["train"], min(spec.calibration.samples, CALIBRATION_IMAGES))
    metric = {
        "name": coco.MONITOR,
        "label": f"{held_split} mAP",
        "split": held_split,
        "higher_is_better": True,
    }
    steps = ["fp32", "weight_ranges", "activation_ranges"]
    ladder = Ladder(ctx, steps, metric)
    ctx.log(
        f"quantizing the detector {trained.model.name} module by module: its convolutions and linear layers "
        f"(each output its own quantizer, so box and class outputs never share a range); measuring "
        f"{metric['label']} ↑ on {len(held_out)} image(s), calibrating on {len(calibration)}"
    )

    def check_stop():
        ctx.check_stop()

    def rung(step: str, network, k: int) -> dict:
        ctx.progress(k, len(steps) + 1, f"measuring {step}", force=True)
        result = measure_map(network, held_out, truth, dataset, check_stop, device)
        ladder.add(step, result)
        return result

    fp32 = rung("fp32", model, 0)
    gm = module_level.prepare(model)
    example = ([image.to(device) for image, _ in calibration[:2]],)
    structure, ops = module_level.find_structure(gm, example)
    sim = QuantSim(gm, structure, {}, weights=spec.weights, activations=spec.activations)
    sim.to(device)
    sim.set_weight_ranges(check_stop)
    sim.all(activations=False)
    rung("weight_ranges", sim, 1)
    batches = [
        (([image.to(device) for image, _ in calibration[s : s + BATCH]],), None)
        for s in range(0, len(calibration), BATCH)
    ]
    sim.calibrate(batches, seed=spec.calibration.seed, check_stop=check_stop)
    sim.all()
    quantized = rung("activation_ranges", sim, 2)
    kept_float = float_parts(model)
    quantized_params = sum(layer.module.weight.numel() for layer in structure.layers.values())
    total = sum(p.numel() for p in model.parameters())
    coverage = {
        "parameters": quantized_params / total if total else 0.0,
        "layers": len(structure.layers),
        "float": kept_float,
        "float_ops": [{"op": op, "calls": n} for op, n in ops[:12]],
    }
    floating = ", ".join(f"{entry['type']} ({entry['modules']})" for entry in kept_float)
    ctx.log(
        f"{coverage['parameters']:.1%} of the detector's parameters are quantized ({len(structure.layers)} "
        f"layers); float: {floating}"
    )
    saved = _save(sim, ctx, trained, checkpoint)
    ctx.progress(len(steps) + 1, len(steps) + 1, "done", force=True)
    return {
        "fp32": {"accuracy": fp32["accuracy"], "loss": None, "metrics": fp32["metrics"]},
        "quantized": {
            "accuracy": quantized["accuracy"],
            "loss": None,
            "logit_sqnr_db": None,
            "metrics": quantized["metrics"],
        },
        "steps": [{**s, "loss": None} for s in ladder.steps],
        "layers": [],
        "coverage": coverage,
        "module_level": {
            "reason": "a detector: its post-processing stays float",
            "float_ops": coverage["float_ops"],
        },
        "metric": metric,
        "task": "detection",
        "source": {"run": str(train_dir), "checkpoint": str(checkpoint), "model": trained.model.name},
        "device": str(device),
        "calibration": {"samples": len(calibration), "seed": spec.calibration.seed},
        "held_out": {"samples": len(held_out), "split": f"{held_split} split"},
        "artifacts": saved,
        "elapsed_analysis_s": round(time.perf_counter() - started, 3),
    }
