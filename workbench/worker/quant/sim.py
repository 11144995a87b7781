"""QuantSim: the quantization-simulation model. A traced copy of the network with an activation quantizer
module after each activation point and a weight quantizer per conv/linear layer, each switched on or off per
group (a layer's weights and its output, or a lone activation point), so one model serves the whole pipeline,
the per-layer analysis and the sensitivity sweeps. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch import nn

from workbench.errors import JobError
from workbench.worker.models.build import call_model
from workbench.worker.quant import module_level
from workbench.worker.quant.channels import ChannelExtremes, channel_dim
from workbench.worker.quant.graph import (
    BATCHNORMS,
    TRANSPOSED,
    Structure,
    bn_stats,
    is_plain_relu,
    module_of,
    quantized_input,
    weight_axis,
)
from workbench.worker.quant.histogram import StreamingHistogram
from workbench.worker.quant.quantizer import (
    Grid,
    QParams,
    bias_codes,
    dequantize,
    fake_quant,
    qparams_from_range,
    quantize,
)
from workbench.worker.quant.ranges import Observed, estimate, get_range_estimator


@contextlib.contextmanager
def one_thread(device) -> Iterator[None]:
    """Run torch's CPU ops on one thread inside: range searches and error measures are thousands of
    memory-bound element-wise ops, and on a loaded 2-core machine each multi-threaded op waited for a
    descheduled partner thread (measured: a per-channel MSE search of a 512x4608 weight took 7.9 s on two
    threads, 0.6 s on one)."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def parallel_map(fn: Callable, items: Iterable, device, check_stop: Callable[[], None] | None = None) -> list:
    """[fn(item) for item in items], spread over as many Python threads as torch has CPU threads, each running
    its torch ops on one thread (one_thread): tensors are searched side by side instead of each op splitting
    across cores, so a busy core delays one tensor, not every op. Off the CPU it runs in order."""
    items = list(items)
    workers = torch.get_num_threads() if torch.device(device).type == "cpu" else 1
    with one_thread(device):
        if workers <= 1 or len(items) <= 1:
            results = []
            for item in items:
                if check_stop is not None:
                    check_stop()
                results.append(fn(item))
            return results
        with ThreadPoolExecutor(workers, thread_name_prefix="quant-ranges") as pool:
            futures = [pool.submit(fn, item) for item in items]
            try:
                results = []
                for future in futures:
                    if check_stop is not None:
                        check_stop()
                    results.append(future.result())
                return results
            except BaseException:
                for future in futures:
                    future.cancel()
                raise


SAMPLE_CAP = 2**17  # activation values kept per tensor (a random sample) for ranges, histograms and errors


class Observer:
    """Running extremes and a seeded random sample of the values of one tensor over the calibration batches
    (for the histograms and errors the analysis shows, and the percentile range); with `histogram`, every
    value in a fine streaming histogram (the MSE range searches all of them); all rows as well for logits (the
    cross-entropy range needs whole samples). With `channels` (the dimension holding a layer output's
    channels), each channel's extremes too."""

    def __init__(
        self,
        batches: int,
        seed: int,
        keep_rows: bool,
        cap: int = SAMPLE_CAP,
        histogram: bool = False,
        channels: int | None = None,
    ):
        self.per_batch = max(1, math.ceil(cap / max(batches, 1)))
        self.generator = torch.Generator().manual_seed(seed)
        self.keep_rows = keep_rows
        self.histogram = StreamingHistogram() if histogram else None
        self.lows: list[torch.Tensor] = []
        self.highs: list[torch.Tensor] = []
        self.samples: list[torch.Tensor] = []
        self.rows: list[torch.Tensor] = []
        self.channels = ChannelExtremes(channels) if channels is not None else None

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.detach().float()
        if self.channels is not None:
            self.channels.update(x)
        low, high = torch.aminmax(x)  # one pass for both
        # Extremes stay on the device until the end: one host sync per tensor, not per batch (the histogram,
        # which needs them now, is the exception).
        self.lows.append(low.reshape(1))
        self.highs.append(high.reshape(1))
        flat = x.reshape(-1)
        if self.histogram is not None:
            self.histogram.update(flat, (float(low), float(high)))
        if flat.numel() > self.per_batch:
            index = torch.randint(0, flat.numel(), (self.per_batch,), generator=self.generator).to(
                flat.device
            )
            flat = flat[index]
        self.samples.append(flat.cpu())
        if self.keep_rows and x.dim() == 2:
            self.rows.append(x.cpu())

    def observed(self) -> Observed:
        if not self.samples:
            raise JobError("no calibration data reached an activation quantizer")
        values = torch.cat(self.samples).reshape(1, -1)
        lo = torch.cat(self.lows).min().cpu().reshape(1)
        hi = torch.cat(self.highs).max().cpu().reshape(1)
        histogram = None
        if self.histogram is not None:
            centroids, counts = self.histogram.centroids()
            histogram = (centroids.reshape(1, -1), counts.reshape(1, -1))
        observed = Observed(
            values, lo, hi, logits=torch.cat(self.rows) if self.rows else None, histogram=histogram
        )
        if self.channels is not None and self.channels.lo is not None:
            observed.channel_lo, observed.channel_hi = self.channels.lo.cpu(), self.channels.hi.cpu()
        return observed


