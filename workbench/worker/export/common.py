"""What every export format shares: quieting the exporters' own printing, one-line failure reasons that name
the operator and the module behind a failed export, and writing the exported file so that a failure never
leaves half a file or destroys an earlier one. Worker side; never imports Qt.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from workbench.errors import JobError
from workbench.worker.graph.capture import describe_failure

_NOISY_LOGGERS = (
    "torch._dynamo",
    "torch.export",
    "torch._export",
    "torch.fx.experimental.symbolic_shapes",
    "torch._guards",
    "torch._subclasses",
    "torch.onnx",
    "onnxscript",
    "torch_tensorrt",
)

# How exporters name an operator they cannot handle: aten::foo / aten.foo.default (torch),
# OpOverload(op='x.y'), "operator 'x::y'" (the TorchScript exporter), "No ONNX function found for ..." (the
# torch.export-based exporter).
_OPERATOR_PATTERNS = (
    re.compile(r"OpOverload\(op='([\w.:]+)'"),
    re.compile(r"[Oo]perator '([\w.:]+)'"),
    re.compile(r"No (?:ONNX function|decomposition|converter) found for[^\w]*([\w.:]+)"),
    re.compile(
        r"\b((?:aten|prims|torchvision|workbench|[a-z_]+)(?:::|\.)[A-Za-z_]\w*(?:\.\w+)?)\b(?=[^\n]*"
        r"(?:not supported|unsupported|no ONNX|not implemented|NotImplemented))"
    ),
    re.compile(r"\b(aten(?:::|\.)[A-Za-z_]\w*)"),
)


_LIBRARY_SITE = re.compile(r" \(at [^()]*(?:site-packages|dist-packages)[^()]*\)$")


@contextlib.contextmanager
def quiet() -> Iterator[io.StringIO]:
    """Silence what exporters print and log (progress lines on stdout, whole graphs on a failure); what was
    printed is kept in the yielded buffer for a failure's message."""
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    buffer = io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(buffer),
            contextlib.redirect_stderr(buffer),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield buffer
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    error: BaseException | None = exc
    while error is not None and all(error is not seen for seen in chain) and len(chain) < 10:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def failed_operator(exc: BaseException) -> str | None:
    """The operator an export failure names, e.g. 'aten::linalg_eig' or 'mylib.op', or None."""
    text = "\n".join(str(error) for error in _chain(exc))
    for pattern in _OPERATOR_PATTERNS:
        match = pattern.search(text)
        if match:
            return match[1].rstrip(".")
    return None


def reason(exc: BaseException) -> str:
    """One line: the innermost error that says something (exporters wrap the real cause several times)."""
    chain = _chain(exc)
    error = next((e for e in reversed(chain) if str(e).strip()), exc)
    text = _LIBRARY_SITE.sub("", describe_failure(error))  # a line inside onnxruntime or onnx says nothing
    return text.rstrip(". ")


def modules_calling(program, operator: str) -> list[str]:
    """The modules (their paths in the model) whose forward calls `operator`, from an ExportedProgram's node
    metadata; [] when the program does not say."""
    if program is None or not operator:
        return []
    wanted = operator.replace("::", ".")
    found: list[str] = []
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target).replace("::", ".")  # an OpOverload prints as aten.linalg_eig.default
        if not (
            target == wanted
            or target.startswith(wanted + ".")
            or wanted.startswith(target + ".")
            or wanted.split(".")[-1] in target.split(".")
        ):
            continue
        stack = node.meta.get("nn_module_stack") or {}
        paths = [value[0] for value in stack.values()]
        path = paths[-1] if paths else ""
        if path and path not in found:
            found.append(path)
    return found


def file_size(path: Path) -> int:
    """The exported file's size, with its external-data file when it has one (a model over 2 GB)."""
    size = path.stat().st_size
    data = path.with_name(path.name + ".data")
    return size + (data.stat().st_size if data.is_file() else 0)


@contextlib.contextmanager
def staged_output(path: Path) -> Iterator[Path]:
    """A path to write the export to, in a hidden folder beside `path`; on success every file written there is
    moved into place (an ONNX file and its external data keep their names), on failure nothing changes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        target = stage / path.name
        yield target
        for item in sorted(stage.iterdir()):
            os.replace(item, path.parent / item.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def output_path(output: str, default_dir: Path | None, default_name: str, suffixes: tuple[str, ...]) -> Path:
    """Where the exported file goes: `output` (a file, or a folder to put `default_name` in), else the run's
    artifacts folder."""
    if not output:
        if default_dir is None:
            raise JobError(
                "output: empty, and this job has no run folder to write into; set output=<file>, or run "
                "the export with a workspace"
            )
        return default_dir / default_name
    path = Path(output).expanduser()
    if path.is_dir() or output.endswith(("/", os.sep)):
        return (path / default_name).absolute()
    if path.suffix.lower() not in suffixes:
        raise JobError(
            f"output: {path} does not end in {' or '.join(suffixes)}, the suffix of this format; "
            f"name it e.g. {path.with_suffix(suffixes[0]).name}"
        )
    return path.absolute()
