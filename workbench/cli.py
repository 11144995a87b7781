"""The `workbench` command: the window by default, and every job headless with the same spec and task code.

Exit codes: 0 done, 1 the job failed (the JSON says why), 2 bad usage or spec. A traceback only with --debug.
Nothing heavy is imported at module level: `workbench gui` must not pay for torch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from pathlib import Path

from workbench import __version__
from workbench.errors import JobError, UsageError, WorkbenchError
from workbench.task_ids import TaskId

# The job verbs and the worker task each runs; the capability issues register these tasks.
JOB_TASKS = {
    "train": TaskId.TRAIN.value,
    "quantize": TaskId.QUANT.value,
    "export": TaskId.EXPORT.value,
    "bench": TaskId.BENCH.value,
    "graph": TaskId.GRAPH.value,
    "lr-find": TaskId.LR_FIND.value,
    "predict": TaskId.PREDICT.value,
}
DIAG_TASKS = {"count": "debug.count", "sleep": "debug.sleep"}
# The diagnostics' number fields, checked before a run exists: a bad one is a bad spec (exit 2), not a failed
# run.
DIAG_NUMBERS = {"steps": int, "delay": float, "crash_at": int, "seconds": float}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # bad usage is exit code 2, like argparse's own
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _global_flags(parser: argparse.ArgumentParser, *, top: bool, json_flag: bool = True) -> None:
    """The flags every verb takes, before or after it: `workbench --workspace W runs list` is
    `workbench runs list --workspace W`. After the verb they default to SUPPRESS, so a flag given only
    before the verb is not overwritten by the verb's own default (the argparse idiom for this)."""
    default = (lambda value: value) if top else (lambda value: argparse.SUPPRESS)
    parser.add_argument(
        "--workspace",
        default=default(None),
        help="workspace folder for runs (default: the platform's user data folder)",
    )
    if json_flag:
        parser.add_argument(
            "--json",
            action="store_true",
            default=default(False),
            help="print exactly one JSON object (the result) on stdout",
        )
    parser.add_argument(
        "--debug", action="store_true", default=default(False), help="show tracebacks and debug logging"
    )
    parser.add_argument(
        "--allow-changed-code",
        action="store_true",
        default=default(False),
        help="let a later job of a run (graph, quantize, export, bench, predict, export-tensorboard) "
        "run user code that changed since the run trained",
    )


def _common(parser: argparse.ArgumentParser, *, spec: bool = True, json_flag: bool = True) -> None:
    if spec:
        parser.add_argument(
            "spec", nargs="?", help="a spec file (.toml or .json); defaults are used without one"
        )
        parser.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override a spec field, e.g. --set lr=0.01 --set dataset.name=mnist (repeatable)",
        )
        _trust_flag(parser)
    _global_flags(parser, top=False, json_flag=json_flag)


