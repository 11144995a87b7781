"""The backends a benchmark row can run on, each built into a Runnable for one batch size: eager PyTorch,
torch.compile, TorchScript (traced), torch.export, ONNX Runtime (FP32 and a QDQ INT8 model) and TensorRT.

A backend that cannot run here raises Unavailable with the reason the user reads in the results table.
torch is imported here; onnx, onnxruntime and torch_tensorrt only inside the builder that needs them.
Never imports Qt.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils import _pytree as pytree

from workbench.worker.bench.source import BenchSource
from workbench.worker.bench.timing import Runnable

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
ORT_TYPES = {"float32": ("tensor(float)", np.float32), "float16": ("tensor(float16)", np.float16)}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul"}
QDQ_OPSET = 18
ONNX_EXAMPLE_BATCH = 2  # the dynamic-batch export traces at 2: a batch of 1 would be specialised to 1
INPUT_SEED = 0


class Unavailable(Exception):
    """This backend cannot run here; the message says why, in words for the results table."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:limit]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass
class BuildContext:
    """What every builder shares for one job: the source, the device and dtype, the threads, a temporary
    folder for exports made on the way, and the files already exported (an ONNX model is written once per
    job)."""

    source: BenchSource
    device: torch.device
    dtype_name: str
    threads: int
    tmp: Path
    log: Callable[..., None] = print
    _model: torch.nn.Module | None = None
    _onnx: dict = field(default_factory=dict)  # key -> Path or Unavailable

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    def model(self, backend: str) -> torch.nn.Module:
        """The PyTorch model on the device in the dtype (moved once, shared by the torch backends)."""
        if self.source.model is None:
            raise Unavailable(
                f"{backend} needs a PyTorch model, and {self.source.label} is an exported file; set "
                "source.run (a training run) or model.*, with the file as artifact"
            )
        if self._model is None:
            self._model = self.source.model.to(device=self.device, dtype=self.dtype).eval()
        return self._model

    def host_input(self, batch: int) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The same random input for every backend at this batch size (seeded), on the host, in the dtype; for
        a model with several inputs a tuple of them, integer inputs within the example's range and kept
        integer."""
        generator = torch.Generator().manual_seed(INPUT_SEED + batch)
        example = self.source.example
        if example is not None:
            # Real samples repeated to the batch size where the data gave them; else drawn like them.
            batched = example.batch(batch) if example.real else example.random(batch, generator)
            return tuple(t.to(self.dtype) if t.is_floating_point() else t for t in batched.tensors)
        return torch.randn(batch, *self.source.input_shape, generator=generator).to(self.dtype)

    def sync(self) -> Callable[[], None]:
        if self.device.type == "cuda":
            device = self.device
            return lambda: torch.cuda.synchronize(device)
        if self.device.type == "mps":
            return torch.mps.synchronize
        return lambda: None

    def file_is(self, kind: str) -> bool:
        return self.source.file is not None and self.source.file_kind == kind

    def file_is_qdq(self) -> bool:
        """Whether the ONNX file holds quantized operators (read once per job)."""
        if "file_qdq" not in self._onnx:
            try:
                self._onnx["file_qdq"] = is_qdq(self.source.file)
            # a damaged or foreign file: every ONNX row says so, the others still run
            except Exception as exc:
                self._onnx["file_qdq"] = Unavailable(
                    f"{self.source.file.name} cannot be read as ONNX ({first_line(exc)})"
                )
        found = self._onnx["file_qdq"]
        if isinstance(found, Unavailable):
            raise found
        return found


def args_of(x) -> tuple[torch.Tensor, ...]:
    """A row's input as the positional arguments of the model: one tensor, or the tuple of a multi-input
    model."""
    return x if isinstance(x, tuple) else (x,)


def on_device(x, device: torch.device):
    return tuple(t.to(device) for t in x) if isinstance(x, tuple) else x.to(device)


# --- torch backends -----------------------------------------------------------------------------------------


def _torch_runnable(
    ctx: BuildContext, module: Callable, batch: int, source: str, close=lambda: None
) -> Runnable:
    """A Runnable around a torch callable: inputs on the device; on CUDA a fresh upload and download timed
    apart; inference_mode so no autograd bookkeeping is measured."""
    host = ctx.host_input(batch)
    holder = {"x": args_of(on_device(host, ctx.device))}

    def run():
        with torch.inference_mode():
            return module(*holder["x"])

    if ctx.device.type != "cuda":
        return Runnable(run=run, sync=ctx.sync(), close=close, source=source)

    def upload():
        holder["x"] = args_of(on_device(host, ctx.device))

    def download(outputs):
        pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, outputs)

    return Runnable(run=run, sync=ctx.sync(), upload=upload, download=download, close=close, source=source)


def _probe(runnable: Runnable, what: str) -> Runnable:
    """Run once, so a backend that builds lazily (torch.compile) or fails on this input says so as unavailable
    rather than in the middle of the timing."""
    try:
        runnable.run()
        runnable.sync()
    except Unavailable:
        raise
    except Exception as exc:
        runnable.close()
        raise Unavailable(f"{what} fails on this input ({first_line(exc)})") from None
    return runnable


def build_eager(ctx: BuildContext, batch: int) -> Runnable:
    return _probe(_torch_runnable(ctx, ctx.model("eager"), batch, "model"), "the eager model")


def build_compile(ctx: BuildContext, batch: int) -> Runnable:
    from workbench.errors import JobError
    from workbench.worker.devices import check_compile

    model = ctx.model("compile")
    try:
        check_compile("default", ctx.device)
    except JobError as exc:
        raise Unavailable(str(exc).removeprefix("compile: ")) from None
    import torch._dynamo

    torch._dynamo.reset()  # each row compiles afresh: no guard failures or recompile limits carried over
    try:
        compiled = torch.compile(model, dynamic=False)
    except Exception as exc:
        raise Unavailable(f"torch.compile refused the model ({first_line(exc)})") from None
    # Compilation happens on the first call, inside the probe: build time, never timed.
    return _probe(_torch_runnable(ctx, compiled, batch, "model", close=torch._dynamo.reset), "torch.compile")


def build_torchscript(ctx: BuildContext, batch: int) -> Runnable:
    if ctx.file_is("torchscript"):
        try:
            with warnings_quiet():  # torch.jit.load's deprecation warning: the file is what the user has
                module = torch.jit.load(str(ctx.source.file), map_location=ctx.device)
        except Exception as exc:
            raise Unavailable(
                f"{ctx.source.file.name} is not a TorchScript archive ({first_line(exc)})"
            ) from None
        module = module.to(ctx.dtype).eval()
        return _probe(
            _torch_runnable(ctx, module, batch, f"file {ctx.source.file.name}"), "the TorchScript file"
        )
    model = ctx.model("torchscript")
    example = args_of(on_device(ctx.host_input(batch), ctx.device))
    try:
        with torch.no_grad(), warnings_quiet():
            traced = torch.jit.trace(model, example, check_trace=False)
    except Exception as exc:
        raise Unavailable(f"torch.jit.trace failed ({first_line(exc)})") from None
    return _probe(_torch_runnable(ctx, traced.eval(), batch, "model"), "the traced model")


def build_exported_program(ctx: BuildContext, batch: int) -> Runnable:
    if ctx.file_is("exported_program"):
        from workbench.errors import JobError
        from workbench.worker.graph.sources import load_exported_program

        try:
            program = load_exported_program(ctx.source.file)
        except JobError as exc:
            raise Unavailable(str(exc).removeprefix("source.file: ")) from None
        module = program.module().to(device=ctx.device, dtype=ctx.dtype)
        return _probe(
            _torch_runnable(ctx, module, batch, f"file {ctx.source.file.name}"),
            f"{ctx.source.file.name} (exported for other shapes?)",
        )
    model = ctx.model("exported_program")
    example = args_of(on_device(ctx.host_input(batch), ctx.device))
    try:
        with torch.no_grad(), warnings_quiet():
            program = torch.export.export(model, example)  # static shapes: one program per batch size
    except Exception as exc:
        raise Unavailable(f"torch.export failed ({first_line(exc)})") from None
    return _probe(_torch_runnable(ctx, program.module(), batch, "model"), "the exported program")


def build_tensorrt(ctx: BuildContext, batch: int) -> Runnable:
    if ctx.device.type != "cuda":
        raise Unavailable(f"TensorRT runs on NVIDIA GPUs only; device is {ctx.device}")
    try:
        import torch_tensorrt
    except ImportError as exc:
        raise Unavailable(
            f"torch_tensorrt cannot be imported ({first_line(exc)}); install the [tensorrt] extra "
            "(pip install 'torch-workbench[tensorrt]') on a machine with CUDA"
        ) from None
    model = ctx.model("tensorrt")
    example = list(args_of(on_device(ctx.host_input(batch), ctx.device)))
    try:
        with torch.no_grad(), warnings_quiet():
            engine = torch_tensorrt.compile(
                model, ir="dynamo", inputs=example, enabled_precisions={ctx.dtype}
            )
    except Exception as exc:
        raise Unavailable(f"torch_tensorrt.compile failed ({first_line(exc)})") from None
    return _probe(_torch_runnable(ctx, engine, batch, "model"), "the TensorRT engine")


@contextlib.contextmanager
def warnings_quiet():
    """Tracing and exporting warn about things a benchmark does not act on (TracerWarning, deprecations)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# --- ONNX Runtime -------------------------------------------------------------------------------------------


