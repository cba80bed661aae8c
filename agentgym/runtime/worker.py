"""The worker process behind `ProcessEnv`: ``python -m agentgym.runtime.worker FD NAME``.

It reads ``(env_id, entry_point, kwargs)`` from the socket at file descriptor
FD, makes the env, sends its description, then answers ``(method, args,
kwargs)`` calls (see `agentgym.runtime.dispatch`) with ``("ok", result)`` or
``("err", exception)`` until it is told to close or its parent goes away.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

from agentgym.registration import EnvSpec
from agentgym.runtime.dispatch import dispatch
from agentgym.runtime.proxy import describe_env

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


#: what a send or receive raises once the parent is gone (killed, or its end closed): nobody is left to answer
_PARENT_GONE = (BrokenPipeError, ConnectionResetError, EOFError)


def _send_error(conn: Any, exc: BaseException) -> None:
    try:
        conn.send(("err", exc))
    except _PARENT_GONE:
        raise
    except Exception:  # the exception itself does not pickle: send its text
        conn.send(("err", RuntimeError(f"{type(exc).__name__}: {exc}")))


def worker_main(conn: Any) -> None:
    """The worker: make the env it is sent, answer calls until told to close or the parent goes away (then
    close the env and end quietly: a killed trainer's workers leave no tracebacks in its log)."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    env = None
    try:
        try:
            env_id, entry_point, kwargs = conn.recv()
            env = EnvSpec(id=env_id, entry_point=entry_point, kwargs=dict(kwargs)).make()
            conn.send(("ok", describe_env(env)))
        except _PARENT_GONE:
            raise
        except BaseException as exc:
            _send_error(conn, exc)
            return
        _serve(conn, env)
    except (*_PARENT_GONE, OSError):
        return
    finally:
        if env is not None:
            with contextlib.suppress(Exception):
                env.close()
    with contextlib.suppress(OSError):
        conn.send(("ok", None))  # the close is acknowledged once the env has closed


def _serve(conn: Any, env: Any) -> None:
    """Answer calls until a ``close`` (returns) or the parent goes away (raises)."""
    while True:
        method, args, call_kwargs = conn.recv()
        if method == "close":
            return
        try:
            reply = ("ok", dispatch(env, method, args, call_kwargs))
        except BaseException as exc:
            _send_error(conn, exc)
            continue
        try:
            conn.send(reply)
        except _PARENT_GONE:
            raise
        except Exception as exc:  # a reply that does not pickle
            _send_error(conn, RuntimeError(f"the reply of {method} cannot be sent to the collector: {exc}"))


if __name__ == "__main__":
    worker_main(Connection(int(sys.argv[1])))
