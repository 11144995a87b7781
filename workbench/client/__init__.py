"""The GUI's and tests' side of the worker: launch, talk, watch, restart. No Qt and no torch here."""

from workbench.client.client import WorkerClient
from workbench.client.jobs import JobRecord, JobTable
from workbench.client.manager import WorkerManager, describe_exit

__all__ = ["JobRecord", "JobTable", "WorkerClient", "WorkerManager", "describe_exit"]
