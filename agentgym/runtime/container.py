"""The entry point of env server containers: ``python3 -m agentgym.runtime.container ENV_ID [options]``.

It serves ENV_ID on a unix socket in a directory the host mounted (containers
run with ``--network none``, so there is no port to publish), and with
``--watch-stdin`` it exits as soon as its standard input closes: the process
that started the container holds the other end of the attach socket, so when
that process dies, even by SIGKILL, the server stops and the engine removes
the container (see `agentgym.runtime.cluster`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading


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
    serve(spec.id, factory, uds=args.uds, max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout)


if __name__ == "__main__":
    main()
