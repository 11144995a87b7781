"""What every export job shares around its parity check, and the constants the export jobs name alike: the
inputs parity runs (random batches, real samples), the result of a skipped check, and its log line. Both the
float export (engine.py) and the QDQ export (qdq_job.py) import it; neither imports the other's helpers.
Worker side.
"""

from __future__ import annotations

import torch

from workbench.errors import JobError
from workbench.specs import ExportSpec
from workbench.worker.export import parity

STEPS = 4  # load, export, parity, done
FILE_NAMES = {
    "torchscript": ("model.pt", (".pt", ".pth", ".ts")),
    "exported_program": ("model.pt2", (".pt2",)),
    "onnx": ("model.onnx", (".onnx",)),
    "onnx_qdq": ("model_qdq.onnx", (".onnx",)),
    "tensorrt": ("model_tensorrt.pt2", (".pt2", ".ep")),
}
EVAL_BATCH = 256


def parity_inputs(
    spec: ExportSpec, shape: tuple[int, ...], dataset_spec, ctx, loaded=None, example=None
) -> tuple[list, list[int], int, int]:
    """(inputs, random batch sizes, real samples, extra random samples): random batches of 1 and 7 (1 only for
    a fixed batch), and up to parity_samples real test samples (random ones where there is no data). `loaded`
    is the dataset already loaded from dataset_spec, if any. `example` (an inputs.Example of one integer
    tensor, token ids) makes the random inputs integers within the data's observed range, and leaves out the
    scaled and shifted batches, which apply to floating inputs only."""
    batches = list(parity.RANDOM_BATCHES) if spec.dynamic_batch else [1]
    if example is not None and not example.single:
        generator = torch.Generator().manual_seed(parity.SEED)
        inputs = [(f"random batch {b}", example.random(b, generator).tensors[0]) for b in batches]
        real = (
            _real_samples(
                dataset_spec,
                example.sample_shape,
                spec.parity_samples,
                7 if spec.dynamic_batch else 1,
                ctx,
                loaded,
            )
            if dataset_spec is not None
            else []
        )
        samples = sum(len(x) for _, x in real)
        if real:
            return inputs + real, batches, samples, 0
        drawn = example.random(spec.parity_samples, generator).tensors[0]
        group = 7 if spec.dynamic_batch else 1
        real = [
            (f"random samples {i}..{i + len(drawn[i : i + group]) - 1}", drawn[i : i + group])
            for i in range(0, len(drawn), group)
        ]
        return inputs + real, batches, 0, len(drawn)
    inputs = parity.random_inputs(shape, batches) + parity.distribution_inputs(shape, batches[-1])
    group = 7 if spec.dynamic_batch else 1
    real = (
        _real_samples(dataset_spec, shape, spec.parity_samples, group, ctx, loaded)
        if dataset_spec is not None
        else []
    )
    samples = sum(len(x) for _, x in real)
    extra = 0
    if not real:
        generator = torch.Generator().manual_seed(parity.SEED + 1)
        count = spec.parity_samples
        flat = torch.randn(count, *shape, generator=generator)
        real = [
            (f"random samples {i}..{i + len(c) - 1}", c)
            for i, c in ((i, flat[i : i + group]) for i in range(0, count, group))
        ]
        extra = count
    return inputs + real, batches, samples, extra


def _real_samples(dataset_spec, shape, limit: int, group: int, ctx, loaded=None) -> list:
    from workbench.worker.data import load_dataset
    from workbench.worker.quant.data import held_out_batches

    try:
        dataset = loaded if loaded is not None else load_dataset(dataset_spec, ctx=ctx)
        if tuple(dataset.sample_shape) != tuple(shape):
            ctx.log(
                f"dataset {dataset_spec.name} gives samples of shape "
                f"{','.join(map(str, dataset.sample_shape))}, not the model's {','.join(map(str, shape))}: "
                "parity runs on random inputs only",
                "warning",
            )
            return []
        batches = held_out_batches(dataset, limit, batch_size=max(group, 64), device=torch.device("cpu"))
        return parity.sample_inputs(batches, limit, group)
    except JobError as exc:
        ctx.log(f"no real samples for the parity check ({exc}); random inputs only", "warning")
        return []


def skipped() -> dict:
    return {"skipped": True, "passed": None, "reason": "verify=false"}


def log_parity(ctx, result: dict) -> None:
    worst = result["max_abs_diff"]
    worst_text = "inf" if worst is None else f"{worst:.3g}"
    if result["passed"]:
        samples = (
            f"{result['samples']} test samples"
            if result["samples"]
            else f"{result.get('random_samples', 0)} random samples (no data)"
        )
        ctx.log(
            f"parity: max |diff| {worst_text} within {result['tolerance']:.3g} on random batches of "
            f"{' and '.join(map(str, result['batches']))} and {samples}"
        )
        return
    layer = result.get("first_divergent_layer")
    ctx.log(
        f"parity FAILED: max |diff| {worst_text} exceeds {result['tolerance']:.3g}"
        + (
            f"; first divergent layer: {layer}"
            if layer
            else f"; {result.get('first_divergent_layer_reason', '')}"
        ),
        "warning",
    )