def _trust_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trust",
        action="store_true",
        help="trust the folders of the Python files this job runs (file:, lightning:) for this "
        "workspace, and go on",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="workbench", description="Torch Workbench: the window, and every job headless.")
    parser.add_argument("--version", action="version", version=f"workbench {__version__}")
    _global_flags(parser, top=True)
    parser.add_argument(
        "--connect",
        metavar="CONNECTION_FILE",
        default=None,
        help="attach the window to a worker started elsewhere",
    )
    sub = parser.add_subparsers(dest="verb", parser_class=_Parser)

    gui = sub.add_parser("gui", help="open the window (the default)")
    _global_flags(gui, top=False, json_flag=False)
    gui.add_argument(
        "--connect",
        metavar="CONNECTION_FILE",
        default=argparse.SUPPRESS,
        help="attach to a worker started elsewhere (`workbench worker`) instead of launching one",
    )

    for verb, task in JOB_TASKS.items():
        job = sub.add_parser(verb, help=f"run a {verb} job headless (task {task})")
        _common(job)
        if verb == "train":
            job.add_argument(
                "--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR from its last checkpoint"
            )
            job.add_argument(
                "--run-id",
                metavar="ID",
                default=None,
                help="the run's id: created with this id if absent, resumed from its last checkpoint if "
                "it exists (under torchrun: default torchrun-<rdzv id>, so every rank and every "
                "elastic restart joins the same run)",
            )

    data = sub.add_parser("data", help="dataset tools")
    data_sub = data.add_subparsers(dest="data_verb", required=True, parser_class=_Parser)
    _common(data_sub.add_parser("info", help="sizes, classes, class counts, mean/std of a dataset"))

    _common(sub.add_parser("devices", help="the devices torch can use here, with capabilities"), spec=False)

    runs = sub.add_parser("runs", help="list, show, delete or export (to TensorBoard) runs in the workspace")
    runs_sub = runs.add_subparsers(dest="runs_verb", required=True, parser_class=_Parser)
    _common(runs_sub.add_parser("list", help="every run, newest first"), spec=False)
    show = runs_sub.add_parser("show", help="one run's status, spec, last metrics and report")
    show.add_argument("run", help="run id, unique id prefix, or run folder")
    _common(show, spec=False)
    delete = runs_sub.add_parser("delete", help="delete a run folder")
    delete.add_argument("run", help="run id, unique id prefix, or run folder")
    _common(delete, spec=False)
    board = runs_sub.add_parser(
        "export-tensorboard",
        help="write a training run's metrics, spec and model graph as TensorBoard event files",
    )
    board.add_argument("run", help="the training run: id, unique id prefix, or run folder")
    board.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="the folder to write the event files into (default: the run's tensorboard/ folder, whose "
        "earlier event files are replaced)",
    )
    board.add_argument(
        "--no-graph",
        dest="graph",
        action="store_false",
        help="leave out the model graph (it rebuilds the model, and may read the dataset for its shape)",
    )
    _trust_flag(board)
    _common(board, spec=False)

    trust = sub.add_parser(
        "trust", help="trust a folder's Python files (file:, lightning:) to run in this workspace"
    )
    trust.add_argument("folder", nargs="?", help="the folder to trust (and every folder inside it)")
    trust.add_argument("--list", action="store_true", help="list the trusted folders")
    trust.add_argument("--remove", metavar="FOLDER", default=None, help="stop trusting FOLDER")
    _common(trust, spec=False)

    report = sub.add_parser(
        "report", help="one self-contained HTML page of a model: train, quantize, export, bench"
    )
    report.add_argument(
        "run",
        help="the training run: id, unique id prefix, or run folder (a quantize, export or "
        "bench run stands for the training run behind it)",
    )
    report.add_argument(
        "--output",
        "-o",
        metavar="FILE.html",
        default=None,
        help="where to write the page (default: the training run's artifacts/report.html)",
    )
    _common(report, spec=False)

    desktop = sub.add_parser("desktop", help="add the app to this user's desktop menu, or take it out")
    desktop_sub = desktop.add_subparsers(dest="desktop_verb", required=True, parser_class=_Parser)
    for name, text in (
        ("install", "write the menu entry and icons into $XDG_DATA_HOME (default ~/.local/share)"),
        ("uninstall", "remove the menu entry and icons that install wrote"),
    ):
        cmd = desktop_sub.add_parser(name, help=text)
        cmd.add_argument(
            "--data-home",
            metavar="DIR",
            default=None,
            help="the XDG data folder to use (default: $XDG_DATA_HOME, else ~/.local/share)",
        )
        _common(cmd, spec=False)

    diag = sub.add_parser("diag", help="diagnostic jobs that exercise the run store and progress (no torch)")
    diag.add_argument("diag_task", choices=sorted(DIAG_TASKS))
    _common(diag)

    worker = sub.add_parser("worker", help="run a worker process (for a remote GPU box, say)")
    worker.add_argument("--connection-file", required=True, help="where to write ports; must hold the key")
    worker.add_argument("--ip", default=None, help="address to bind (default 127.0.0.1)")
    worker.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="debug logging")
    return parser


# -- output ----------------------------------------------------------------------------------------
def _print_result(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, default=str))
        return
    status = result.get("status", "done")
    if result.get("error"):
        print(f"{status}: {result['error'].get('message')}", file=sys.stderr)
    shown = {k: v for k, v in result.items() if k not in ("error", "traceback")}
    print(json.dumps(shown, indent=2, default=str))


def _load_spec(verb: str, path: str | None, overrides: list[str]):
    from workbench.specs import apply_overrides, spec_for

    spec_cls = spec_for(verb)
    data = spec_cls.load(path).to_dict() if path else {}
    return spec_cls.from_dict(apply_overrides(data, overrides, spec_cls))


