"""Export of a model whose inputs are not one float tensor: token ids (int64), or a tuple or dict of tensors
from a user Dataset. The model is wrapped to take its inputs positionally, in a named order (the dict's keys,
else forward()'s parameter names), so ONNX keeps those names and dtypes, and parity feeds every input. Worker
side.
"""

from __future__ import annotations

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.export import formats, parity
from workbench.worker.inputs import Example, Positional, named_for
from workbench.worker.models import logits_of

SEQUENCE_MAX = 2**16  # the longest sequence a dynamic sequence axis admits


class Inputs(tuple):
    """A tuple of one batch's input tensors; .shape is the first one's (parity reports its batch size)."""

    @property
    def shape(self) -> torch.Size:
        return self[0].shape


def tensors_of(x) -> list[torch.Tensor]:
    return [torch.as_tensor(v) for v in (x.values() if isinstance(x, dict) else x)]


def _sequence_inputs(example: Example) -> list[bool]:
    """Which inputs carry a sequence axis (dimension 1): integer or boolean inputs of two dimensions or more
    (token ids, attention masks)."""
    return [t.dim() >= 2 and not t.is_floating_point() for t in example.tensors]


def dynamic_axes(spec) -> set[str]:
    """export.dynamic_axes, where empty: batch when dynamic_batch is on."""
    return set(spec.dynamic_axes) if spec.dynamic_axes else ({"batch"} if spec.dynamic_batch else set())


def _dims(example: Example, axes: set[str]):
    """torch.export's dynamic_shapes for forward(*inputs): one dict per input, sharing one Dim per axis."""
    if not axes:
        return None
    batch = formats.batch_dim() if "batch" in axes else None
    sequence = torch.export.Dim("sequence", min=2, max=SEQUENCE_MAX) if "sequence" in axes else None
    dims = []
    for has_sequence in _sequence_inputs(example):
        entry = {}
        if batch is not None:
            entry[0] = batch
        if sequence is not None and has_sequence:
            entry[1] = sequence
        dims.append(entry or None)
    return tuple(dims)


def export(spec, source, example: Example, out, ctx, device) -> tuple[dict, dict, nn.Module, Example]:
    """Write `out` for a model with named inputs; returns (format info, {input_names, input_shapes,
    input_dtypes, dynamic_axes}, the positional wrapper that was exported, the example it was exported
    with)."""
    example = named_for(example, source.model)
    names = example.names
    model = Positional(source.model, names, example.kind == "dict").to(device).eval()
    axes = dynamic_axes(spec)
    sized = example.batch(formats.example_batch("batch" in axes))
    args = tuple(t.to(device) for t in sized.tensors)
    dims = _dims(example, axes)
    if "sequence" in axes and not any(_sequence_inputs(example)):
        raise JobError(
            f"export.dynamic_axes: sequence applies to integer inputs of two dimensions or more (token "
            f"ids, masks), and this model's inputs are {example.describe()}; drop sequence"
        )
    named = {**example.summary(), "dynamic_axes": sorted(axes)}
    if spec.format == "torchscript":
        if spec.script and len(names) > 1:
            raise JobError(
                "format=torchscript: script=true compiles forward() alone, and this model takes several "
                f"inputs ({', '.join(names)}); use script=false or format=exported_program"
            )
        try:
            with formats.quiet(), torch.no_grad():
                traced = (
                    torch.jit.script(source.model)
                    if spec.script
                    else torch.jit.trace(model, args, check_trace=False)
                )
                torch.jit.save(traced, str(out))
        except Exception as exc:
            raise formats.export_failure(
                "torchscript", "torch.jit.script" if spec.script else "torch.jit.trace", exc
            ) from None
        info = {"exporter": "script" if spec.script else "trace"}
    elif spec.format == "exported_program":
        try:
            with formats.quiet():
                program = torch.export.export(model, args, dynamic_shapes=(dims,) if dims else None)
                torch.export.save(program, str(out))
        except Exception as exc:
            raise formats.export_failure("exported_program", "torch.export", exc) from None
        info = {"exporter": "torch.export"}
    elif spec.format == "onnx":
        # As a float model's: the torch.export-based exporter, and where it fails the TorchScript-based one.
        with torch.no_grad():
            info = formats.write_onnx(
                model,
                args,
                out,
                opset=spec.opset,
                dynamic_batch="batch" in axes,
                log=ctx.log,
                output_names=["output"],
                input_names=names,
                dynamic_shapes=(dims,) if dims else None,  # forward(*args): one entry
                sequence_inputs=[n for n, s in zip(names, _sequence_inputs(example)) if s]
                if "sequence" in axes
                else None,
            )
    else:
        raise JobError(
            f"format={spec.format}: models whose inputs are {example.describe()} are not supported yet; "
            "use format=onnx, exported_program or torchscript"
        )
    return info, named, model, example