def onnx_ops(path: Path) -> set[str]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    for function in model.functions:
        ops |= {node.op_type for node in function.node}
    return ops


def is_qdq(path: Path) -> bool:
    """Whether an ONNX file holds quantized operators (QuantizeLinear/DequantizeLinear pairs or QLinear
    ops)."""
    return bool(onnx_ops(path) & QDQ_OPS)


def export_onnx(
    model: torch.nn.Module, example, path: Path, *, dynamic_batch: bool, input_names: list[str] | None = None
) -> Path:
    """The model as ONNX (torch.export-based exporter, opset 18), optionally with a dynamic batch dimension.
    `example` is one tensor, or a tuple of them for a model with several inputs (taken as forward(*args))."""
    kwargs = {}
    if dynamic_batch:
        batch = torch.export.Dim("batch", min=1, max=2**20)
        # forward(x) takes one spec; a multi-input model's forward(*args) takes one tuple for its *args.
        kwargs["dynamic_shapes"] = (
            tuple({0: batch} for _ in example) if isinstance(example, tuple) else {0: batch},
        )
    buffer = io.StringIO()
    with torch.no_grad(), warnings_quiet(), contextlib.redirect_stdout(buffer):
        torch.onnx.export(
            model,
            args_of(example),
            str(path),
            dynamo=True,
            opset_version=QDQ_OPSET,
            input_names=input_names or ["input"],
            output_names=["output"],
            external_data=False,
            verbose=False,
            **kwargs,
        )
    return path