class _Progress:
    """Progress to stderr (a rich bar on a terminal, plain lines otherwise); stdout stays for the result."""

    def __init__(self, title: str):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        # soft_wrap: a run folder path must come out on one line even in a narrow or piped stderr.
        self.console = Console(stderr=True, soft_wrap=True)
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[text]}"),
            console=self.console,
            transient=False,
            disable=not self.console.is_terminal,
        )
        self.task = self.bar.add_task(title, total=None, text="")

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def emit(self, msg_type: str, content: dict, buffers: list) -> None:
        if msg_type == "progress":
            self.bar.update(
                self.task,
                completed=content.get("done"),
                total=content.get("total"),
                text=content.get("text", ""),
            )
        elif msg_type == "log":
            self.console.print(f"[{content.get('level', 'info')}] {content.get('text', '')}", markup=False)
        elif msg_type == "status" and content.get("run_dir"):
            self.console.print(f"run folder: {content['run_dir']}", markup=False, highlight=False)


class _ReservedStdout:
    """With --json, stdout belongs to the one result object: everything else written there (a print in a
    user's model file, a C library's chatter on fd 1) goes to stderr until the result is written."""

    def __init__(self, active: bool):
        self.active = active
        self.fd: int | None = None
        self._redirect = None

    def __enter__(self) -> _ReservedStdout:
        if not self.active:
            return self
        sys.stdout.flush()
        try:
            self.fd = os.dup(1)
            os.dup2(2, 1)
        except OSError:  # no real fd 1 (an embedding host): the Python-level redirect still holds
            self.fd = None
        self._redirect = contextlib.redirect_stdout(sys.stderr)
        self._redirect.__enter__()
        return self

    def write_now(self, text: str) -> None:
        """Write the result from any thread, even while the main thread is stuck (for a forced exit)."""
        if self.fd is not None:
            os.write(self.fd, text.encode("utf-8"))
        else:
            sys.__stdout__.write(text)
            sys.__stdout__.flush()

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        self._redirect.__exit__(*exc)
        sys.stdout.flush()
        if self.fd is not None:
            os.dup2(self.fd, 1)
            os.close(self.fd)
            self.fd = None


def run_headless(
    task_name: str,
    spec,
    *,
    workspace: Path | None,
    as_json: bool,
    debug: bool,
    resume: str | None = None,
    then=None,
    run_id: str | None = None,
) -> int:
    """Run a task in this process with the same runner the worker uses; `then(result)`, when given, runs after
    a job that is done and gives the exit code (`workbench graph --set open_browser=true` serves the graph).

    Ctrl+C (or SIGTERM) once cancels at the next step; a second one stops at once (exit 130, or 143 for
    SIGTERM) with the run marked cancelled, even when the job is stuck in user code.
    """
    from workbench.interrupts import JobInterrupts, exit_code_for, guard_exit, hard_exit
    from workbench.worker.host_memory import keep_freed_memory
    from workbench.worker.registry import get_task
    from workbench.worker.runner import run_task

    keep_freed_memory()  # the same heap settings as the worker's, before this job starts threads
    try:
        task = get_task(task_name)
    except UsageError:
        raise JobError(f"this build has no {task_name!r} task yet, so this job cannot run") from None
    stop = threading.Event()
    seen: dict = {"run_dir": None}

    with _ReservedStdout(as_json) as stdout:

        def force(signum: int) -> None:
            message = (
                "stopped at once by a second interrupt; the run keeps what it had saved (resume it from its "
                "last checkpoint)"
            )
            if seen["run_dir"]:
                from workbench.runs import force_end_own_run

                force_end_own_run(seen["run_dir"], "cancelled", message)
            say_now(
                {
                    "run_dir": seen["run_dir"],
                    "status": "cancelled",
                    "error": {"type": "JobCancelled", "message": message},
                }
            )
            hard_exit(exit_code_for(signum))

        def exited(code: int) -> int:
            # User code called os._exit: the run is left without an end state, which reads as interrupted.
            message = (
                f"the job's own code called os._exit({code}) and ended the process before the job finished; "
                "the run reads as interrupted"
            )
            say_now(
                {
                    "run_dir": seen["run_dir"],
                    "status": "interrupted",
                    "error": {"type": "ProcessExit", "message": message},
                }
            )
            return code if code else 1

        def say_now(result: dict) -> None:
            print(f"workbench: {result['error']['message']}", file=sys.stderr, flush=True)
            stdout.write_now(
                json.dumps(result, default=str) + "\n"
                if as_json
                else json.dumps(result, indent=2, default=str) + "\n"
            )

        with _Progress(task_name) as progress, JobInterrupts(stop, force), guard_exit(exited):

            def emit(msg_type: str, content: dict, buffers: list) -> None:
                if msg_type == "status" and content.get("run_dir"):
                    seen["run_dir"] = content["run_dir"]
                progress.emit(msg_type, content, buffers)

            spec_data = spec.to_dict() if hasattr(spec, "to_dict") else dict(spec)
            result = run_task(
                task, spec_data, emit=emit, stop_event=stop, workspace=workspace, resume=resume, run_id=run_id
            )
    if debug and result.get("traceback"):
        print(result["traceback"], file=sys.stderr)
    result.pop("traceback", None)
    _print_result(result, as_json)
    if result.get("status") != "done":
        return 1
    return then(result) if then is not None else 0