def runner(fmt: str, path, device):
    """The exported file as a callable on Inputs."""
    if fmt == "onnx":
        session = formats.onnx_session(path, device)
        names = [i.name for i in session.get_inputs()]

        def run(x):
            feed = {n: t.detach().cpu().numpy() for n, t in zip(names, x)}
            return torch.from_numpy(session.run(None, feed)[0])

        return run
    if fmt == "torchscript":
        module = formats.load_torchscript(path, device)
    else:
        module = formats.load_exported_program(path)
    return lambda x: module(*(t.to(device) for t in x))


def real_batches(dataset, limit: int, group: int, ctx) -> list[tuple[str, Inputs]]:
    """Up to `limit` real samples of the loaded dataset (its test split, else validation, else train),
    regrouped per input into batches of `group`."""
    if dataset is None:
        ctx.log(
            "no real samples for the parity check (the dataset cannot be read); random inputs only", "warning"
        )
        return []
    try:
        name = next((n for n in ("test", "val", "train") if len(dataset.splits[n])), "train")
        split = dataset.splits[name]
        count = min(limit, len(split))
        samples = [tensors_of(_as_tuple(split.sample(i)[0])) for i in range(count)]
    except (JobError, AttributeError, KeyError) as exc:
        ctx.log(f"no real samples for the parity check ({exc}); random inputs only", "warning")
        return []
    out = []
    for i in range(0, count, group):
        chunk = samples[i : i + group]
        out.append(
            (
                f"samples {i}..{i + len(chunk) - 1} of the {name} split",
                Inputs(torch.stack(list(c)) for c in zip(*chunk)),
            )
        )
    return out


def _as_tuple(x):
    return x if isinstance(x, (tuple, list, dict)) else (x,)


def check_parity(spec, source, model, example: Example, out, device, ctx) -> dict:
    """Every input fed to both eager and exported: random batches typed like the example (integer inputs drawn
    from the data's observed range), the float inputs scaled and shifted, and real samples."""
    generator = torch.Generator().manual_seed(parity.SEED)
    axes = dynamic_axes(spec)
    batches = list(parity.RANDOM_BATCHES) if "batch" in axes else [1]
    inputs = [(f"random batch of {b}", Inputs(example.random(b, generator).tensors)) for b in batches]
    # Other distributions than the example's (a frozen branch shows there): its float inputs scaled and
    # shifted, integer ones (token ids) as they are.
    base = example.random(batches[-1], generator)
    if any(t.is_floating_point() for t in example.tensors):
        for label, change in (
            (f"scaled x{parity.SCALE:g}", lambda t: t * parity.SCALE),
            (f"shifted by +{parity.SHIFT:g}", lambda t: t + parity.SHIFT),
        ):
            inputs.append(
                (f"random batch of {batches[-1]} {label}", Inputs(base.floats_changed(change).tensors))
            )
    if "sequence" in axes:  # a shorter sequence than the example's, where the export lets it vary
        sequence = _sequence_inputs(example)
        length = max(2, example.tensors[sequence.index(True)].shape[1] // 2)
        short = [t[:, :length] if s else t for t, s in zip(base.tensors, sequence)]
        inputs.append((f"random batch of {batches[-1]} at sequence length {length}", Inputs(short)))
    real = real_batches(source.loaded, spec.parity_samples, 7 if "batch" in axes else 1, ctx)
    count = sum(len(x[0]) for _, x in real)

    def eager(x):
        with torch.no_grad():
            return logits_of(model(*(t.to(device) for t in x)))

    checked = parity.check(eager, runner(spec.format, out, device), inputs + real, parity.FP32)
    return {
        **parity.finish(checked, batches, count),
        "first_divergent_layer_reason": "parity passed"
        if checked["passed"]
        else "the layer search takes models with one float input",
    }