def _fp32_onnx(ctx: BuildContext, batch: int) -> tuple[Path, str]:
    """(path, what it came from) of the float ONNX model for onnxruntime: the artifact when it is one, else an
    export of the model (once per job with a dynamic batch; per batch size when that export fails)."""
    if ctx.file_is("onnx"):
        if ctx.file_is_qdq():
            if ctx.source.model is None:
                raise Unavailable(
                    f"{ctx.source.file.name} is a quantized (QDQ) model: measure it as onnxruntime_int8"
                )
        else:
            return ctx.source.file, f"file {ctx.source.file.name}"
    model = ctx.model("onnxruntime")
    key = ("fp", ctx.dtype_name)
    if key not in ctx._onnx:
        path = ctx.tmp / f"model-{ctx.dtype_name}.onnx"
        example = on_device(ctx.host_input(ONNX_EXAMPLE_BATCH), ctx.device)
        try:
            ctx._onnx[key] = export_onnx(
                model, example, path, dynamic_batch=True, input_names=ctx.source.input_names
            )
        except Exception as exc:
            ctx.log(
                f"ONNX export with a dynamic batch failed ({first_line(exc)}); exporting per batch size",
                "warning",
            )
            ctx._onnx[key] = None
    if ctx._onnx[key] is not None:
        return ctx._onnx[key], "model (exported to ONNX)"
    path = ctx.tmp / f"model-{ctx.dtype_name}-b{batch}.onnx"
    try:
        return export_onnx(
            model,
            on_device(ctx.host_input(batch), ctx.device),
            path,
            dynamic_batch=False,
            input_names=ctx.source.input_names,
        ), "model (exported to ONNX)"
    except Exception as exc:
        raise Unavailable(f"the ONNX export failed ({first_line(exc)})") from None