# -- verbs -----------------------------------------------------------------------------------------
def _workspace(args) -> Path:
    from workbench.workspace import resolve_workspace

    return resolve_workspace(getattr(args, "workspace", None))


def _cmd_job(args, verb: str, task_name: str) -> int:
    workspace = _workspace(args)
    resume = getattr(args, "resume", None)
    run_id = getattr(args, "run_id", None)
    if verb == "train" and (run_id or _torchrun_group() is not None):
        return _cmd_train_with_id(args, workspace, task_name, run_id)
    if resume:
        # The run's own spec, unless another is given; --set still applies (e.g. more epochs).
        from workbench.runs import RunStore

        run_dir = RunStore(workspace).resolve(resume)
        resume = str(run_dir)
        spec = _load_spec(verb, args.spec or str(run_dir / "spec.toml"), args.overrides)
        _check_lightning_resume(verb, spec, run_dir)
    else:
        spec = _load_spec(verb, args.spec, args.overrides)
    _check_trust(args, spec.to_dict(), workspace)
    then = None
    if verb == "graph" and (spec.open_browser or spec.port):
        then = lambda result: _serve_graph(result, workspace, spec.port, spec.open_browser)  # noqa: E731
    return run_headless(
        task_name, spec, workspace=workspace, as_json=args.json, debug=args.debug, resume=resume, then=then
    )


def _check_lightning_resume(verb: str, spec, run_dir: Path) -> None:
    """A Lightning run resumed with fewer epochs than it has done, or a detection run with no more, is a bad
    spec, refused before the run is touched."""
    from workbench.worker.lightning import is_lightning_name

    if verb == "train" and is_lightning_name(spec.model.name):
        from workbench.worker.lightning.route import check_resume_epochs

        check_resume_epochs(spec, run_dir)
    elif verb == "train" and spec.task == "detection":
        from workbench.worker.training.detection import check_resume_epochs

        check_resume_epochs(spec, run_dir)


def _check_trust(args, spec_data: dict, workspace: Path, files=None) -> None:
    """Before anything imports it or a run folder is made: a job's user code must come from a trusted folder,
    or the user passes --trust (trusting its folders for this workspace: started knowingly). A UsageError
    (exit 2) otherwise."""
    from workbench import trust

    trust.check_spec_files(spec_data)
    files = trust.job_user_files(spec_data, workspace) if files is None else files
    untrusted = trust.untrusted(files, workspace)
    if not untrusted:
        return
    if not getattr(args, "trust", False):
        raise UsageError(trust.refusal(untrusted))
    for folder in trust.folders_of(untrusted):
        trust.trust_folder(workspace, folder)
        print(
            f"workbench: trusting {folder} for workspace {workspace}; its Python files run with your "
            "permissions",
            file=sys.stderr,
        )


def _torchrun_group():
    """The torchrun group this process is a rank of (torchrun's RANK, WORLD_SIZE, MASTER_ADDR/PORT), or
    None."""
    if not (os.environ.get("RANK") and os.environ.get("WORLD_SIZE") and os.environ.get("MASTER_ADDR")):
        return None  # not under torchrun: torch is not imported for nothing
    from workbench.worker.training import torchrun

    return torchrun.environment()


