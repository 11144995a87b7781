"""The few exception types every process shares; each maps to one exit code and one user message.

No torch, no Qt: the GUI, the worker and the command line all import this.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    """An error whose message is written for the user: no traceback is shown unless --debug."""

    exit_code = 1

    def to_dict(self) -> dict:
        return {"type": type(self).__name__, "message": str(self)}


class UsageError(WorkbenchError):
    """Bad command line, bad spec file or bad field value (exit code 2)."""

    exit_code = 2


class SpecError(UsageError):
    """A spec field is missing, unknown or out of range; the message names the field."""


class JobError(WorkbenchError):
    """A job failed for a reason the user can act on (exit code 1)."""


class JobCancelled(WorkbenchError):
    """The user asked the job to stop; raised at the next step boundary."""


class CheckpointError(JobError):
    """A checkpoint file is missing, truncated or holds more than plain weights."""
