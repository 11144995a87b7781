"""A real worker that ignores SIGINT, SIGTERM and shutdown requests, so only SIGKILL can stop it.

Launched by tests/worker/test_worker_process.py to prove WorkerManager.shutdown escalates all the way.
It still answers pings and runs jobs, so the manager sees an otherwise healthy worker.
"""

from __future__ import annotations

import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal = lambda *args, **kwargs: None  # Kernel.serve_forever must not install its own handlers

import workbench.worker.kernel as kernel  # noqa: E402
from workbench.protocol import ProtocolError  # noqa: E402

_real_decode = kernel.decode


def _decode_ignoring_shutdown(frames, signer):
    identities, msg = _real_decode(frames, signer)
    if msg.msg_type == "shutdown_request":
        raise ProtocolError("this worker ignores shutdown requests")  # dropped without a reply
    return identities, msg


kernel.decode = _decode_ignoring_shutdown

if __name__ == "__main__":
    from workbench.worker.__main__ import main

    sys.exit(main())
