"""`python -m workbench.worker --connection-file F`: start a worker that binds free ports and writes them to
F.

Off loopback (`--ip 0.0.0.0`, a LAN address) every channel is CurveZMQ-encrypted and F gains the server's
public key.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path

from workbench.protocol import ConnectionInfo
from workbench.protocol.connection import clean_address


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workbench.worker", description=__doc__)
    parser.add_argument(
        "--connection-file",
        required=True,
        help="JSON file with the session key; the worker writes its ports into it",
    )
    parser.add_argument(
        "--ip",
        default=None,
        help="address to bind (default: the file's, normally 127.0.0.1; IPv6 as ::1 or [::1]); "
        "any address that is not loopback is served encrypted (CurveZMQ) and its public key "
        "written to the file",
    )
    parser.add_argument(
        "--parent-pid",
        type=int,
        default=0,
        help="exit when this process (the GUI) is gone, so no orphan worker holds a GPU",
    )
    parser.add_argument("--debug", action="store_true", help="log debugging detail to stderr")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="worker %(levelname)s %(name)s: %(message)s",
    )
    from workbench.worker.host_memory import keep_freed_memory

    keep_freed_memory()  # before the kernel starts its threads: each keeps the heap it first takes
    path = Path(args.connection_file)
    created = not path.exists()
    try:
        # " [::1]" -> "::1"; "" is refused, not ignored
        ip = None if args.ip is None else clean_address(args.ip)
        # A worker started by hand for another machine's window makes its own file (key included, mode 0600);
        # one launched by the window finds the file the window wrote.
        conn = ConnectionInfo.new(ip or "127.0.0.1") if created else ConnectionInfo.read(path)
    except ValueError as exc:
        print(f"workbench worker: {exc}", file=sys.stderr)
        return 2
    if ip is not None:
        conn.ip = ip
    import zmq

    from workbench.protocol.sockets import InsecureAddressError
    from workbench.worker.kernel import Kernel

    try:
        kernel = Kernel(conn)
    except InsecureAddressError as exc:
        print(f"workbench worker: {exc}", file=sys.stderr)
        return 2
    except zmq.ZMQError as exc:  # not an address or interface of this machine, or its port is taken
        print(
            f"workbench worker: cannot listen on {conn.ip}: {exc.strerror}; give an address of this machine "
            f"(127.0.0.1, ::1, a LAN address, or 0.0.0.0 for all)",
            file=sys.stderr,
        )
        return 2
    conn.write(path)  # now with the bound ports: the launcher waits for them
    if created:
        where = (
            f' and set its "ip" to this machine\'s address (e.g. {socket.gethostname()})'
            if conn.ip in ("0.0.0.0", "::", "*")
            else ""
        )
        print(
            f"workbench worker: listening on {conn.ip}; wrote {path} (it holds the session key: keep it "
            f"private). Copy it to the machine with the window{where}, then run `workbench --connect "
            f"{path.name}` there.",
            file=sys.stderr,
            flush=True,
        )
    if args.parent_pid:
        threading.Thread(target=_watch_parent, args=(args.parent_pid, kernel), daemon=True).start()
    kernel.serve_forever()
    return 0


def _watch_parent(pid: int, kernel) -> None:
    """Shut down once `pid` is gone. For our own parent, a changed os.getppid() says so even while it is a
    zombie; a process further up (a launcher script sits between) is polled with signal 0."""
    is_parent = os.getppid() == pid
    while True:
        if is_parent:
            if os.getppid() != pid:
                break
        else:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass  # it exists, owned by someone else
        time.sleep(0.5)
    kernel.request_shutdown()


if __name__ == "__main__":
    sys.exit(main())