def _cmd_train_with_id(args, workspace: Path, task_name: str, run_id: str | None) -> int:
    """`workbench train --run-id ID`, and every `workbench train` under torchrun: one run id for all ranks and
    all elastic restarts. Global rank 0 creates the run, or resumes it from its last checkpoint; the other
    ranks join rank 0's run and write only their own log."""
    from workbench.worker.training import torchrun

    group = torchrun.environment()
    if args.resume:
        raise UsageError(
            "--resume and --run-id (or torchrun, which names the run itself) do not go together: "
            "--run-id resumes its run when it has a checkpoint"
        )
    if group is not None and run_id is None:
        run_id = torchrun.run_id_for(group)
    if group is not None and group.world_size > 1 and group.rank != 0:
        spec = _load_spec("train", args.spec, args.overrides)  # only its device counts: rank 0 sends the spec
        _check_trust(args, spec.to_dict(), workspace)
        with _ReservedStdout(args.json):
            result = torchrun.follow(spec, env=group, workspace=workspace)
        _print_result(result, args.json)
        return 0 if result["status"] == "done" else 1
    torchrun.activate(group)
    resume, create = torchrun.plan_run(workspace, run_id)
    if resume:
        spec = _load_spec("train", args.spec or str(Path(resume) / "spec.toml"), args.overrides)
    else:
        spec = _load_spec("train", args.spec, args.overrides)
    _check_trust(args, spec.to_dict(), workspace)
    return run_headless(
        task_name,
        spec,
        workspace=workspace,
        as_json=args.json,
        debug=args.debug,
        resume=resume,
        run_id=create,
    )