class ActQuant(nn.Module):
    """An activation quantizer in the graph: passes values through, observes them, fake-quantizes them, and
    shows them to a tap (the per-layer analysis), as it is told. Holds no parameters or buffers, so the
    simulation model's state_dict stays the network's own."""

    is_quantizer = True  # graph walks (analytical bias correction) look past it

    def __init__(self, name: str):
        super().__init__()
        self.point = name
        self.qp: QParams | None = None
        self.enabled = False
        self.observer: Observer | None = None
        self.tap: Callable[[str, torch.Tensor], None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            return x  # integers (token ids, masks) are never fake-quantized: they would become other integers
        if self.observer is not None:
            self.observer.update(x)
        if self.enabled and self.qp is not None:
            x = fake_quant(x, self.qp)
        if self.tap is not None:
            self.tap(self.point, x)
        return x


@dataclass
class WeightQuant:
    """A layer's weight quantizer: the FP32 weights it started from, its grid and range, the integer codes
    (nearest rounding or AdaRound's), and the bias used when quantized (bias correction moves it)."""

    layer: str
    module: nn.Module
    w_fp: torch.Tensor
    b_fp: torch.Tensor | None
    grid: Grid
    per_channel: bool
    method: str
    percentile: float
    qp: QParams | None = None
    codes: torch.Tensor | None = None
    b_q: torch.Tensor | None = None
    rounding: str = "nearest"
    ranges: dict = field(default_factory=dict)  # method -> (lo, hi), each estimated once
    axis: int = 0  # the weight's output-channel axis, which per-channel quantization runs along

    def observed(self) -> Observed:
        return Observed.of_weight(self.w_fp, self.per_channel, self.axis)

    def range_of(self, method: str, grid: Grid | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        grid = grid or self.grid
        key = (method, grid)
        if key not in self.ranges:
            self.ranges[key] = estimate(method, self.observed(), grid, self.percentile)
        return self.ranges[key]

    def set_range(self, grid: Grid | None = None) -> None:
        """Choose the range with this quantizer's method and round to nearest."""
        self.grid = grid or self.grid
        lo, hi = self.range_of(self.method)
        axis = self.axis if self.per_channel else None
        lo, hi = (lo, hi) if self.per_channel else (lo[0], hi[0])
        self.qp = qparams_from_range(lo, hi, self.grid, axis).to(self.w_fp.device)
        self.codes = quantize(self.w_fp, self.qp)
        self.rounding = "nearest"
        self.b_q = None if self.b_fp is None else self.b_fp.clone()

    @property
    def w_q(self) -> torch.Tensor:
        return dequantize(self.codes, self.qp)

    def output_scale(self) -> torch.Tensor:
        """The weight scale of each output channel (0-d per tensor): a grouped transposed conv's per-channel
        scales run along out / groups, and group g's output channel g * (out / groups) + j uses scale j."""
        scale = self.qp.scale
        groups = getattr(self.module, "groups", 1)
        if scale.dim() and isinstance(self.module, TRANSPOSED) and groups > 1:
            return scale.repeat(groups)
        return scale

    def size_bytes(self) -> int:
        bias = 0 if self.b_fp is None else self.b_fp.numel() * 4  # int32 biases, as int8 kernels keep them
        return math.ceil(self.w_fp.numel() * self.grid.bits / 8) + bias


@dataclass
class PointState:
    """An activation point's quantizer settings and what calibration saw of it."""

    name: str
    module: ActQuant
    bits: int
    observed: Observed | None = None
    method: str = ""
    grid: Grid | None = None
    bn: tuple[torch.Tensor, torch.Tensor] | None = None
    relu: bool = False
    logits: bool = False
    ranges: dict = field(default_factory=dict)  # (method, grid) -> (lo, hi), each estimated once


class QuantSim:
    """The simulation model over a folded (and perhaps equalised) traced network."""

    def __init__(
        self,
        gm: fx.GraphModule | nn.Module,
        structure: Structure,
        folded: dict[str, dict],
        *,
        weights,
        activations,
        bits: dict[str, int] | None = None,
    ):
        self.gm = gm
        self.structure = structure
        self.folded = folded
        self.weight_spec = weights
        self.act_spec = activations
        self.bits = dict(bits or {})
        unknown = sorted(set(self.bits) - set(structure.groups))
        if unknown:
            raise JobError(
                f"mixed_precision.layers: {', '.join(map(repr, unknown))} is not a layer of this model; "
                f"the layers are: {', '.join(structure.groups)}"
            )
        self.weights: dict[str, WeightQuant] = {}
        for name, layer in structure.layers.items():
            module = layer.module
            grid = Grid.for_weights(self.bits.get(name, weights.bits), weights.symmetric, weights.restricted)
            bias = getattr(module, "bias", None)  # an embedding has none
            self.weights[name] = WeightQuant(
                name,
                module,
                module.weight.detach().clone(),
                None if bias is None else bias.detach().clone(),
                grid,
                weights.granularity == "per_channel",
                weights.range,
                weights.percentile,
                axis=weight_axis(module),
            )
        self.points: dict[str, PointState] = {}
        for name, point in structure.points.items():
            state = PointState(
                name,
                ActQuant(name),
                self.bits.get(name, activations.bits),
                relu=point.relu,
                logits=point.logits,
            )
            layer = structure.layers.get(point.layer) if point.layer else None
            if layer is not None and self._bn_then_relu(layer):
                state.bn = bn_stats(gm, layer, folded)
            self.points[name] = state
        quantizers = {name: state.module for name, state in self.points.items()}
        if structure.traced:
            self._insert(quantizers)
            # layer -> the point whose quantizer feeds it: with both quantized, its bias is int32 as deployed.
            self.bias_inputs = {
                name: point
                for name, layer in structure.layers.items()
                if (point := quantized_input(gm, layer.node)) is not None
            }
        else:
            # Hooks on each layer; with no graph, no layer is known to take quantized input, so biases stay
            # float.
            module_level.attach(gm, structure, quantizers)
            self.bias_inputs = {}
        self._weights_on: set[str] = set()
        self._acts_on: set[str] = set()

    def _insert(self, quantizers: dict[str, ActQuant]) -> None:
        """Put each point's quantizer into the traced graph right after the node it follows."""
        gm = self.gm
        for i, (name, quantizer) in enumerate(quantizers.items()):
            point = self.structure.points[name]
            target = f"_quant_act_{i}"
            gm.add_submodule(target, quantizer)
            with gm.graph.inserting_after(point.node):
                new = gm.graph.call_module(target, (point.node,))
            point.node.replace_all_uses_with(new)
            new.args = (point.node,)
        gm.graph.lint()
        gm.recompile()

    def _bn_then_relu(self, layer) -> bool:
        # BN-based ranges hold for a BatchNorm's output and its ReLU, not after other activation functions.
        return all(
            isinstance(module_of(self.gm, node), BATCHNORMS) or is_plain_relu(self.gm, node)
            for node in layer.tail
        )

    # -- what is quantized -----------------------------------------------------------------------------------
    @property
    def groups(self) -> list[str]:
        return self.structure.groups

    def set(self, weights: Iterable[str] = (), activations: Iterable[str] = ()) -> None:
        """Quantize exactly these layers' weights and these points' activations; the rest runs in FP32."""
        self._weights_on, self._acts_on = set(weights), set(activations)
        with torch.no_grad():
            for name, wq in self.weights.items():
                on = name in self._weights_on and wq.codes is not None
                wq.module.weight.copy_(wq.w_q if on else wq.w_fp)
                if wq.b_fp is not None:
                    wq.module.bias.copy_(self.bias_in_use(name) if on else wq.b_fp)
        for name, state in self.points.items():
            state.module.enabled = name in self._acts_on and state.module.qp is not None

    def bias_input_scale(self, name: str) -> torch.Tensor | None:
        """The scale of the quantizer that feeds layer `name`, where it is on (the layer's bias is then
        int32)."""
        point = self.bias_inputs.get(name)
        state = self.points.get(point) if point is not None else None
        if state is None or point not in self._acts_on or state.module.qp is None:
            return None
        return state.module.qp.scale

    def int32_bias_codes(self, name: str) -> tuple[torch.Tensor, torch.Tensor, bool] | None:
        """Layer `name`'s bias as int32 codes (codes, grid scale, whether any saturated) where quantized input
        feeds it, from the corrected bias if bias correction ran; None where its bias stays float."""
        wq = self.weights[name]
        bias = wq.b_q if wq.b_q is not None else wq.b_fp
        scale = self.bias_input_scale(name)
        if bias is None or scale is None or wq.qp is None:
            return None
        return bias_codes(bias, scale, wq.output_scale())

    def bias_in_use(self, name: str) -> torch.Tensor | None:
        """Layer `name`'s bias with its weights quantized: the corrected one if bias correction ran, on the
        int32 grid of input scale x weight scale where quantized input feeds it (an int8 kernel adds no
        other)."""
        found = self.int32_bias_codes(name)
        if found is None:
            wq = self.weights[name]
            return wq.b_q if wq.b_q is not None else wq.b_fp
        codes, scale, _ = found
        return codes * scale  # in float32, as DequantizeLinear computes it

    def saturated_biases(self) -> list[str]:
        """The layers whose int32 bias saturates as things are now quantized."""
        return [
            name
            for name in self.weights
            if name in self._weights_on and (found := self.int32_bias_codes(name)) is not None and found[2]
        ]

    def set_groups(self, groups: Iterable[str], *, weights: bool = True, activations: bool = True) -> None:
        groups = set(groups)
        self.set(
            [g for g in groups if g in self.weights] if weights else [],
            [g for g in groups if g in self.points] if activations else [],
        )

    def all(self, *, weights: bool = True, activations: bool = True) -> None:
        self.set_groups(self.groups, weights=weights, activations=activations)

    def fp32(self) -> None:
        self.set((), ())

    @contextlib.contextmanager
    def keeping(self) -> Iterator[None]:
        """Restore what is quantized afterwards."""
        saved = (set(self._weights_on), set(self._acts_on))
        try:
            yield
        finally:
            self.set(*saved)

    def refresh(self) -> None:
        self.set(self._weights_on, self._acts_on)

    def __call__(self, *inputs, **named) -> torch.Tensor:
        return self.gm(*inputs, **named)

    def to(self, device) -> QuantSim:
        self.gm.to(device)
        for wq in self.weights.values():
            wq.w_fp = wq.w_fp.to(device)
            wq.b_fp = None if wq.b_fp is None else wq.b_fp.to(device)
        return self

    # -- ranges ----------------------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(iter(self.weights.values())).w_fp.device

    def set_weight_ranges(self, check_stop: Callable[[], None] | None = None) -> None:
        parallel_map(lambda wq: wq.set_range(), self.weights.values(), self.device, check_stop)
        self.refresh()

    def act_method(self, state: PointState) -> str:
        """The estimator a point gets: cross_entropy only for logits and bn only after a BatchNorm, else
        mse."""
        method = self.act_spec.range
        if method in ("cross_entropy", "bn") and not get_range_estimator(method).applies(state.observed):
            return "mse"
        return method

    def act_grid(self, state: PointState, bits: int | None = None) -> Grid:
        nonnegative = bool(state.observed.lo.min() >= 0)
        return Grid.for_activations(bits or state.bits, self.act_spec.symmetric, nonnegative)

    @torch.no_grad()
    def calibrate(
        self,
        batches,
        *,
        seed: int,
        check_stop: Callable[[], None] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Observe every activation point on the calibration batches (weights quantized as they now are, no
        activation quantized), then set each point's range."""
        count = len(batches)
        # minmax and percentile read the extremes and the sample; every other method may end in the MSE
        # search.
        histogram = self.act_spec.range not in ("minmax", "percentile")
        for i, state in enumerate(self.points.values()):
            state.module.observer = Observer(
                count,
                seed + i,
                keep_rows=state.logits,
                histogram=histogram,
                channels=self._channel_dim(state.name),
            )
        try:
            with self.keeping():
                self.all(activations=False)
                for k, (x, _) in enumerate(batches):
                    if check_stop is not None:
                        check_stop()
                    call_model(self.gm, x)  # a tuple or dict batch is the model's several inputs
                    if progress is not None:
                        progress(k + 1, count)
        finally:
            for state in self.points.values():
                observer, state.module.observer = state.module.observer, None
                if observer is not None and observer.samples:
                    state.observed = observer.observed()
                    state.observed.bn, state.observed.relu = state.bn, state.relu
        unseen = [name for name, state in self.points.items() if state.observed is None]
        if unseen:
            raise JobError(
                f"no floating-point values reached the activation quantizer(s) {', '.join(unseen)} during "
                "calibration (integer tensors are never quantized); the model's inputs may not reach them"
            )
        parallel_map(self.set_point_range, self.points.values(), self.device, check_stop)
        self.refresh()

    def _channel_dim(self, point: str) -> int | None:
        """Where a layer's output point keeps its channels (for the channel-range ratio); None for other
        points."""
        layer = self.structure.points[point].layer
        return channel_dim(self.structure.layers[layer].module) if layer in self.structure.layers else None

    def set_point_range(self, state: PointState, bits: int | None = None) -> None:
        state.method = self.act_method(state)
        state.grid = self.act_grid(state, bits)
        key = (state.method, state.grid)
        if key not in state.ranges:
            state.ranges[key] = estimate(state.method, state.observed, state.grid, self.act_spec.percentile)
        lo, hi = state.ranges[key]
        state.module.qp = qparams_from_range(lo[0], hi[0], state.grid).to(self.device)
