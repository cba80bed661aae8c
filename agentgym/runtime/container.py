"""The entry point of env server containers: ``python3 -m agentgym.runtime.container ENV_ID [options]``.

It serves ENV_ID on a unix socket in a directory the host mounted (containers
run with ``--network none``, so there is no port to publish), and with
``--watch-stdin`` it exits as soon as its standard input closes: the process
that started the container holds the other end of the attach socket, so when
that process dies, even by SIGKILL, the server stops and the engine removes
the container (see `agentgym.runtime.cluster`). A server that cannot start
(bad env kwargs, a missing package) writes why to ``startup-error.txt`` next
to the socket before it exits, since its logs go with the container.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

#: set by the root-sandbox container profile (agentgym.runtime.profile): serve as an unkillable pid 1
PID1_GUARD = "AGENTGYM_SERVER_PID1"
#: the file (next to the socket) where a server that fails to start writes why
STARTUP_ERROR = "startup-error.txt"


def _exit_on_eof() -> None:
    while sys.stdin.buffer.read(4096):
        pass
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="agentgym.runtime.container", description=__doc__)
    parser.add_argument("env_id")
    parser.add_argument("--uds", default="/run/agentgym/env.sock")
    parser.add_argument("--env-kwargs", default="{}")
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--idle-timeout", type=float, default=600.0)
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args(argv)
    from agentgym.registration import registry
    from agentgym.runtime.server import serve, server_factory

    spec = registry[args.env_id]
    factory = server_factory(spec, json.loads(args.env_kwargs))
    if args.watch_stdin:
        threading.Thread(target=_exit_on_eof, name="stdin-watch", daemon=True).start()
    run = functools.partial(_serve_or_report, os.path.dirname(args.uds), serve, spec.id, factory, uds=args.uds,
                            max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout, report_cgroup=True)
    if os.environ.get(PID1_GUARD) == "1":
        _serve_as_unkillable_init(run)
    else:
        run()


def _serve_or_report(report_dir: str, serve: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """`serve`; if it fails (bad env kwargs, a missing package), first write why into `report_dir` (the socket's),
    since the engine removes the container's logs with it."""
    try:
        serve(*args, **kwargs)
    except Exception as exc:
        with contextlib.suppress(OSError), open(os.path.join(report_dir, STARTUP_ERROR), "w") as out:
            out.write(f"{type(exc).__name__}: {exc}\n")
        raise


def _serve_as_unkillable_init(run: Callable[[], None]) -> None:
    """Serve as the container's pid 1 with no signal handler at all (a root-sandbox image, SRE-v0).

    The kernel delivers to a pid namespace's init only the signals it handles, and SIGKILL/SIGSTOP never, so
    the model, root in the same container with CAP_KILL, cannot stop the server by `kill -9 -1` or `kill 1`
    as long as no handler is installed: uvicorn installs its handlers only in the main thread, so it serves
    from another one, and SIGINT goes back to the default. Orphans the model leaves are reaped here.
    """
    from agentgym.sandboxes.inline import reap_orphans

    if os.getpid() != 1:
        raise SystemExit(f"{PID1_GUARD}=1 needs the server to be the container's pid 1 (start it without --init)")
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    reap_orphans()
    server = threading.Thread(target=run, name="env-server")
    server.start()
    server.join()


if __name__ == "__main__":
    main()
