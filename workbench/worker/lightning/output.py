"""Lightning's own messages (its INFO lines and Python warnings) into the job's log while it trains, instead
of the worker's stderr, so the window and `workbench train` show them as log lines. Imports no lightning
itself.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

LOGGERS = ("lightning.pytorch", "lightning.fabric", "lightning")
# Lines that only describe hardware the run does not use, or Lightning's own tips: they would fill every job's
# log.
NOISE = (
    "TPU available",
    "HPU available",
    "IPU available",
    "GPU available: False",
    "💡",
    "LOCAL_RANK",
    "`Trainer.fit` stopped",
    "Checkpoint directory",
    "Trainer already configured with model summary",
    # the last: Lightning's own use of a torch API that torch deprecated, nothing the user can change
    "LeafSpec",
)


class _ToJobLog(logging.Handler):
    def __init__(self, log):
        super().__init__(logging.INFO)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().strip()
        except Exception:  # a library's malformed record must not end the job
            return
        if text and not any(part in text for part in NOISE):
            self._log(f"lightning: {text}", "warning" if record.levelno >= logging.WARNING else "info")


@contextlib.contextmanager
def lightning_messages(log) -> Iterator[None]:
    """Route Lightning's logging and warnings to `log(text, level)` for the duration, then restore them."""
    handler = _ToJobLog(log)
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate, logger.level))
        logger.handlers = [handler] if name == LOGGERS[0] or name == LOGGERS[1] else []
        logger.propagate = False
        logger.setLevel(logging.INFO)
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        text = str(message).strip().splitlines()[0] if str(message).strip() else category.__name__
        if text not in seen and not any(part in text for part in NOISE):  # once per job, as Python shows them
            seen.add(text)
            log(f"lightning: {text}", "warning")

    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = show
        try:
            yield
        finally:
            for logger, handlers, propagate, level in saved:
                logger.handlers, logger.propagate = handlers, propagate
                logger.setLevel(level)