def _serve_graph(result: dict, workspace: Path, port: int, open_browser: bool) -> int:
    """Serve a built graph in Model Explorer on 127.0.0.1 until Ctrl+C (or SIGTERM), which ends it with exit
    0; open it in the browser on request."""
    import signal
    import time
    import webbrowser

    from workbench.graph_server.process import GraphServer

    server = GraphServer([workspace], port=port)
    server.start()
    try:
        deadline = time.monotonic() + 90
        while server.poll() == "starting" and time.monotonic() < deadline:
            time.sleep(0.2)
        if server.state != "ready":
            raise JobError(
                f"the graph viewer could not start{f' on port {port}' if port else ''}: "
                f"{server.error or 'no answer in 90 s'}; the graph is saved in {result['graph_json']}"
            )
        overlays = result.get("overlays") or {}
        url = server.url_for(result["graph_json"])
        # The asked-for Ctrl+C may come the moment the line is read, before any try around the wait is entered
        # (a CI run got exit 130 from that race): handlers that only set a flag take it wherever the main
        # thread is.
        stop = threading.Event()
        previous = {
            signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            print(
                f"workbench: the graph is at {url}\nworkbench: serving until Ctrl+C"
                + (f" (overlays: {', '.join(overlays)})" if overlays else ""),
                file=sys.stderr,
                flush=True,
            )
            if open_browser:
                webbrowser.open(url)
            while not stop.wait(0.5) and server.poll() == "ready":
                pass
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if stop.is_set():
            return 0
        raise JobError(f"the graph viewer stopped: {server.error or 'it exited'}")
    finally:
        server.stop()


def _cmd_devices(args) -> int:
    return run_headless("devices.list", {}, workspace=None, as_json=args.json, debug=args.debug)


def _cmd_runs(args) -> int:
    from workbench.runs import RunStore

    store = RunStore(_workspace(args))
    if args.runs_verb == "list":
        runs = store.list_runs()
        if args.json:
            print(json.dumps({"workspace": str(store.workspace), "runs": runs}, default=str))
        else:
            for run in runs:
                print(f"{run['id']:<40} {run['status']:<10} {run.get('task') or '':<20} {run['run_dir']}")
            if not runs:
                print(f"no runs in {store.workspace}", file=sys.stderr)
        return 0
    if args.runs_verb == "show":
        with store.open_run(args.run) as run:
            summary = run.summary()
        print(json.dumps(summary, indent=None if args.json else 2, default=str))
        return 0
    if args.runs_verb == "export-tensorboard":
        return _cmd_export_tensorboard(args, store)
    store.delete_run(args.run)
    if args.json:
        print(json.dumps({"deleted": args.run, "status": "done"}))
    return 0


def _cmd_export_tensorboard(args, store) -> int:
    # The writer is torch's SummaryWriter: loaded here only, so the other `runs` verbs stay torch-free.
    from workbench.trust import run_user_files
    from workbench.worker.training.tensorboard import export_run

    run_dir = store.resolve(args.run)
    if args.out is not None:
        _check_board_out(Path(args.out), run_dir, store.runs_dir)
    if args.graph:  # the graph rebuilds the model from the run's own code
        _check_trust(args, {}, store.workspace, files=run_user_files(store.workspace, str(run_dir)))
    with _ReservedStdout(args.json):  # a library's chatter while the graph is traced must not break the JSON
        result = export_run(run_dir, args.out, workspace=store.workspace, graph=args.graph)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    for warning in result.warnings:
        print(f"[warning] {warning}", file=sys.stderr)
    parts = [f"{result.scalars} scalars ({len(result.tags)} metrics)"]
    parts += ["the spec"] * result.spec + ["the model graph"] * result.graph
    if result.layer_steps:
        parts.append(
            f"layer histograms of {result.layer_steps} recorded step" + "s" * (result.layer_steps != 1)
        )
    replaced = f" (replacing {result.replaced} earlier event file(s))" if result.replaced else ""
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    print(f"wrote {listed} from run {run_dir.name} to {result.log_dir}{replaced}")
    print(f"view them with: {result.command}")
    return 0


def _check_board_out(out: Path, run_dir: Path, runs_dir: Path) -> None:
    """--out must not be the filesystem's root, another run's folder or a run's checkpoints/: event files
    there would mix into what that run (or its checkpoints) holds. A folder of its own inside this run is
    fine."""
    target = out.expanduser().resolve()
    if target == Path(target.anchor):
        raise UsageError(f"--out {out}: the filesystem's root; give a folder of its own for the event files")
    runs = runs_dir.resolve()
    if not target.is_relative_to(runs):
        return
    own = run_dir.resolve()
    if not target.is_relative_to(own):
        raise UsageError(
            f"--out {out} is inside another run's folder ({runs}); give a folder outside the workspace's "
            "runs, or one inside this run"
        )
    if target.is_relative_to(own / "checkpoints"):
        raise UsageError(f"--out {out} is inside the run's checkpoints/; give another folder")


def _cmd_report(args) -> int:
    from workbench.report import collect, write_story

    story = collect(_workspace(args), args.run)
    path = write_story(story, args.output)
    runs = story.summary()
    if args.json:
        print(
            json.dumps({"run_dir": str(story.train.dir), "status": "done", "output": str(path), "runs": runs})
        )
    else:
        print(
            f"report of {story.train.id}: 1 training, {len(runs['quantize'])} quantize, "
            f"{len(runs['export'])} export and {len(runs['bench'])} benchmark runs",
            file=sys.stderr,
        )
        print(path)
    return 0


def _cmd_trust(args) -> int:
    from workbench import trust

    workspace = _workspace(args)
    if sum(bool(x) for x in (args.folder, args.list, args.remove)) != 1:
        raise UsageError("trust: name one folder to trust, or pass --list, or --remove FOLDER")
    if args.list:
        folders = [str(p) for p in trust.trusted_folders(workspace)]
        if args.json:
            print(
                json.dumps(
                    {
                        "run_dir": None,
                        "status": "done",
                        "workspace": str(workspace),
                        "trusted": folders,
                        "bundled": str(trust.examples_folder()),
                    }
                )
            )
        else:
            for folder in folders:
                print(folder)
            print(
                f"{len(folders)} trusted folder(s) in {workspace}; the bundled examples "
                f"({trust.examples_folder()}) are always trusted",
                file=sys.stderr,
            )
        return 0
    if args.remove:
        folder = trust.untrust_folder(workspace, args.remove)
        action = "removed"
    else:
        folder = trust.trust_folder(workspace, args.folder)
        action = "trusted"
    if args.json:
        print(json.dumps({"run_dir": None, "status": "done", "action": action, "folder": str(folder)}))
    else:
        print(
            f"{action}: {folder}"
            + (
                f" (its Python files and its subfolders' run with your permissions in workspace {workspace})"
                if action == "trusted"
                else ""
            )
        )
    return 0


def _cmd_desktop(args) -> int:
    from workbench import desktop

    data_home = Path(args.data_home).expanduser() if args.data_home else None
    files = (desktop.install if args.desktop_verb == "install" else desktop.uninstall)(data_home)
    if args.json:
        print(
            json.dumps(
                {
                    "run_dir": None,
                    "status": "done",
                    "action": args.desktop_verb,
                    "files": [str(path) for path in files],
                }
            )
        )
        return 0
    for path in files:
        print(path)
    if args.desktop_verb == "install":
        print(
            f"Torch Workbench is in the desktop menu; it starts {desktop.exec_command()[0][0]}",
            file=sys.stderr,
        )
    elif not files:
        print("nothing to remove: the menu entry was not installed", file=sys.stderr)
    return 0


def _cmd_diag(args) -> int:
    # Diagnostic tasks take plain dicts, so --set values are read as JSON scalars (3, 0.5, true) or strings.
    data: dict = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--set {item}: expected KEY=VALUE")
        try:
            data[key] = json.loads(value)
        except ValueError:
            data[key] = value
        _check_diag_number(key, data[key])
    return run_headless(
        DIAG_TASKS[args.diag_task], data, workspace=_workspace(args), as_json=args.json, debug=args.debug
    )


def _check_diag_number(key: str, value) -> None:
    """A SpecError naming the field when a diagnostic's number field is not a number of its kind."""
    from workbench.specs import _to_float, _to_int

    kind = DIAG_NUMBERS.get(key)
    if kind is not None:
        (_to_int if kind is int else _to_float)(value, key)


def _cmd_gui(args) -> int:
    from workbench.gui.app import run_gui
    from workbench.workspace import resolve_workspace

    workspace = resolve_workspace(args.workspace) if args.workspace is not None else None
    return run_gui(workspace, connection_file=args.connect)


def _cmd_worker(args) -> int:
    from workbench.worker.__main__ import main as worker_main

    argv = ["--connection-file", args.connection_file] + (["--ip", args.ip] if args.ip else [])
    return worker_main(argv + (["--debug"] if args.debug else []))


def dispatch(args) -> int:
    verb = args.verb or "gui"
    if getattr(args, "allow_changed_code", False):
        from workbench.trust import set_allow_changed_code

        set_allow_changed_code(True)
    if verb == "gui":
        return _cmd_gui(args)
    if verb in JOB_TASKS:
        return _cmd_job(args, verb, JOB_TASKS[verb])
    if verb == "data":
        return _cmd_job(args, "data", "data.info")
    if verb == "devices":
        return _cmd_devices(args)
    if verb == "runs":
        return _cmd_runs(args)
    if verb == "report":
        return _cmd_report(args)
    if verb == "trust":
        return _cmd_trust(args)
    if verb == "desktop":
        return _cmd_desktop(args)
    if verb == "diag":
        return _cmd_diag(args)
    return _cmd_worker(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = getattr(args, "debug", False)
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    as_json = getattr(args, "json", False)
    try:
        return dispatch(args)
    except WorkbenchError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        if as_json:
            print(json.dumps({"run_dir": None, "status": "failed", "error": exc.to_dict()}))
        print(f"workbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    # the reader left (`| head`): nothing more can be said there, and it is no error of ours
    except BrokenPipeError:
        return _stdout_gone()
    except KeyboardInterrupt:  # a real Ctrl+C outside a job (a job's own are handled in run_headless)
        if as_json:
            print(
                json.dumps(
                    {
                        "run_dir": None,
                        "status": "cancelled",
                        "error": {"type": "KeyboardInterrupt", "message": "interrupted"},
                    }
                )
            )
        print("workbench: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: say so briefly; the traceback is one flag away
        if debug:
            raise
        if as_json:
            print(
                json.dumps(
                    {
                        "run_dir": None,
                        "status": "failed",
                        "error": {"type": type(exc).__name__, "message": str(exc)},
                    }
                )
            )
        print(
            f"workbench: internal error: {type(exc).__name__}: {exc} (run again with --debug for details)",
            file=sys.stderr,
        )
        return 1


def _stdout_gone() -> int:
    """141, the shell's code for a write to a closed pipe (128 + SIGPIPE), without a traceback: stdout is
    pointed at devnull so the interpreter's last flush of what was left does not raise again."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141


if __name__ == "__main__":
    sys.exit(main())
