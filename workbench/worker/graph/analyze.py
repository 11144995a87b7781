"""One eager forward pass that measures a model per module: output shapes (forward hooks), parameters, and
FLOPs from torch.utils.flop_counter; it also records the calls of leaf modules, which the module-hierarchy
graph uses when torch.export cannot capture the model. Worker side; never imports Qt.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from workbench.errors import JobError
from workbench.results import as_dict

INPUT_SEED = 0


@dataclass
class ModuleStat:
    name: str  # the named_modules() name; "" is the model itself
    type: str  # the class's qualified name, e.g. torch.nn.modules.conv.Conv2d
    params: int
    params_trainable: int
    flops: int = 0  # this module and everything it calls, for one sample
    output_shape: list[int] | None = None  # per sample (the batch dimension dropped); None: never called
    calls: int = 0
    leaf: bool = True

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    def row(self) -> dict:
        return {
            "name": self.name,
            "type": self.short_type,
            "output_shape": self.output_shape,
            "params": self.params,
            "flops": self.flops,
            "leaf": self.leaf,
            "calls": self.calls,
        }


@dataclass
class LeafCall:
    """One call of a leaf module: which node made each of its inputs, in call order."""

    node_id: str
    module: str
    type: str
    output_shapes: list[list[int]]
    # node ids of the calls (or "input") its inputs came from
    sources: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    modules: list[ModuleStat]
    flops: int
    params_total: int
    params_trainable: int
    calls: list[LeafCall]
    input_shape: tuple[int, ...]
    output_source: str  # node id of the call that produced the model's output ("input" when none did)

    def stat(self, name: str) -> ModuleStat | None:
        return next((m for m in self.modules if m.name == name), None)


# A file: model's classes live in a module named after a hash of its path (workbench.worker.models.user_code);
# the hash means nothing to a reader, the class name does.
USER_MODULE = re.compile(r"\bworkbench_user_model_[0-9a-f]+\.")


def clean_type(name: str) -> str:
    return USER_MODULE.sub("", name)


def type_name(module: nn.Module) -> str:
    cls = type(module)
    return (
        cls.__qualname__
        if cls.__module__ == "builtins"
        else clean_type(f"{cls.__module__}.{cls.__qualname__}")
    )


def example_input(shape: Sequence[int]) -> torch.Tensor:
    """One sample of random data, the same on every run (zeros would hide data-dependent branches' shapes)."""
    generator = torch.Generator().manual_seed(INPUT_SEED)
    return torch.randn(1, *shape, generator=generator)


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    if hasattr(value, "logits"):  # torchvision's Inception/GoogLeNet outputs
        return _tensors(value.logits)
    return []


def _per_sample(t: torch.Tensor) -> list[int]:
    return list(t.shape[1:]) if t.dim() else []


def _where(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def analyze(
    model: nn.Module,
    inputs: Sequence[torch.Tensor],
    *,
    names: dict[str, str] | None = None,
    kwargs: dict[str, torch.Tensor] | None = None,
) -> Analysis:
    """Run `model` once on `inputs` (a batch of one; `kwargs` for a model that takes its inputs by name) and
    measure it; `names` overrides module type names (an unflattened ExportedProgram's modules are all
    InterpreterModule, their real types are in its metadata)."""
    kwargs = kwargs or {}
    named = list(model.named_modules())
    stats: dict[str, ModuleStat] = {}
    for name, module in named:
        params = list(module.parameters())
        stats[name] = ModuleStat(
            name,
            as_dict(names).get(name) or type_name(module),
            sum(p.numel() for p in params),
            sum(p.numel() for p in params if p.requires_grad),
            leaf=not any(True for _ in module.children()),
        )
    producers: dict[int, str] = {id(t): "input" for t in (*inputs, *kwargs.values())}
    # alive until the end, so no id() is reused mid-pass
    keep: list[torch.Tensor] = [*inputs, *kwargs.values()]
    calls: list[LeafCall] = []
    last = ["input"]

    def hook(name: str):
        def record(module, args, output):
            stat = stats[name]
            stat.calls += 1
            outs = _tensors(output)
            if stat.output_shape is None and outs:
                stat.output_shape = _per_sample(outs[0])
            if not stat.leaf:
                return
            base = name or "model"  # a model with no submodules is its own only leaf
            node_id = base if stat.calls == 1 else f"{base}#{stat.calls}"
            sources = []
            for t in _tensors(args):
                # A tensor no leaf made came from plain torch code between modules: the last call is the best
                # guess.
                source = producers.get(id(t), last[0])
                if source not in sources:
                    sources.append(source)
            calls.append(
                LeafCall(node_id, name, stat.type, [_per_sample(t) for t in outs], sources or [last[0]])
            )
            for t in outs:
                producers[id(t)] = node_id
                keep.append(t)
            last[0] = node_id

        return record

    handles = [module.register_forward_hook(hook(name)) for name, module in named]
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            output = model(*inputs, **kwargs)
    except JobError:
        raise
    except Exception as exc:
        from workbench.worker.models.build import input_advice, inputs_text

        first = (str(exc).splitlines() or [""])[0][:300]
        given = kwargs or (inputs[0] if len(inputs) == 1 else tuple(inputs))
        what = inputs_text(given).replace("inputs of shape", "an input of shape")
        raise JobError(
            f"the model cannot run on {what}: {type(exc).__name__}: {first}{_where(exc)}"
            f"{input_advice(exc, given)}"
        ) from None
    finally:
        for handle in handles:
            handle.remove()
    outs = _tensors(output)
    output_source = producers.get(id(outs[0]), last[0]) if outs else last[0]
    counts = counter.get_flop_counts()
    root_key = type(model).__name__
    for name, stat in stats.items():
        key = root_key if not name else f"{root_key}.{name}"
        stat.flops = int(sum(counts.get(key, {}).values()))
    total = int(counter.get_total_flops())
    # the root's own key misses ops a wrapper ran outside its forward; Global has them
    stats[""].flops = total
    unique = {id(p): p for p in model.parameters()}.values()  # a shared parameter counts once in the total
    first_input = next(iter((*inputs, *kwargs.values())), None)
    return Analysis(
        modules=list(stats.values()),
        flops=total,
        params_total=sum(p.numel() for p in unique),
        params_trainable=sum(p.numel() for p in unique if p.requires_grad),
        calls=calls,
        input_shape=tuple(first_input.shape[1:]) if first_input is not None else (),
        output_source=output_source,
    )
