"""Export of a model with several inputs (issue #20): a user Dataset whose input is a tuple or dict of tensors.
The model is wrapped to take its inputs positionally, in a named order (the dict's keys, else forward()'s parameter
names), so ONNX keeps those names and parity feeds every input. Worker side; never imports Qt.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from workbench.errors import JobError
from workbench.worker.export import formats, parity
from workbench.worker.models import logits_of


class Inputs(tuple):
    """A tuple of one batch's input tensors; .shape is the first one's (parity reports its batch size)."""

    @property
    def shape(self) -> torch.Size:
        return self[0].shape


class Positional(nn.Module):
    """model(**dict(zip(names, args))) for a dict input, model(*args) for a tuple: one positional signature."""

    def __init__(self, model: nn.Module, names: list[str], keyed: bool):
        super().__init__()
        self.model, self.names, self.keyed = model, list(names), keyed

    def forward(self, *args):
        if self.keyed:
            return self.model(**dict(zip(self.names, args)))
        return self.model(*args)


def user_dataset(dataset_spec, ctx):
    """The run's user Dataset (`file:`), loaded once so every later step reuses it; None for the built-in sets or
    when it cannot be read (the steps that need it then say why)."""
    if dataset_spec is None or not dataset_spec.name.startswith("file:"):
        return None
    from workbench.worker.data import load_dataset

    try:
        return load_dataset(dataset_spec, ctx=ctx)
    except JobError:
        return None


def several_inputs(dataset):
    """A loaded user dataset's first input when it is a tuple or dict of tensors; else None (one tensor)."""
    if dataset is None:
        return None
    from workbench.worker.training.task import first_input as dataset_first_input

    try:
        x = dataset_first_input(dataset)
    except JobError:
        return None
    return x if isinstance(x, (tuple, list, dict)) else None


def input_names(model: nn.Module, x) -> list[str]:
    """The dict's keys, else forward()'s positional parameter names (input_<i> past them)."""
    if isinstance(x, dict):
        return [str(k) for k in x]
    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input_{i}" for i in range(len(x))]


def tensors_of(x) -> list[torch.Tensor]:
    return [torch.as_tensor(v) for v in (x.values() if isinstance(x, dict) else x)]


def random_batch(samples: list[torch.Tensor], batch: int, generator: torch.Generator) -> Inputs:
    """Random inputs shaped and typed like the example's: integers (token ids, say) within its observed range."""
    out = []
    for t in samples:
        if t.is_floating_point():
            out.append(torch.randn(batch, *t.shape, generator=generator).to(t.dtype))
        else:
            low, high = int(t.min()), int(t.max())
            out.append(torch.randint(low, high + 1, (batch, *t.shape), generator=generator).to(t.dtype))
    return Inputs(out)


def real_batches(dataset, limit: int, group: int, ctx) -> list[tuple[str, Inputs]]:
    """Up to `limit` real samples of the loaded dataset's train split, regrouped per input into batches of
    `group`."""
    if dataset is None:
        ctx.log("no real samples for the parity check (the dataset cannot be read); random inputs only", "warning")
        return []
    try:
        split = dataset.splits["train"]
        count = min(limit, len(split))
        samples = [tensors_of(split.sample(i)[0]) for i in range(count)]
    except (JobError, AttributeError, KeyError) as exc:
        ctx.log(f"no real samples for the parity check ({exc}); random inputs only", "warning")
        return []
    out = []
    for i in range(0, count, group):
        chunk = samples[i:i + group]
        out.append((f"samples {i}..{i + len(chunk) - 1}", Inputs(torch.stack(list(c)) for c in zip(*chunk))))
    return out


def export(spec, source, example, out, ctx, device) -> tuple[dict, dict, nn.Module, list[torch.Tensor]]:
    """Write `out` for a multi-input model; returns (format info, {input_names, input_shapes}, the positional
    wrapper that was exported, one sample per input)."""
    names = input_names(source.model, example)
    model = Positional(source.model, names, isinstance(example, dict)).to(device).eval()
    samples = tensors_of(example)
    batch = formats.example_batch(spec.dynamic_batch)
    args = tuple(torch.stack([t] * batch).to(device) for t in samples)
    shapes = {name: list(t.shape) for name, t in zip(names, samples)}
    dims = tuple({0: formats.batch_dim()} for _ in args) if spec.dynamic_batch else None
    if spec.format == "torchscript":
        if spec.script:
            raise JobError("format=torchscript: script=true compiles forward() alone, and this model takes several "
                           f"inputs ({', '.join(names)}); use script=false or format=exported_program")
        try:
            with formats.quiet(), torch.no_grad():
                torch.jit.save(torch.jit.trace(model, args, check_trace=False), str(out))
        except Exception as exc:
            raise formats.export_failure("torchscript", "torch.jit.trace", exc) from None
        info = {"exporter": "trace"}
    elif spec.format == "exported_program":
        try:
            with formats.quiet():
                program = torch.export.export(model, args, dynamic_shapes=(dims,) if dims else None)
                torch.export.save(program, str(out))
        except Exception as exc:
            raise formats.export_failure("exported_program", "torch.export", exc) from None
        info = {"exporter": "torch.export"}
    elif spec.format == "onnx":
        # As a one-input model's: the torch.export-based exporter, and where it fails the TorchScript-based one.
        with torch.no_grad():
            info = formats.write_onnx(model, args, out, opset=spec.opset, dynamic_batch=spec.dynamic_batch,
                                      log=ctx.log, output_names=["output"], input_names=names,
                                      dynamic_shapes=(dims,) if dims else None)  # forward(*args): one entry
    else:
        raise JobError(f"format={spec.format}: models with several inputs ({', '.join(names)}) are not supported "
                       "yet; use format=onnx, exported_program or torchscript")
    return info, {"input_names": names, "input_shapes": shapes}, model, samples


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


def check_parity(spec, source, model, samples, out, device, ctx) -> dict:
    """Every input fed to both eager and exported: random batches typed like the example, and real samples."""
    generator = torch.Generator().manual_seed(parity.SEED)
    batches = list(parity.RANDOM_BATCHES) if spec.dynamic_batch else [1]
    inputs = [(f"random batch of {b}", random_batch(samples, b, generator)) for b in batches]
    # Other distributions than the example's (a frozen branch shows there): its float inputs scaled and shifted,
    # integer ones (token ids) as they are.
    base = random_batch(samples, batches[-1], generator)
    for label, change in ((f"scaled x{parity.SCALE:g}", lambda t: t * parity.SCALE),
                          (f"shifted by +{parity.SHIFT:g}", lambda t: t + parity.SHIFT)):
        inputs.append((f"random batch of {batches[-1]} {label}",
                       Inputs(change(t) if t.is_floating_point() else t for t in base)))
    real = real_batches(source.loaded, spec.parity_samples, 7 if spec.dynamic_batch else 1, ctx)
    count = sum(len(x[0]) for _, x in real)

    def eager(x):
        with torch.no_grad():
            return logits_of(model(*(t.to(device) for t in x)))

    checked = parity.check(eager, runner(spec.format, out, device), inputs + real, parity.FP32)
    return {**parity.finish(checked, batches, count), "first_divergent_layer_reason":
            "parity passed" if checked["passed"] else "the layer search takes models with one input"}
