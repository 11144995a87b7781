"""TensorBoard event files of a training run: written live (`tensorboard = true`: a sink on the job's metrics
and layer statistics, plus the spec and the model graph) or afterwards from the run's database and files
(`workbench runs export-tensorboard`). Worker side (torch's SummaryWriter, imported lazily); never imports Qt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import math
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from workbench.errors import JobError

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"  # inside the run folder
INSTALL_HINT = "pip install 'torch-workbench[tensorboard]'"
SPEC_TAG = "spec"
EVENT_PREFIX = "events.out.tfevents."


def tensorboard_available() -> bool:
    """Whether the tensorboard package (which torch's SummaryWriter writes through) is installed."""
    return importlib.util.find_spec("tensorboard") is not None


def require_tensorboard() -> None:
    """Refuse tensorboard = true up front, before any data is read, where the package is missing."""
    if not tensorboard_available():
        raise JobError(
            f"tensorboard: writing TensorBoard files needs the tensorboard package, which is not installed "
            f"here; install it with {INSTALL_HINT} (or pip install tensorboard), or train with "
            "tensorboard = false"
        )
    try:
        import torch.utils.tensorboard  # noqa: F401  (installed is not enough: a protobuf it cannot use fails here)
    except Exception as exc:
        raise JobError(
            f"tensorboard: torch cannot load the installed tensorboard package ({type(exc).__name__}: "
            f"{exc}); reinstall it with {INSTALL_HINT}, or train with tensorboard = false"
        ) from None


def logdir_command(log_dir: str | Path) -> str:
    return f"tensorboard --logdir {shlex.quote(str(log_dir))}"


def histogram_raw(counts, edges) -> dict:
    """SummaryWriter.add_histogram_raw's arguments for bin `counts` (n) between `edges` (n + 1), so a
    histogram computed elsewhere (layer statistics) is written as it is, not re-binned. Sums use the bin
    centres."""
    counts = [float(c) for c in counts]
    edges = [float(e) for e in edges]
    if len(edges) != len(counts) + 1 or not counts:
        raise ValueError(f"a histogram needs n counts and n + 1 edges, not {len(counts)} and {len(edges)}")
    centres = [(low + high) / 2 for low, high in zip(edges[:-1], edges[1:])]
    filled = [i for i, c in enumerate(counts) if c > 0]
    low = edges[filled[0]] if filled else edges[0]
    high = edges[filled[-1] + 1] if filled else edges[-1]
    return {
        "min": low,
        "max": high,
        "num": sum(counts),
        "sum": sum(c * x for c, x in zip(counts, centres)),
        "sum_squares": sum(c * x * x for c, x in zip(counts, centres)),
        # TensorBoard's buckets are named by their right edge.
        "bucket_limits": edges[1:],
        "bucket_counts": counts,
    }


def spec_markdown(toml_text: str) -> str:
    # The text plugin renders markdown: a fenced block keeps the TOML's lines and spacing.
    return f"```toml\n{toml_text.rstrip()}\n```"


class Board:
    """One run's TensorBoard folder, written through torch's SummaryWriter.

    Also a TaskContext sink (`scalars`, `histogram`, `artifact`). Nothing here may fail a training run: a
    write error is logged once as a warning through `warn` and the board stops writing (`broken`).
    """

    def __init__(
        self,
        log_dir: str | Path,
        *,
        warn: Callable[[str], None] | None = None,
        purge_step: Callable[[], int | None] | None = None,
    ):
        self.log_dir = Path(log_dir)
        self._warn = warn or (lambda text: log.warning("%s", text))
        self._purge_step = purge_step  # asked when the writer opens: a resumed run's first redone step
        self._purged_from: int | None = None
        # A resumed run's folder already holds the first session's files, with the graph of the same model.
        self._continues = purge_step is not None and any(self.log_dir.glob(EVENT_PREFIX + "*"))
        self._writer = None
        self._broken = False
        self._lock = threading.Lock()  # the flusher thread and the task thread may both write

    @property
    def broken(self) -> bool:
        return self._broken

    def _open(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._purged_from = self._purge_step() if self._purge_step is not None else None
            # purge_step: TensorBoard hides what an earlier, interrupted session wrote from this step on, so a
            # resumed run's redone steps are not drawn twice.
            self._writer = SummaryWriter(str(self.log_dir), purge_step=self._purged_from, flush_secs=5)
        return self._writer

    def _write(self, what: str, write: Callable[[object], None]) -> bool:
        if self._broken:
            return False
        with self._lock:
            try:
                write(self._open())
                return True
            except Exception as exc:
                self._broken = True
                self._warn(
                    f"tensorboard: writing {what} into {self.log_dir} failed ({type(exc).__name__}: {exc}); "
                    "nothing more is written there"
                )
                return False

    # -- the TaskContext sink ----------------------------------------------------------------------
    def scalars(self, columns: dict) -> None:
        """{name: (steps, values, times)}: one scalar per value, at its step and wall time, under the run's
        names."""

        def write(writer) -> None:
            from tensorboard.compat.proto.summary_pb2 import Summary

            # One event per (step, time), holding every metric recorded there: what add_scalar writes, as one
            # record rather than one per value, which costs a third on the training thread (TensorBoard reads
            # each value under its own tag all the same).
            events: dict[tuple[int, float], list] = {}
            for name, (steps, values, times) in columns.items():
                for step, value, t in zip(steps, values, times):
                    events.setdefault((int(step), t), []).append(Summary.Value(tag=name, simple_value=value))
            file_writer = writer._get_file_writer()
            for (step, t), values in sorted(events.items(), key=lambda item: item[0][0]):
                file_writer.add_summary(Summary(value=values), step, t)

        self._write("scalars", write)

    def histogram(self, name: str, step: int, counts, edges, walltime: float | None = None) -> None:
        """A histogram already binned elsewhere (a layer's weights or activations), written as it is."""
        try:
            raw = histogram_raw(_plain(counts), _plain(edges))
        except ValueError as exc:
            self._warn(f"tensorboard: histogram {name} skipped: {exc}")
            return
        self._write(
            f"histogram {name}",
            lambda writer: writer.add_histogram_raw(name, global_step=int(step), walltime=walltime, **raw),
        )

    def artifact(self, name: str, path, kind: str) -> None:
        """A recorded step of layer statistics (the loop's `layer_stats` artifact) becomes histograms and
        scalars."""
        if kind != "layer_stats" or self._broken:
            return
        from workbench.layer_records import read_record

        try:
            record = read_record(path)
        except ValueError as exc:
            self._warn(f"tensorboard: layer statistics skipped: {exc}")
            return
        self.layer_record(record)

    def layer_record(self, record: dict, walltime: float | None = None) -> None:
        """One recorded step of workbench.layer_records: per layer a histogram of its weights, gradients and
        activations (tags weights/<layer>, ...) and its statistics (grad_norm/<layer>, ...), at the record's
        step."""
        step = record["step"]
        columns: dict[str, tuple[list, list, list]] = {}
        for tag, value in layer_scalars(record):
            columns[tag] = ([step], [value], [walltime if walltime is not None else time.time()])
        self.scalars(columns)
        for tag, counts, edges in layer_histograms(record):
            self.histogram(tag, step, counts, edges, walltime=walltime)

    # -- once a run ---------------------------------------------------------------------------------
    def spec_text(self, toml_text: str) -> None:
        """The spec at step 0, or a resumed run's at the step it resumes from (it may train more epochs)."""

        def write(writer) -> None:
            writer.add_text(SPEC_TAG, spec_markdown(toml_text), self._purged_from or 0)

        self._write("the spec", write)

    def graph(self, model, example) -> bool:
        """The model's graph, traced with `example` (a batch of one); a model the tracer cannot follow
        (data-dependent control flow, dict inputs) gets a warning and no graph, never a failed run."""
        if self._broken or self._continues:
            return False
        if example is None:
            self._warn("tensorboard: no model graph (there is no example input to trace it with)")
            return False
        with self._lock:
            try:
                writer = self._open()
            except Exception as exc:
                self._broken = True
                self._warn(
                    f"tensorboard: writing into {self.log_dir} failed ({type(exc).__name__}: {exc}); nothing "
                    "more is written there"
                )
                return False
            try:
                with _quiet_tracer(), _unchecked_trace():
                    writer.add_graph(model, example)
                return True
            except Exception as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                self._warn(
                    f"tensorboard: no model graph: tracing {type(model).__name__} failed "
                    f"({type(exc).__name__}: {first}); the scalars are still written"
                )
                return False

    def close(self) -> None:
        with self._lock:
            writer, self._writer = self._writer, None
            if writer is not None:
                try:
                    writer.close()  # flushes what the writer's own thread still holds
                except Exception as exc:
                    self._warn(f"tensorboard: closing the event file in {self.log_dir} failed: {exc}")


@contextlib.contextmanager
def _unchecked_trace():
    """add_graph's torch.jit.trace without its check pass: the check runs the model again and compares, and
    nn.TransformerEncoder's eval fast path (nested tensors) takes another kernel than the trace recorded,
    which the check reads as a divergence (TracingCheckError) though the graph drawn is the model's."""
    import torch

    real = torch.jit.trace

    def trace(*args, **kwargs):
        return real(*args, **{**kwargs, "check_trace": False})

    with mock.patch.object(torch.jit, "trace", trace):
        yield


def layer_scalars(record: dict):
    """(tag, value) of a layer statistics record's finite per-layer statistics: grad_norm/<layer>, ..."""
    from workbench.layer_records import SCALARS

    for index, layer in enumerate(record["layers"]):
        for column, stat in enumerate(SCALARS):
            value = float(record["scalars"][index, column])
            if math.isfinite(value):
                yield f"{stat}/{layer}", value


def layer_histograms(record: dict):
    """(tag, counts, edges) of a layer statistics record's histograms: weights/<layer>, gradients/<layer>,
    activations/<layer>; one a layer did not have at that step (NaN range: no gradient yet) is left out."""
    import numpy as np

    from workbench.layer_records import BINS, KINDS

    for index, layer in enumerate(record["layers"]):
        for which, kind in enumerate(KINDS):
            low, high = (float(v) for v in record["ranges"][index, which])
            counts = record["counts"][index, which]
            if (
                not (math.isfinite(low) and math.isfinite(high))
                or not np.isfinite(counts).all()
                or not counts.sum()
            ):
                continue
            if high <= low:  # one value throughout (a bias still at zero): a sliver, so the bins have a width
                pad = max(abs(low), 1.0) * 1e-6
                low, high = low - pad, high + pad
            yield f"{kind}/{layer}", counts, np.linspace(low, high, BINS + 1)


def _plain(array) -> list:
    if hasattr(array, "detach"):  # a tensor
        array = array.detach().cpu().numpy()
    return list(array.tolist() if hasattr(array, "tolist") else array)


@contextlib.contextmanager
def _quiet_tracer():
    # The tracer's own TracerWarnings (a Python bool of a tensor, say) say nothing the user acts on here.
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def example_batch(model, sample_shape=(), example=None):
    """A batch of one for tracing: `example` (a user dataset's first input: a tensor or a tuple of them) with
    a batch dimension, else zeros of `sample_shape`; on the model's device. None where neither fits (a dict
    input)."""
    import torch

    try:
        device = next(model.parameters()).device
    except (StopIteration, AttributeError):
        device = torch.device("cpu")
    if example is None:
        return torch.zeros(1, *sample_shape, device=device) if sample_shape else None
    if isinstance(example, (tuple, list)):
        items = [example_batch(model, example=item) for item in example]
        return None if any(item is None for item in items) else tuple(items)
    if isinstance(example, dict):
        return None
    return torch.as_tensor(example).unsqueeze(0).to(device)


# -- live: a training job with tensorboard = true ------------------------------------------------------
@contextlib.contextmanager
def live(spec, ctx):
    """A Board on the run's tensorboard/ folder fed by every metrics flush of `ctx` while the block runs, or
    None when spec.tensorboard is off. On the way out (done, cancelled or failed) it flushes the context
    first, so the board has every value the database has, then closes the event file."""
    if not spec.tensorboard:
        yield None
        return
    require_tensorboard()
    run = ctx.run
    board = Board(
        run.dir / TENSORBOARD_DIR,
        warn=lambda text: ctx.log(text, "warning"),
        purge_step=(lambda: _resumed_step(run)) if ctx.resuming else None,
    )
    ctx.add_sink(board)
    try:
        yield board
    finally:
        try:
            ctx.remove_sink(board)
        finally:
            board.close()
    ctx.log(f"TensorBoard files in {board.log_dir}; view them with {logdir_command(board.log_dir)}")


def _resumed_step(run) -> int | None:
    """The first step a resumed run redoes: the one after the global step of its latest `resume` event."""
    events = run.events("resume")
    if not events:
        return None
    return int(events[-1]["content"].get("global_step", 0)) + 1


# -- afterwards: `workbench runs export-tensorboard` -----------------------------------------------------
@dataclasses.dataclass
class ExportResult:
    run_dir: Path
    log_dir: Path
    scalars: int
    tags: list[str]
    spec: bool
    graph: bool
    replaced: int  # earlier event files removed from the run's own tensorboard/ folder
    warnings: list[str]
    layer_steps: int = 0  # recorded steps of layer statistics written as histograms

    @property
    def command(self) -> str:
        return logdir_command(self.log_dir)

    def to_dict(self) -> dict:
        return {
            "run_dir": str(self.run_dir),
            "status": "done",
            "log_dir": str(self.log_dir),
            "scalars": self.scalars,
            "tags": self.tags,
            "spec": self.spec,
            "graph": self.graph,
            "layer_stats_steps": self.layer_steps,
            "replaced_event_files": self.replaced,
            "warnings": self.warnings,
            "command": self.command,
        }


def export_run(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    workspace: str | Path | None = None,
    graph: bool = True,
) -> ExportResult:
    """Write what a live `tensorboard = true` run writes (every recorded metric at its step and wall time, the
    spec, the model graph) for a run trained before, from its database, into `<run>/tensorboard/` or
    `out_dir`."""
    from workbench.runs import Run, run_owner

    require_tensorboard()
    run_dir = Path(run_dir).absolute()
    own = out_dir is None
    log_dir = run_dir / TENSORBOARD_DIR if own else Path(out_dir).expanduser().absolute()
    earlier = sorted(log_dir.glob(EVENT_PREFIX + "*")) if log_dir.is_dir() else []
    if own and run_owner(run_dir) is not None:
        raise JobError(
            f"{run_dir.name} is still running (and may be writing {log_dir} itself); export it when it has "
            "ended, or pass --out DIR"
        )
    if not own and earlier:
        raise JobError(
            f"--out {log_dir} already holds TensorBoard event files ({earlier[0].name}, ...): TensorBoard "
            "would draw both; choose an empty folder"
        )
    with Run(run_dir, readonly=True) as run:
        if not run.task.startswith("train."):
            raise JobError(
                f"{run_dir.name} is a {run.task or 'unknown'} run; export-tensorboard takes a training run"
            )
        rows = _current_rows(run.read_metric_rows(), run.events("resume"))
        spec_text = run.spec_path.read_text(encoding="utf-8") if run.spec_path.is_file() else ""
        if graph:  # the graph rebuilds the model from the run's code: only the code it trained with
            from workbench.trust import check_run_code

            check_run_code(run_dir, run.read_spec())
    from workbench.layer_records import read_record, record_paths

    layer_files = record_paths(run_dir)
    for path in earlier:  # only the run's own folder: its files are ours, and a second copy would draw twice
        path.unlink()
    warnings: list[str] = []
    board = Board(log_dir, warn=warnings.append)
    try:
        columns: dict[str, tuple[list, list, list]] = {}
        for step, name, value, t in rows:
            column = columns.setdefault(name, ([], [], []))
            column[0].append(step)
            column[1].append(value)
            column[2].append(t)
        board.scalars(columns)
        for path in layer_files:
            try:
                board.layer_record(read_record(path), walltime=path.stat().st_mtime)
            except (ValueError, OSError) as exc:
                warnings.append(f"tensorboard: layer statistics skipped: {exc}")
        if spec_text:
            board.spec_text(spec_text)
        drawn = graph and _export_graph(board, spec_text, run_dir, workspace, warnings.append)
    finally:
        board.close()
    if board.broken:  # here, unlike during training, the files are the whole point: say it failed
        raise JobError(next((text for text in warnings if "nothing more is written" in text), warnings[-1]))
    if not any(log_dir.glob(EVENT_PREFIX + "*")):  # an empty run still gets a folder TensorBoard can open
        log_dir.mkdir(parents=True, exist_ok=True)
    return ExportResult(
        run_dir,
        log_dir,
        len(rows),
        sorted({name for _, name, _, _ in rows}),
        bool(spec_text),
        bool(drawn),
        len(earlier),
        warnings,
        len(layer_files),
    )


def _current_rows(rows: list, resumes: list[dict]) -> list:
    """The rows a live board would still show: at each resume (at global step T), what was written after step
    T before it is dropped, since the resumed run writes those steps again (a live board purges them
    likewise)."""
    cuts = sorted((event["time"], int(event["content"].get("global_step", 0))) for event in resumes)
    kept: list = []
    for step, name, value, t in rows:
        while cuts and cuts[0][0] <= t:
            _, resumed_at = cuts.pop(0)
            kept = [row for row in kept if row[0] <= resumed_at]
        kept.append((step, name, value, t))
    return kept


def _export_graph(
    board: Board, spec_text: str, run_dir: Path, workspace, warn: Callable[[str], None]
) -> bool:
    """The run's model as its spec builds it (fresh weights: a graph is structure), traced with a zero batch
    of the data's sample shape; a warning and no graph where it cannot be built or traced."""
    from workbench.specs import TrainSpec

    try:
        spec = TrainSpec.from_toml(spec_text, source=str(run_dir / "spec.toml")) if spec_text else None
    except Exception as exc:
        warn(f"tensorboard: no model graph: the run's spec.toml does not read as a training spec ({exc})")
        return False
    if spec is None:
        warn("tensorboard: no model graph: the run has no spec.toml")
        return False
    try:
        model, batch = _rebuild(spec, run_dir, workspace)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        warn(f"tensorboard: no model graph: the model could not be rebuilt ({first})")
        return False
    return board.graph(model.eval(), batch)


def _rebuild(spec, run_dir: Path, workspace):
    from workbench.worker.models import build_model
    from workbench.worker.objectives.of_run import first_input

    model_spec = dataclasses.replace(spec.model, checkpoint="", weights="")
    shape = tuple(spec.model.input_shape)
    example = None
    if not shape or spec.dataset.name.startswith("file:"):  # the data says what one sample looks like
        from workbench.worker.data import load_dataset

        dataset = load_dataset(spec.dataset, workspace=workspace or run_dir.parent.parent)
        try:
            shape = shape or tuple(dataset.sample_shape)
            example = first_input(dataset)
        finally:
            dataset.release()
    model = build_model(
        model_spec, input_shape=shape, pretrained=False, checkpoint=False, task=spec.task, example=example
    )
    return model, example_batch(model, shape, example)


__all__ = [
    "Board",
    "ExportResult",
    "example_batch",
    "export_run",
    "histogram_raw",
    "live",
    "require_tensorboard",
    "tensorboard_available",
]
