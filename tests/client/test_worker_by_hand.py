"""`workbench worker --connection-file F` started by hand (for another machine's window) makes F itself."""

from __future__ import annotations

import stat
import subprocess
import sys

from waiting import wait_until

from workbench.client import WorkerClient
from workbench.protocol import ConnectionInfo


def test_a_worker_started_by_hand_writes_a_private_connection_file_that_a_client_can_use(tmp_path):
    path = tmp_path / "conn.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workbench", "worker", "--connection-file", str(path)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        conn = wait_until(
            lambda: path.exists() and (c := ConnectionInfo.read(path)).bound and c,
            timeout=30,
            what="the worker to write its ports",
        )
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert len(conn.key) >= 32 and conn.ip == "127.0.0.1"
        client = WorkerClient(conn)
        try:
            assert client.wait_ready(30)
            assert client.call("ping_request", channel="control").content["status"] == "ok"
        finally:
            client.close()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert f"wrote {path}" in err and "keep it private" in err