def _qdq_onnx(ctx: BuildContext) -> tuple[Path, str]:
    """(path, what it came from) of the QDQ model: a QDQ artifact, or one written from the quantize run."""
    if ctx.file_is("onnx"):
        if ctx.file_is_qdq():
            return ctx.source.file, f"file {ctx.source.file.name}"
        if ctx.source.quant_run is None:
            raise Unavailable(
                f"{ctx.source.file.name} has no QuantizeLinear/DequantizeLinear nodes (a float model: "
                "measure it as onnxruntime); onnxruntime_int8 needs a QDQ .onnx or a quantize run"
            )
    quant = ctx.source.quant_run
    if quant is None:
        raise Unavailable(
            "onnxruntime_int8 runs a QDQ model: set source.run to a quantize run (workbench quantize) "
            "or artifact to a QDQ .onnx file"
        )
    if quant.problem:
        raise Unavailable(quant.problem)
    key = ("qdq", quant.id)
    if key not in ctx._onnx:
        try:
            from workbench.worker.export.onnx_qdq import write_onnx_qdq
        except ImportError as exc:
            ctx._onnx[key] = Unavailable(
                f"the QDQ exporter (workbench.worker.export.onnx_qdq) is not importable "
                f"here ({first_line(exc)})"
            )
        else:
            path = ctx.tmp / f"{quant.id}-qdq.onnx"
            try:
                with warnings_quiet(), contextlib.redirect_stdout(io.StringIO()):
                    info = write_onnx_qdq(
                        quant.dir,
                        path,
                        opset=QDQ_OPSET,
                        dynamic_batch=True,
                        log=lambda text, *a, **k: ctx.log(text),
                        # token ids and the like; one float input needs no example
                        **({"example": ctx.source.example} if ctx.source.example is not None else {}),
                    )
                ctx._onnx[key] = path
                ctx.log(
                    f"QDQ model of quantize run {quant.id} written"
                    + (f" ({_brief(info)})" if isinstance(info, dict) and info else "")
                )
            except Exception as exc:
                ctx._onnx[key] = Unavailable(
                    f"writing the QDQ model of quantize run {quant.id} failed ({first_line(exc)})"
                )
    found = ctx._onnx[key]
    if isinstance(found, Unavailable):
        raise found
    return found, f"quantize run {quant.id}"


def _brief(info: dict) -> str:
    keys = ("exporter", "opset", "size_bytes", "fallback_reason")
    return ", ".join(f"{k} {info[k]}" for k in keys if info.get(k) not in (None, ""))


def ort_session(
    path: Path,
    *,
    device: torch.device,
    threads: int,
    optimized_path: Path | None = None,
    profile_prefix: str | None = None,
):
    """An InferenceSession on the device's execution provider, with `threads` intra-op threads when > 0."""
    import onnxruntime as ort

    if device.type == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise Unavailable("this onnxruntime has no CUDA execution provider (install onnxruntime-gpu)")
        providers = [("CUDAExecutionProvider", {"device_id": device.index or 0})]
    elif device.type == "cpu":
        providers = ["CPUExecutionProvider"]
    else:
        raise Unavailable(f"onnxruntime runs on cpu or cuda here, not {device.type}")
    options = ort.SessionOptions()
    # errors only: its warnings about unused initializers are not ours to act on
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads > 0:
        options.intra_op_num_threads = threads
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers)
    except Exception as exc:
        raise Unavailable(f"onnxruntime cannot load {path.name} ({first_line(exc)})") from None


def _ort_runnable(ctx: BuildContext, path: Path, batch: int, source: str, *, int8: bool) -> Runnable:
    dtype_name = "float32" if int8 else ctx.dtype_name
    session = ort_session(path, device=ctx.device, threads=ctx.threads)
    inputs = session.get_inputs()
    want_type, np_type = ORT_TYPES[dtype_name]
    host = tuple(
        t.to(torch.float32 if int8 else ctx.dtype) if t.is_floating_point() else t
        for t in args_of(ctx.host_input(batch))
    )
    if len(inputs) != len(host):
        raise Unavailable(
            f"{path.name} takes {len(inputs)} input{'s' * (len(inputs) != 1)} "
            f"({', '.join(i.name for i in inputs)}); the model takes {len(host)}"
        )
    for meta, tensor in zip(inputs, host):
        if tensor.is_floating_point() and meta.type != want_type:
            raise Unavailable(
                f"{path.name} takes {meta.type} for {meta.name}, not {want_type} (dtype={dtype_name})"
            )
    # Fed by position: a file exported from this model keeps its input order (and its names, which may
    # differ).
    feed = {
        meta.name: t.numpy().astype(np_type, copy=False) if t.is_floating_point() else t.numpy()
        for meta, t in zip(inputs, host)
    }
    if ctx.device.type == "cpu":
        runnable = Runnable(run=lambda: session.run(None, feed), source=source)
    else:
        runnable = _ort_cuda_runnable(ctx, session, feed, source)
    return _probe(runnable, f"onnxruntime at batch {batch}")


