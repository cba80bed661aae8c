"""The escape suite: every attempt of a hostile command must fail and leave the host unharmed.

Runs on both backends; the local backend skips only what sandboxes/local.py
documents as unenforced (sandboxes.local.UNSUPPORTED).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import uuid
from pathlib import Path

from agentgym.sandboxes import Sandbox

from tests.sandboxes.conftest import SMALL, unsupported


def host_addresses() -> list[str]:
    """Every IPv4 address of the host, loopback included."""
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    except FileNotFoundError:
        out = [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    return list(dict.fromkeys(["127.0.0.1", *[a for a in out if ":" not in a]]))


def test_network_egress_fails(sandbox: Sandbox) -> None:
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    targets = [(addr, port) for addr in host_addresses()] + [("1.1.1.1", 53), ("8.8.8.8", 443)]
    probe = (
        "import socket, sys\n"
        f"for host, port in {targets!r}:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2).close()\n"
        "        print('CONNECTED', host, port)\n"
        "    except OSError as exc:\n"
        "        print('blocked', host, port, exc)\n"
        "try:\n"
        "    print('RESOLVED', socket.gethostbyname('deb.debian.org'))\n"
        "except OSError as exc:\n"
        "    print('no dns', exc)\n"
    )
    try:
        result = sandbox.exec(["python3", "-c", probe], timeout=60)
        try:
            conn, _ = listener.accept()
            conn.close()
            reached_host = True
        except TimeoutError:
            reached_host = False
    finally:
        listener.close()
    assert result.exit_code == 0, result
    assert "CONNECTED" not in result.stdout and "RESOLVED" not in result.stdout, result.stdout
    assert not reached_host, "a connection from the sandbox reached a listener on the host"
    interfaces = sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1").stdout.split()
    assert interfaces == ["lo"], f"the sandbox sees network interfaces {interfaces}"


def test_host_files_are_unreadable(sandbox: Sandbox, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    secret = tmp_path / "secret.txt"
    secret.write_text(token)
    secret.chmod(0o644)
    result = sandbox.exec(f"cat {secret}; cat /etc/shadow; ls /root; cat /proc/1/environ | tr '\\0' '\\n'")
    assert token not in result.stdout + result.stderr
    assert "root:" not in result.stdout, "/etc/shadow was readable"
    assert sandbox.exec(f"grep -rs {token} /tmp /work /home /etc /opt /srv /mnt /var 2>/dev/null").exit_code != 0


def test_no_docker_socket(sandbox: Sandbox) -> None:
    result = sandbox.exec(
        "find / \\( -path /proc -o -path /sys \\) -prune -o -type s -print 2>/dev/null; "
        "ls /var/run/docker.sock /run/docker.sock /run/containerd 2>&1; env | grep -i docker",
        timeout=60,
    )
    sockets = [line for line in result.stdout.splitlines() if line.startswith("/")]
    assert not [s for s in sockets if "docker" in s or "containerd" in s], sockets
    assert "DOCKER_HOST" not in result.stdout


def test_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    outcome: dict[str, object] = {}

    def bomb() -> None:
        outcome["result"] = sandbox.exec("bomb() { bomb | bomb & }; bomb; sleep 3", timeout=8)

    thread = threading.Thread(target=bomb)
    thread.start()
    host = subprocess.run(["python3", "-c", "print(sum(range(10**5)))"], capture_output=True, text=True, timeout=60)
    thread.join(timeout=120)
    assert not thread.is_alive(), "the fork-bomb exec never returned"
    assert host.stdout.strip() == str(sum(range(10**5))), "the host could not run a process during the fork bomb"
    sandbox.reset()
    after = sandbox.exec("ps -e --no-headers | wc -l")
    assert after.ok and int(after.stdout) <= 6, f"processes left after reset: {after.stdout}"


def test_process_count_stops_at_pids_limit(sandbox: Sandbox) -> None:
    result = sandbox.exec("for i in $(seq 200); do sleep 30 & done; sleep 1; ps -e --no-headers | wc -l", timeout=20)
    assert "fork" in result.stderr.lower() or "resource temporarily unavailable" in result.stderr.lower(), result
    sandbox.reset()


def test_memory_hog_is_stopped(sandbox: Sandbox) -> None:
    result = sandbox.exec(["python3", "-c", "x = b'a' * (1 << 30); print('survived')"], timeout=60)
    assert not result.ok and "survived" not in result.stdout, result
    assert sandbox.exec("echo still here").stdout == "still here\n"


def test_memory_hog_reports_oom(sandbox: Sandbox, backend: str) -> None:
    unsupported(backend, "oom_killed")
    result = sandbox.exec(["python3", "-c", "x = b'a' * (1 << 30)"], timeout=60)
    assert result.oom_killed and result.exit_code == 137, result
    assert "memory" in (result.error or "")


def test_disk_fill_stops_at_the_limit(sandbox: Sandbox) -> None:
    limit = SMALL.disk_bytes
    for path in ("/work/fill", "/tmp/fill"):
        result = sandbox.exec(f"dd if=/dev/zero of={path} bs=1M count=1000 2>&1; stat -c %s {path}", timeout=60)
        assert "No space left" in result.stdout or "File too large" in result.stdout, result
        assert int(result.stdout.split()[-1]) <= limit
    assert sandbox.exec("echo ok").ok


def test_infinite_loop_times_out(sandbox: Sandbox) -> None:
    result = sandbox.exec("while :; do :; done", timeout=1.5)
    assert result.timed_out and result.exit_code == 137 and not result.ok, result
    result = sandbox.exec(["python3", "-c", "while True: pass"], timeout=1.5)
    assert result.timed_out, result
    left = sandbox.exec("ps -eo args --no-headers").stdout
    assert "while True" not in left and "while :" not in left, left


def test_writes_outside_workdir_fail(sandbox: Sandbox) -> None:
    marker = f"agentgym-escape-{uuid.uuid4().hex[:8]}"
    targets = [f"/{marker}", f"/etc/{marker}", f"/usr/{marker}", f"/usr/local/bin/{marker}", f"/var/tmp/{marker}",
               f"/home/agent/{marker}", f"/root/{marker}"]
    result = sandbox.exec("; ".join(f"touch {t} && echo WROTE {t}" for t in targets))
    assert "WROTE" not in result.stdout, result.stdout
    for target in targets:
        assert not Path(target).exists(), f"{target} appeared on the host"
    assert sandbox.exec("touch /work/ok /tmp/ok && echo fine").stdout == "fine\n"


def test_cannot_become_root_or_gain_capabilities(sandbox: Sandbox) -> None:
    status = sandbox.exec("cat /proc/self/status").stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, f"{cap} is {fields[cap].strip()}"
    assert fields["NoNewPrivs"].strip() == "1"
    assert fields["Uid"].split()[:4] == ["1000"] * 4
    attempts = sandbox.exec(
        "python3 -c 'import os; os.setuid(0)' 2>&1; su -c id root </dev/null 2>&1; "
        "unshare -r id 2>&1; for b in $(find / -xdev -perm -4000 -type f 2>/dev/null); do $b --help >/dev/null 2>&1; done; id -u"
    )
    assert "uid=0" not in attempts.stdout, attempts.stdout
    assert attempts.stdout.split()[-1] == "1000"


def test_huge_output_is_truncated(sandbox: Sandbox) -> None:
    result = sandbox.exec("head -c 10000000 /dev/zero | tr '\\0' x; head -c 3000000 /dev/zero | tr '\\0' y >&2")
    assert result.ok and result.truncated, result.error
    assert result.stdout.startswith("x" * 1000)
    assert len(result.stdout) < SMALL.output_bytes + 200 and len(result.stderr) < SMALL.output_bytes + 200
    assert "[agentgym: output truncated" in result.stdout and "9934464 more bytes dropped" in result.stdout
    assert "[agentgym: output truncated" in result.stderr
