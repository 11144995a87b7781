"""Run `workbench ARGS` as a real child process forked from a server that has already imported torch and the
CLI.

Each command still gets a process of its own (its own exit code, stdout, stderr, working folder, environment
and signals), but not the ~20 s that `import torch` costs a fresh interpreter on a slow machine: the suite
runs dozens of commands. Tests that are about the interpreter's start itself (imports, the installed script)
spawn `python -m workbench` as before.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

# What the server imports once; the children then start with it loaded: torch, what a training job imports on
# its first optimizer (torch._dynamo, 19 s on a slow machine), export's and bench's onnx. A module that reads
# an environment variable a test sets when it is imported does not belong here (torch._inductor reads CXX: the
# test that sets it runs a fresh interpreter).
PRELOAD = ["torch", "torchvision", "torch._dynamo", "numpy", "onnx", "onnxruntime", "workbench.cli"]

_context = None


def _server():
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _child(argv: list[str], env: dict, cwd: str, stdin: str, stdout: str, stderr: str) -> None:
    """In the forked child: become `workbench ARGV` in `cwd` with `env`, its streams on the given files."""
    import atexit
    import io

    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    # Streams as a fresh interpreter makes them for pipes: stdout block-buffered, stderr line-buffered.
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    sys.argv = ["workbench", *argv]
    from workbench.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    atexit._run_exitfuncs()  # multiprocessing's children skip them; the real command runs them
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


def run_cli(
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    timeout: float = 60,
    input: str | None = None,
) -> subprocess.CompletedProcess:
    """`workbench ARGV` to its end, like subprocess.run(capture_output=True, text=True, timeout=timeout)."""
    with tempfile.TemporaryDirectory(prefix="wb-cli-") as folder:
        paths = {name: os.path.join(folder, name) for name in ("stdin", "stdout", "stderr")}
        for name, path in paths.items():
            with open(path, "w", encoding="utf-8") as f:
                f.write(input or "" if name == "stdin" else "")
        process = _server().Process(
            target=_child,
            args=(list(argv), dict(env), str(cwd), paths["stdin"], paths["stdout"], paths["stderr"]),
        )
        process.start()
        process.join(timeout)
        timed_out = process.exitcode is None
        if timed_out:
            process.kill()
            process.join()

        def read(name: str) -> str:
            with open(paths[name], encoding="utf-8", errors="replace") as f:
                return f.read()

        out, err = read("stdout"), read("stderr")
        args = ["workbench", *argv]
        if timed_out:
            raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(args, process.exitcode, out, err)
