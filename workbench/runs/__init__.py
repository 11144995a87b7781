"""The durable run store: run directories under workspace/runs, their SQLite metrics and events, atomic file
writes. layout.py names what a run folder holds, atomic.py writes files atomically, ownership.py guards a run
by its owner's lock, run.py is one run, store.py the workspace's runs. Stdlib and tomli_w only: no torch, no
Qt, no numpy.
"""

from __future__ import annotations

from workbench.runs.atomic import (  # noqa: F401 - the package's public names
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    atomic_writer,
)
from workbench.runs.layout import (  # noqa: F401 - the package's public names
    _GIVEN_ID,
    _RUN_ID,
    DB_NAME,
    INTERRUPTED,
    LIVE_STATUSES,
    LOCK_NAME,
    SCHEMA_VERSION,
    STATUSES,
    _now,
)
from workbench.runs.ownership import (  # noqa: F401 - the package's public names
    RunBusyError,
    RunOwner,
    run_owner,
    sweep_dead_staging,
)
from workbench.runs.run import (  # noqa: F401 - the package's public names
    Run,
    effective_status,
    force_end_own_run,
    interrupted_message,
    mark_run_ended,
    read_text_file,
    upgrade_run_spec,
)
from workbench.runs.store import (  # noqa: F401 - the package's public names
    RunStore,
)
