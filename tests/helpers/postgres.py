"""The PostgreSQL server the test session uses: a named one, the local one, or a throwaway one it starts.

    AGENTGYM_TEST_POSTGRES_URL=postgresql+psycopg://user@host:port/db   use that server (fail if unreachable)
    AGENTGYM_TEST_POSTGRES_URL=throwaway                                always start a throwaway server
    (unset)                                     use 127.0.0.1:5432 (trust auth) if it answers, else start one

A throwaway server is Debian's PostgreSQL (`initdb` and `pg_ctl` from /usr/lib/postgresql/*/bin, package
`postgresql`, installed by scripts/apt.sh): a fresh cluster in a temporary directory with trust auth,
listening on a free loopback port, stopped and deleted at the end of the session. PostgreSQL refuses to
run as root, so under root the cluster belongs to (and runs as) the `postgres` user, or `nobody`.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from agentgym.launch import free_port

ENV_VAR = "AGENTGYM_TEST_POSTGRES_URL"
LOCAL_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
START_TIMEOUT_S = 60


@dataclass
class PostgresServer:
    """An admin URL and where it came from (printed by the test session)."""

    url: str
    origin: str  #: "named by AGENTGYM_TEST_POSTGRES_URL" | "local server" | "throwaway server (...)"
    data_dir: Path | None = None  #: set for a throwaway server
    bin_dir: Path | None = None
    user: str | None = None  #: the OS user a throwaway server runs as (None: the current one)

    def stop(self) -> None:
        """Stop and delete a throwaway server (an existing server is left alone)."""
        if self.data_dir is None or self.bin_dir is None:
            return
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir / "data"), "-m", "immediate", "-w", "stop"],
             self.user, check=False)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def reachable(url: str, timeout_s: int = 3) -> str | None:
    """None when `url` answers `SELECT 1`, else why not."""
    engine = sa.create_engine(url, connect_args={"connect_timeout": timeout_s})
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means "not usable"; the reason is reported
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        engine.dispose()


def find_server(local_url: str = LOCAL_URL) -> PostgresServer:
    """The server this session uses (see the module docstring); raises RuntimeError naming the fix."""
    named = os.environ.get(ENV_VAR, "").strip()
    if named and named != "throwaway":
        why = reachable(named)
        if why is not None:
            raise RuntimeError(f"{ENV_VAR}={named} is not reachable ({why}); start that server, fix the URL, "
                               f"or unset {ENV_VAR} to let the tests start a throwaway server")
        return PostgresServer(named, f"named by {ENV_VAR}")
    if not named and reachable(local_url) is None:
        return PostgresServer(local_url, "local server")
    return start_throwaway()


def postgres_bin_dir() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian's layout, then PATH)."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name),
                            reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found and no server reachable: "
                       f"install them (apt-get install postgresql; scripts/apt.sh does) or set {ENV_VAR}")


def start_throwaway() -> PostgresServer:
    """initdb + pg_ctl start on a free loopback port; the caller stops it (`PostgresServer.stop`)."""
    bin_dir = postgres_bin_dir()
    user = _service_user()
    root = Path(tempfile.mkdtemp(prefix="agentgym-test-pg-"))
    server = PostgresServer("", "", data_dir=root, bin_dir=bin_dir, user=user)
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        data, port = root / "data", free_port()
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
              "--no-sync", "--no-instructions"], user)
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -F"
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w",
              "-t", str(START_TIMEOUT_S), "start"], user)
    except BaseException:
        server.stop()
        raise
    server.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    server.origin = f"throwaway server ({bin_dir.parent.name}, {bin_dir}, port {port}, as {user or 'current user'})"
    return server


def _service_user() -> str | None:
    """PostgreSQL will not run as root: under root, the `postgres` user (Debian's package makes it), or nobody."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and there is neither a 'postgres' nor a 'nobody' user to run "
                       "a throwaway PostgreSQL server as; run the tests as a normal user or set " + ENV_VAR)


def _run(cmd: list[str], user: str | None, *, check: bool = True) -> None:
    proc = subprocess.run(cmd, user=user, capture_output=True, text=True, timeout=START_TIMEOUT_S + 30,
                          cwd="/", env={**os.environ, "LC_ALL": "C.UTF-8"})
    if check and proc.returncode != 0:
        raise RuntimeError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {proc.stderr.strip()[-1500:]}")
