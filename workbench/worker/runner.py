"""Runs one task to its end: builds the spec, opens the run directory, drives the task, writes the report.

The worker kernel and the headless CLI both call `run_task`, so a job behaves the same in either.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import threading
import time
import traceback
from pathlib import Path

from workbench.errors import JobCancelled, UsageError, WorkbenchError
from workbench.results import dig
from workbench.task_ids import same_task
from workbench.text import strip_ansi_deep
from workbench.worker.context import Emit, TaskContext
from workbench.worker.registry import TaskInfo

log = logging.getLogger(__name__)


def build_spec(task: TaskInfo, spec: dict):
    """The task's typed spec from plain data; raises SpecError naming the field."""
    if task.spec_type is None:
        return dict(spec or {})
    return task.spec_type.from_dict(spec or {})


def _drive(task: TaskInfo, spec, ctx: TaskContext):
    out = task.fn(spec, ctx)
    if inspect.isgenerator(out):
        # Each yield is a step boundary: the cheapest place to honour a cancel.
        try:
            while True:
                next(out)
                ctx.check_stop()
        except StopIteration as stop:
            return stop.value
        finally:
            out.close()
    return out


def _describe_escape(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return (
            f"the job's code called sys.exit({exc.code!r}); a model or task must raise an exception "
            "instead, so the run can be reported"
        )
    return (
        "the job's code raised KeyboardInterrupt; to stop a job use Cancel (Ctrl+.) in the window, "
        "or Ctrl+C on the command line"
    )


def _record_outcome(run, result: dict) -> None:
    if "error" in result:
        run.log_event("error", {**result["error"], "traceback": result.get("traceback", "")})
    report = {k: v for k, v in result.items() if k != "traceback"}
    run.write_report(report)
    run.set_status(result["status"], result.get("error", {}).get("message", ""))


def _as_begun(spec, run) -> tuple[object, list[str]]:
    """A resumed run goes on with the splits it began with: its stored spec (read as it was meant, see
    workbench.runs.upgrade_run_spec) decides dataset.stratify, whatever the spec handed in says."""
    dataset = getattr(spec, "dataset", None)
    if dataset is None or not hasattr(dataset, "stratify"):
        return spec, []
    try:
        stored = dig(run.read_spec(), "dataset", "stratify")
    except WorkbenchError:
        return spec, []
    if not isinstance(stored, bool) or stored == dataset.stratify:
        return spec, []
    note = f"dataset.stratify: this run began with stratify={str(stored).lower()}; it keeps those splits"
    return dataclasses.replace(spec, dataset=dataclasses.replace(dataset, stratify=stored)), [note]


def _open_for_resume(task: TaskInfo, workspace: str | Path | None, resume: str | Path):
    """The run to resume, opened for writing and claimed by this job; refused if it is another task's run."""
    from workbench.runs import RunStore

    opened = RunStore(Path(workspace) if workspace else Path(resume).parent.parent).open_run(
        str(resume), readonly=False
    )
    try:
        if not same_task(opened.task, task.name):  # a run recorded under the training id's old name too
            raise UsageError(f"{opened.dir} is a {opened.task} run; it cannot be resumed as {task.name}")
        opened.claim(doing="resume it")  # one writer per run: a second resume is refused here
    except BaseException:
        opened.close()
        raise
    return opened


def _start_resumed(run, spec, notes: list[str], job_id: str, emit: Emit):
    """Mark the resumed run running and return its spec: the one it began with where that must be kept (its
    notes go to `notes`), written back to the run's spec file."""
    from workbench.runs import atomic_write_text

    if hasattr(spec, "to_toml"):  # the spec may have grown (more epochs, say): keep the file true
        spec, kept = _as_begun(spec, run)
        notes.extend(kept)
        atomic_write_text(run.spec_path, spec.to_toml())
    run.set_status("running")
    run.log_event("resumed", {"job_id": job_id})
    emit("status", {"state": "running", "run_dir": str(run.dir), "resumed": True}, [])
    return spec


def _create_run(task: TaskInfo, spec, workspace: str | Path, run_id: str | None):
    """A new run of the task in the workspace; returns it and its spec as a dict."""
    from workbench.runs import RunStore

    spec_dict = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
    run = RunStore(Path(workspace)).create_run(
        task.name.split(".")[0], spec_dict, task=task.name, run_id=run_id
    )
    return run, spec_dict


def _start_created(task: TaskInfo, run, spec_dict: dict, emit: Emit) -> None:
    if task.name.startswith("train."):
        from workbench.trust import record_user_code

        record_user_code(run.dir, spec_dict)  # later jobs of the run check they run this same code
    run.set_status("running")
    emit("status", {"state": "running", "run_dir": str(run.dir)}, [])


def _drive_logged(task: TaskInfo, spec, ctx: TaskContext, notes: list[str]):
    """The task's value, its notes logged first; the context is closed whatever happens."""
    for note in notes:
        ctx.log(note)
    try:
        return _drive(task, spec, ctx)
    finally:
        ctx.close()


def _record_and_close(run, result: dict) -> None:
    """Save how the job ended in its run and close the run; a save that fails turns up in `result`'s error."""
    try:
        _record_outcome(run, result)
    # a full disk: the run cannot say how it ended, so this reply must
    except (OSError, WorkbenchError) as exc:
        if "error" not in result:
            result["status"] = "failed"
            result["error"] = {
                "type": type(exc).__name__,
                "message": (f"the job finished, but its outcome could not be saved in {run.dir}: {exc}"),
            }
        else:
            why = "" if str(exc) in result["error"]["message"] else f": {exc}"
            result["error"]["message"] += f" (its report could not be saved in {run.dir} either{why})"
    finally:
        run.close()


def run_task(
    task: TaskInfo,
    spec_data: dict,
    *,
    emit: Emit,
    stop_event: threading.Event | None = None,
    workspace: str | Path | None = None,
    job_id: str = "",
    resume: str | Path | None = None,
    run_id: str | None = None,
) -> dict:
    """Run a task and return its result: always `status` and `run_dir`, plus `error` when it failed.

    With `resume` (a run directory or id) the task continues that run instead of starting a new one;
    `ctx.resuming` tells it to pick up from the run's last checkpoint. `run_id` names a new run (torchrun
    ranks agree on one) instead of a generated id.
    """
    run = None
    result: dict = {"status": "failed", "run_dir": None}
    notes: list[str] = []  # what the job's log says first (a resumed run keeping what it began with)
    started = time.time()
    try:
        spec = build_spec(task, spec_data)
        # `run` is set as soon as the run is open, so that whatever fails after it, its outcome is recorded
        # and it is closed below.
        if resume is not None:
            run = _open_for_resume(task, workspace, resume)
            result["run_dir"] = str(run.dir)  # named from here on: a write below can fail (a full disk)
            spec = _start_resumed(run, spec, notes, job_id, emit)
        elif task.creates_run and workspace is not None:
            run, spec_dict = _create_run(task, spec, workspace, run_id)
            result["run_dir"] = str(run.dir)  # the folder exists from here on, even if the next write fails
            _start_created(task, run, spec_dict, emit)
        else:
            emit("status", {"state": "running"}, [])
        ctx = TaskContext(
            emit,
            stop_event=stop_event,
            run=run,
            job_id=job_id,
            workspace=workspace,
            resuming=resume is not None,
        )
        value = _drive_logged(task, spec, ctx, notes)
        if isinstance(value, dict):
            result.update(value)
        elif value is not None:
            result["value"] = value
        result["status"] = "done"
    except JobCancelled as exc:
        result.update(status="cancelled", error=exc.to_dict())
    except WorkbenchError as exc:
        result.update(status="failed", error=exc.to_dict())
    except Exception as exc:  # a bug or an unexpected failure inside user code: report it, keep the worker
        result.update(status="failed", error={"type": type(exc).__name__, "message": str(exc) or repr(exc)})
        result["traceback"] = traceback.format_exc()
    except (SystemExit, KeyboardInterrupt) as exc:
        # Raised by the task's own code (a user's model file calling sys.exit, say): the worker and the
        # command line install their own Ctrl+C handlers, so a real Ctrl+C never arrives as an exception.
        # Letting it through would end the worker, or the CLI with an exit code and no result.
        result.update(status="failed", error={"type": type(exc).__name__, "message": _describe_escape(exc)})
        result["traceback"] = traceback.format_exc()
    result["elapsed_s"] = round(time.time() - started, 6)
    # error messages and reasons (a bench backend's) may carry a library's colours
    result = strip_ansi_deep(result)
    if run is not None:
        _record_and_close(run, result)
    emit(
        "status", {"state": result["status"], **({"error": result["error"]} if "error" in result else {})}, []
    )
    return result