def _ort_cuda_runnable(ctx: BuildContext, session, feed: dict[str, np.ndarray], source: str) -> Runnable:
    """IOBinding on torch CUDA buffers, so `run` is compute alone and the copies are timed as the transfer."""
    device = ctx.device
    binding = session.io_binding()
    index = device.index or 0
    hosts = {name: torch.from_numpy(value) for name, value in feed.items()}
    xs = {name: host.to(device) for name, host in hosts.items()}
    for name, x in xs.items():
        binding.bind_input(name, "cuda", index, feed[name].dtype.type, list(x.shape), x.data_ptr())
    first = session.run(None, feed)  # output shapes, once
    outputs = []
    for meta, value in zip(session.get_outputs(), first):
        out = torch.empty(
            value.shape, dtype=torch.from_numpy(np.empty(0, dtype=value.dtype)).dtype, device=device
        )
        binding.bind_output(meta.name, "cuda", index, value.dtype.type, list(out.shape), out.data_ptr())
        outputs.append(out)
    sync = ctx.sync()

    def run():
        binding.synchronize_inputs()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        return outputs

    def upload():
        for name, x in xs.items():
            x.copy_(hosts[name])

    return Runnable(
        run=run, sync=sync, upload=upload, download=lambda outs: [o.cpu() for o in outs], source=source
    )


def build_onnxruntime(ctx: BuildContext, batch: int) -> Runnable:
    if ctx.dtype_name == "bfloat16":
        raise Unavailable("onnxruntime takes float32 or float16 inputs here (numpy has no bfloat16)")
    _import_onnxruntime()
    path, source = _fp32_onnx(ctx, batch)
    return _ort_runnable(ctx, path, batch, source, int8=False)


def build_onnxruntime_int8(ctx: BuildContext, batch: int) -> Runnable:
    if ctx.dtype_name != "float32":
        raise Unavailable(
            f"a QDQ model takes and returns float32; measure onnxruntime_int8 with dtype=float32, "
            f"not {ctx.dtype_name}"
        )
    _import_onnxruntime()
    path, source = _qdq_onnx(ctx)
    return _ort_runnable(ctx, path, batch, source, int8=True)


def _import_onnxruntime() -> None:
    try:
        import onnxruntime  # noqa: F401
    except ImportError as exc:
        raise Unavailable(f"onnxruntime cannot be imported ({first_line(exc)})") from None


def prepare(ctx: BuildContext, backend: str, batch: int) -> None:
    """The one-off work of a backend, done before its row's memory is measured: importing onnxruntime and
    writing the ONNX (or QDQ) model, once per job. What cannot be prepared is said again by the builder."""
    try:
        if backend == "onnxruntime" and ctx.dtype_name != "bfloat16":
            _import_onnxruntime()
            _fp32_onnx(ctx, batch)
        elif backend == "onnxruntime_int8" and ctx.dtype_name == "float32":
            _import_onnxruntime()
            _qdq_onnx(ctx)
        elif (
            backend in ("eager", "compile", "torchscript", "exported_program", "tensorrt")
            and ctx.source.model is not None
        ):
            ctx.model(backend)
            if backend == "compile":
                import torch._inductor.compile_fx  # noqa: F401  (the compiler's import, not the row's memory)
    except Unavailable:
        pass


BUILDERS: dict[str, Callable[[BuildContext, int], Runnable]] = {
    "eager": build_eager,
    "compile": build_compile,
    "torchscript": build_torchscript,
    "exported_program": build_exported_program,
    "onnxruntime": build_onnxruntime,
    "onnxruntime_int8": build_onnxruntime_int8,
    "tensorrt": build_tensorrt,
}


def new_tmp() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="workbench-bench-")
